package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

type apiEvent struct {
	ID       string         `json:"id"`
	Type     string         `json:"type"`
	Created  int64          `json:"created"`
	Livemode bool           `json:"livemode"`
	Data     map[string]any `json:"data"`
}

// insertEvent writes an event row directly (as the outbox would) and
// returns its id.
func insertEvent(t *testing.T, h *harness, sc payments.Scope, typ string, created time.Time) string {
	t.Helper()
	id := payments.NewID("evt_")
	_, err := h.db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		id, sc.MerchantID, sc.Live, typ, fmt.Sprintf(`{"id": "obj_%s"}`, id), created)
	if err != nil {
		t.Fatalf("insert event: %v", err)
	}
	return id
}

// listEventIDs returns the ids of one page of GET /v1/events?query.
func listEventIDs(t *testing.T, h *harness, key, query string) ([]string, bool) {
	t.Helper()
	r := h.do("GET", "/v1/events?"+query, key, nil)
	wantOK(t, r)
	var page struct {
		Data    []apiEvent `json:"data"`
		HasMore bool       `json:"has_more"`
	}
	r.data(t, &page)
	ids := []string{}
	for _, e := range page.Data {
		ids = append(ids, e.ID)
	}
	return ids, page.HasMore
}

func TestEventsListFilters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	// Recent times only: the retention test prunes old events of every merchant.
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	refunded := insertEvent(t, h, s.sc, "charge.refunded", at(0))
	dispute := insertEvent(t, h, s.sc, "charge.dispute.created", at(10))
	paid := insertEvent(t, h, s.sc, "payment_intent.succeeded", at(20))
	expired := insertEvent(t, h, s.sc, "checkout.session.expired", at(30))
	closed := insertEvent(t, h, s.sc, "charge.dispute.closed", at(40).Add(400*time.Millisecond)) // created rounds to at(40)
	// Other scopes' events never show.
	other := newShop(h)
	insertEvent(t, h, other.sc, "charge.refunded", at(5))
	insertEvent(t, h, payments.Scope{MerchantID: s.id, Live: true}, "charge.refunded", at(5))

	unix := func(min int) string { return fmt.Sprint(at(min).Unix()) }
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"no filter, newest first", "", []string{closed, expired, paid, dispute, refunded}},
		{"exact type", "type=charge.refunded", []string{refunded}},
		{"exact type with a longer sibling", "type=charge.dispute.created", []string{dispute}},
		{"prefix", "type=charge.*", []string{closed, dispute, refunded}},
		{"longer prefix", "type=charge.dispute.*", []string{closed, dispute}},
		{"prefix within a word", "type=checkout.sess*", []string{expired}},
		{"star alone", "type=*", []string{closed, expired, paid, dispute, refunded}},
		{"type with no events", "type=customer.subscription.created", []string{}},
		{"created gte", "created[gte]=" + unix(20), []string{closed, expired, paid}},
		{"created lte", "created[lte]=" + unix(10), []string{dispute, refunded}},
		{"created range", "created[gte]=" + unix(10) + "&created[lte]=" + unix(30), []string{expired, paid, dispute}},
		{"created lte takes the rounded second", "created[lte]=" + unix(40), []string{closed, expired, paid, dispute, refunded}},
		{"created gte takes the rounded second", "created[gte]=" + unix(40), []string{closed}},
		{"created past the last", "created[gte]=" + fmt.Sprint(at(40).Unix()+1), []string{}},
		{"type and range", "type=charge.*&created[gte]=" + unix(5), []string{closed, dispute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, more := listEventIDs(t, h, s.key, tc.query)
			if !slices.Equal(got, tc.want) || more {
				t.Errorf("GET /v1/events?%s: got %v (has_more %v), want %v (has_more false)", tc.query, got, more, tc.want)
			}
		})
	}

	for _, tc := range []struct{ query, field string }{
		{"type=charge", "type"},
		{"type=charge.", "type"},
		{"type=", "type"},
		{"type=bogus.*", "type"},
		{"type=charge.refunded*x", "type"},
		{"type=" + url.QueryEscape("charge%*"), "type"},
		{"created[gte]=abc", "created[gte]"},
		{"created[gte]=1.5", "created[gte]"},
		{"created[lte]=-1", "created[lte]"},
		{"created[lte]=99999999999999999999", "created[lte]"},
		{"limit=0", "limit"},
		{"limit=101", "limit"},
	} {
		t.Run("bad "+tc.query, func(t *testing.T) {
			r := h.do("GET", "/v1/events?"+tc.query, s.key, nil)
			wantError(t, r, http.StatusBadRequest, "validation_error")
			if r.Body.Error != nil && !strings.HasPrefix(r.Body.Error.Message, tc.field+" ") {
				t.Errorf("got message %q, want it to name %s", r.Body.Error.Message, tc.field)
			}
		})
	}
}

func TestEventsPaging(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	base := time.Now().Add(-time.Hour)
	// Three types in turn, pairs sharing a created_at (id breaks the tie):
	// a filtered page merges its types' events in the same order.
	types := []string{"charge.refunded", "charge.dispute.created", "payment_intent.succeeded"}
	for i := range 25 {
		insertEvent(t, h, s.sc, types[i%3], base.Add(time.Duration(i/2)*time.Second))
	}
	// Newest first: created_at desc, then id desc (in the database's collation).
	expect := func(types ...string) []string {
		var ids []string
		if err := h.db.Select(&ids, `SELECT id FROM events WHERE merchant_id = $1 AND livemode = false AND type = ANY($2)
			ORDER BY created_at DESC, id DESC`, s.id, pq.StringArray(types)); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, tc := range []struct {
		filter string
		limit  int
		want   []string
	}{
		{"", 10, expect(types...)},
		{"&type=charge.*", 4, expect(types[:2]...)},
		{"&type=charge.dispute.created", 3, expect(types[1])},
	} {
		var got []string
		query, pages := fmt.Sprintf("limit=%d", tc.limit)+tc.filter, 0
		wantPages := (len(tc.want) + tc.limit - 1) / tc.limit
		for {
			ids, more := listEventIDs(t, h, s.key, query)
			pages++
			got = append(got, ids...)
			if wantMore := pages < wantPages; more != wantMore {
				t.Errorf("%s page %d: got has_more %v, want %v", tc.filter, pages, more, wantMore)
			}
			if !more || pages > wantPages {
				break
			}
			query = fmt.Sprintf("limit=%d&starting_after=%s", tc.limit, ids[len(ids)-1]) + tc.filter
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s pages joined: got %v, want %v", tc.filter, got, tc.want)
		}
	}
	if ids, _ := listEventIDs(t, h, s.key, ""); len(ids) != payments.DefaultLimit {
		t.Errorf("default page: got %d events, want %d", len(ids), payments.DefaultLimit)
	}

	// A cursor the key cannot see is unknown.
	other := newShop(h)
	foreign := insertEvent(t, h, other.sc, "payment_intent.succeeded", base)
	for _, id := range []string{"evt_unknown", foreign} {
		r := h.do("GET", "/v1/events?starting_after="+id, s.key, nil)
		wantError(t, r, http.StatusBadRequest, "validation_error")
	}
}

func TestEventScoping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	test := insertEvent(t, h, s.sc, "charge.refunded", time.Now())
	live := insertEvent(t, h, payments.Scope{MerchantID: s.id, Live: true}, "charge.refunded", time.Now())
	other := newShop(h)
	foreign := insertEvent(t, h, other.sc, "charge.refunded", time.Now())

	for _, tc := range []struct{ name, key, id string }{
		{"test key, live event", s.key, live},
		{"live key, test event", s.liveKey, test},
		{"another merchant's event", s.key, foreign},
		{"unknown", s.key, "evt_doesnotexist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do("GET", "/v1/events/"+tc.id, tc.key, nil)
			wantError(t, r, http.StatusNotFound, "endpoint_not_found")
			if want := "No such event: '" + tc.id + "'"; r.Body.Error != nil && r.Body.Error.Message != want {
				t.Errorf("got message %q, want %q", r.Body.Error.Message, want)
			}
		})
	}
	for key, want := range map[string]string{s.key: test, s.liveKey: live, other.key: foreign} {
		if ids, _ := listEventIDs(t, h, key, ""); !slices.Equal(ids, []string{want}) {
			t.Errorf("list: got %v, want only %s", ids, want)
		}
		wantOK(t, h.do("GET", "/v1/events/"+want, key, nil))
	}
}

// TestEventIsTheDeliveredPayload: GET /v1/events/{id} and the list return
// exactly the body a delivery of the event sends and signs.
func TestEventIsTheDeliveredPayload(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{allowPrivateWebhooks: true})
	s := newShop(h)
	createEndpointOK(t, h, s.key, map[string]any{"url": "https://hooks.example/in"})
	pi := payIntent(t, h, s.key, 1234, sandbox.CardSuccess)

	var deliveryID, eventID string
	err := h.db.QueryRow(`SELECT d.id, d.event_id FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
		WHERE d.merchant_id = $1 AND d.livemode = false AND e.type = 'payment_intent.succeeded'`, s.id).Scan(&deliveryID, &eventID)
	if err != nil {
		t.Fatalf("find the delivery: %v", err)
	}
	d, err := h.store.DeliveryForSend(context.Background(), s.sc, deliveryID)
	if err != nil {
		t.Fatal(err)
	}
	var sent bytes.Buffer
	if err := json.Compact(&sent, d.Payload); err != nil {
		t.Fatal(err)
	}

	r := h.do("GET", "/v1/events/"+eventID, s.key, nil)
	wantOK(t, r)
	if got := string(r.Body.Data); got != sent.String() {
		t.Errorf("GET /v1/events/%s:\n got %s\nwant %s (the delivered body)", eventID, got, sent.String())
	}
	var ev apiEvent
	r.data(t, &ev)
	if ev.ID != eventID || ev.Type != payments.EventPaymentSucceeded || ev.Data["id"] != pi || ev.Livemode {
		t.Errorf("got %+v, want %s payment_intent.succeeded of %s in test mode", ev, eventID, pi)
	}

	lr := h.do("GET", "/v1/events?type=payment_intent.succeeded", s.key, nil)
	wantOK(t, lr)
	var page struct{ Data []json.RawMessage }
	lr.data(t, &page)
	if len(page.Data) != 1 || string(page.Data[0]) != sent.String() {
		t.Errorf("list: got %s, want [%s]", lr.Body.Data, sent.String())
	}
}
