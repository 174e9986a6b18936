package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// endpointHealth is the delivery health an endpoint shows (issue 13).
type endpointHealth struct {
	endpointView
	FailureCount   int     `json:"failure_count"`
	DisabledReason *string `json:"disabled_reason"`
	DisabledAt     *int64  `json:"disabled_at"`
	LastDeliveryAt *int64  `json:"last_delivery_at"`
}

func getEndpointOK(t *testing.T, h *harness, key, id string) endpointHealth {
	t.Helper()
	r := h.do("GET", "/v1/webhook-endpoints/"+id, key, nil)
	wantOK(t, r)
	var e endpointHealth
	r.data(t, &e)
	return e
}

func TestEndpointGetAndScoping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)
	ep := createEndpointOK(t, h, aTest, map[string]any{"url": publicHook, "description": "orders"})

	got := getEndpointOK(t, h, aTest, ep.ID)
	if got.ID != ep.ID || got.URL != publicHook || deref(got.Description) != "orders" || got.Status != "enabled" ||
		got.Secret != nil || got.FailureCount != 0 || got.DisabledReason != nil || got.DisabledAt != nil || got.LastDeliveryAt != nil {
		t.Errorf("got %+v, want the endpoint enabled, no failures, never delivered, no secret", got)
	}
	for _, c := range []struct{ name, key, id string }{
		{"another merchant", bTest, ep.ID},
		{"another mode", aLive, ep.ID},
		{"unknown id", aTest, "we_doesnotexist0000000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("GET", "/v1/webhook-endpoints/"+c.id, c.key, nil), http.StatusNotFound, "endpoint_not_found")
			wantError(t, h.do("POST", "/v1/webhook-endpoints/"+c.id, c.key, map[string]any{"status": "disabled"}),
				http.StatusNotFound, "endpoint_not_found")
		})
	}
	if got := getEndpointOK(t, h, aTest, ep.ID); got.Status != "enabled" {
		t.Errorf("after refused updates: got status %q, want enabled", got.Status)
	}
	wantOK(t, h.do("DELETE", "/v1/webhook-endpoints/"+ep.ID, aTest, nil))
	wantError(t, h.do("GET", "/v1/webhook-endpoints/"+ep.ID, aTest, nil), http.StatusNotFound, "endpoint_not_found")
	wantError(t, h.do("POST", "/v1/webhook-endpoints/"+ep.ID, aTest, map[string]any{"status": "enabled"}),
		http.StatusNotFound, "endpoint_not_found")
}

func TestEndpointUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	ep := createEndpointOK(t, h, key, map[string]any{"url": publicHook, "description": "orders"})
	update := func(body map[string]any) endpointHealth {
		t.Helper()
		r := h.do("POST", "/v1/webhook-endpoints/"+ep.ID, key, body)
		wantOK(t, r)
		var e endpointHealth
		r.data(t, &e)
		if e.Secret != nil {
			t.Errorf("update answered with a secret")
		}
		if g := getEndpointOK(t, h, key, ep.ID); g.URL != e.URL || !slices.Equal(g.Events, e.Events) || g.Status != e.Status ||
			deref(g.Description) != deref(e.Description) {
			t.Errorf("GET after update: got %+v, want what the update returned, %+v", g, e)
		}
		return e
	}

	e := update(map[string]any{"url": publicHook + "/v2", "events": []string{"charge.refunded", "charge.dispute.created"}})
	if e.URL != publicHook+"/v2" || !slices.Equal(e.Events, []string{"charge.refunded", "charge.dispute.created"}) ||
		deref(e.Description) != "orders" || e.Status != "enabled" {
		t.Errorf("url and events: got %+v, want both changed, description kept", e)
	}
	if e := update(map[string]any{"description": ""}); e.Description != nil || e.URL != publicHook+"/v2" {
		t.Errorf("description \"\": got %+v, want it cleared, the rest kept", e)
	}
	if e := update(map[string]any{}); e.URL != publicHook+"/v2" || e.Status != "enabled" {
		t.Errorf("empty body: got %+v, want nothing changed", e)
	}
	e = update(map[string]any{"status": "disabled"})
	if e.Status != "disabled" || deref(e.DisabledReason) != payments.DisabledManual || e.DisabledAt == nil {
		t.Errorf("disable: got %+v, want disabled, reason manual, disabled_at set", e)
	}
	e = update(map[string]any{"status": "enabled"})
	if e.Status != "enabled" || e.DisabledReason != nil || e.DisabledAt != nil || e.FailureCount != 0 {
		t.Errorf("re-enable: got %+v, want enabled, no reason, no disabled_at, no failures", e)
	}

	for _, c := range []struct {
		name string
		body map[string]any
		code string
	}{
		{"http url", map[string]any{"url": "http://93.184.215.14/hook"}, "webhook_url_must_be_https"},
		{"private url", map[string]any{"url": "https://10.0.0.1/hook"}, "validation_error"},
		{"unknown event", map[string]any{"events": []string{"charge.nope"}}, "validation_error"},
		{"empty events", map[string]any{"events": []string{}}, "validation_error"},
		{"unknown status", map[string]any{"status": "paused"}, "validation_error"},
		{"unknown field", map[string]any{"secret": "whsec_x"}, "validation_error"},
		{"status wrong type", map[string]any{"status": true}, "validation_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("POST", "/v1/webhook-endpoints/"+ep.ID, key, c.body), http.StatusBadRequest, c.code)
		})
	}
	if g := getEndpointOK(t, h, key, ep.ID); g.URL != publicHook+"/v2" || g.Status != "enabled" {
		t.Errorf("after refused updates: got %+v, want unchanged", g)
	}
}

// deliveryView is a delivery as the API returns it.
type deliveryView struct {
	ID               string  `json:"id"`
	Endpoint         string  `json:"endpoint"`
	Event            string  `json:"event"`
	EventType        string  `json:"event_type"`
	Status           string  `json:"status"`
	Attempts         int     `json:"attempts"`
	LastHTTPStatus   *int    `json:"last_http_status"`
	LastResponseBody *string `json:"last_response_body"`
	LastError        *string `json:"last_error"`
	NextRetryAt      *int64  `json:"next_retry_at"`
	Created          int64   `json:"created"`
	DeliveredAt      *int64  `json:"delivered_at"`
	AttemptLog       *[]struct {
		HTTPStatus *int    `json:"http_status"`
		Error      *string `json:"error"`
	} `json:"attempt_log"`
}

func listDeliveries(t *testing.T, h *harness, key, endpointID, query string) ([]deliveryView, bool) {
	t.Helper()
	r := h.do("GET", "/v1/webhook-endpoints/"+endpointID+"/deliveries?"+query, key, nil)
	wantOK(t, r)
	var page struct {
		Data    []deliveryView `json:"data"`
		HasMore bool           `json:"has_more"`
	}
	r.data(t, &page)
	return page.Data, page.HasMore
}

func deliveryIDs(ds []deliveryView) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// TestDeliveryLogPagingAndScoping: the delivery log is paged newest first,
// filtered by status, and another merchant's or mode's key gets 404.
// Nothing is sent here (no worker): every delivery stays pending.
func TestDeliveryLogPagingAndScoping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{allowPrivateWebhooks: true})
	s, other := newShop(h), newShop(h)
	we := createEndpointOK(t, h, s.key, map[string]any{"url": "https://hooks.example/in"})
	var want []string // event ids, oldest first
	for range 3 {
		payIntent(t, h, s.key, 1500, sandbox.CardSuccess)
		ids, _ := listEventIDs(t, h, s.key, "limit=1")
		want = append(want, ids[0])
	}

	all, more := listDeliveries(t, h, s.key, we.ID, "limit=100")
	if len(all) != 3 || more {
		t.Fatalf("got %d deliveries (has_more %v), want 3", len(all), more)
	}
	for i, d := range all {
		if d.Event != want[len(want)-1-i] || d.EventType != "payment_intent.succeeded" || d.Endpoint != we.ID ||
			d.Status != "pending" || d.Attempts != 0 || d.NextRetryAt == nil || d.LastHTTPStatus != nil ||
			d.LastResponseBody != nil || d.LastError != nil || d.DeliveredAt != nil || d.AttemptLog != nil {
			t.Errorf("delivery %d: got %+v, want pending, no attempt yet, of event %s", i, d, want[len(want)-1-i])
		}
	}
	first, more := listDeliveries(t, h, s.key, we.ID, "limit=2")
	if !more || !slices.Equal(deliveryIDs(first), deliveryIDs(all[:2])) {
		t.Errorf("page 1: got %v (has_more %v), want %v and more", deliveryIDs(first), more, deliveryIDs(all[:2]))
	}
	rest, more := listDeliveries(t, h, s.key, we.ID, "limit=2&starting_after="+first[1].ID)
	if more || !slices.Equal(deliveryIDs(rest), deliveryIDs(all[2:])) {
		t.Errorf("page 2: got %v (has_more %v), want %v and no more", deliveryIDs(rest), more, deliveryIDs(all[2:]))
	}
	if got, _ := listDeliveries(t, h, s.key, we.ID, "status=pending"); len(got) != 3 {
		t.Errorf("status=pending: got %d, want 3", len(got))
	}
	if got, _ := listDeliveries(t, h, s.key, we.ID, "status=succeeded"); len(got) != 0 {
		t.Errorf("status=succeeded: got %d, want 0", len(got))
	}
	r := h.do("GET", "/v1/webhook-endpoints/"+we.ID+"/deliveries/"+all[0].ID, s.key, nil)
	wantOK(t, r)
	var one deliveryView
	r.data(t, &one)
	if one.ID != all[0].ID || one.AttemptLog == nil || len(*one.AttemptLog) != 0 {
		t.Errorf("one delivery: got %+v, want %s with an empty attempt_log", one, all[0].ID)
	}

	for _, c := range []struct {
		name, key, path string
		status          int
		code            string
	}{
		{"bad status", s.key, "/deliveries?status=sent", 400, "validation_error"},
		{"unknown starting_after", s.key, "/deliveries?starting_after=whd_nope", 400, "validation_error"},
		{"another merchant", other.key, "/deliveries", 404, "endpoint_not_found"},
		{"another mode", s.liveKey, "/deliveries", 404, "endpoint_not_found"},
		{"another merchant's delivery", other.key, "/deliveries/" + all[0].ID, 404, "endpoint_not_found"},
		{"unknown delivery", s.key, "/deliveries/whd_nope", 404, "endpoint_not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("GET", "/v1/webhook-endpoints/"+we.ID+c.path, c.key, nil), c.status, c.code)
		})
	}
}

// TestResendRules: a resend is a new pending delivery of the same event to
// an enabled endpoint that receives its type; anything else is refused.
func TestResendRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{allowPrivateWebhooks: true})
	s, other := newShop(h), newShop(h)
	payIntent(t, h, s.key, 1500, sandbox.CardSuccess)
	evs, _ := listEventIDs(t, h, s.key, "limit=1")
	ev := evs[0]
	// Created after the event: it has no delivery of it.
	we := createEndpointOK(t, h, s.key, map[string]any{"url": "https://hooks.example/in"})
	refunds := createEndpointOK(t, h, s.key, map[string]any{"url": "https://hooks.example/r", "events": []string{"charge.refunded"}})
	off := createEndpointOK(t, h, s.key, map[string]any{"url": "https://hooks.example/off"})
	wantOK(t, h.do("POST", "/v1/webhook-endpoints/"+off.ID, s.key, map[string]any{"status": "disabled"}))
	theirs := createEndpointOK(t, h, other.key, map[string]any{"url": "https://hooks.example/theirs"})

	for _, c := range []struct {
		name, key, event string
		body             map[string]any
		status           int
		code             string
	}{
		{"no endpoint", s.key, ev, map[string]any{}, 400, "validation_error"},
		{"unknown event", s.key, "evt_nope", map[string]any{"endpoint": we.ID}, 404, "endpoint_not_found"},
		{"unknown endpoint", s.key, ev, map[string]any{"endpoint": "we_nope"}, 404, "endpoint_not_found"},
		{"another merchant's endpoint", s.key, ev, map[string]any{"endpoint": theirs.ID}, 404, "endpoint_not_found"},
		{"another merchant's event", other.key, ev, map[string]any{"endpoint": theirs.ID}, 404, "endpoint_not_found"},
		{"another mode", s.liveKey, ev, map[string]any{"endpoint": we.ID}, 404, "endpoint_not_found"},
		{"disabled endpoint", s.key, ev, map[string]any{"endpoint": off.ID}, 400, "validation_error"},
		{"not subscribed", s.key, ev, map[string]any{"endpoint": refunds.ID}, 400, "validation_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("POST", "/v1/events/"+c.event+"/resend", c.key, c.body), c.status, c.code)
		})
	}
	if got, _ := listDeliveries(t, h, s.key, we.ID, ""); len(got) != 0 {
		t.Fatalf("after refused resends: got %d deliveries, want none", len(got))
	}

	for i := range 2 {
		r := h.do("POST", "/v1/events/"+ev+"/resend", s.key, map[string]any{"endpoint": we.ID})
		wantOK(t, r)
		var d deliveryView
		r.data(t, &d)
		if d.Event != ev || d.Endpoint != we.ID || d.Status != "pending" || d.EventType != "payment_intent.succeeded" || d.NextRetryAt == nil {
			t.Errorf("resend %d: got %+v, want a pending delivery of %s to %s", i, d, ev, we.ID)
		}
	}
	got, _ := listDeliveries(t, h, s.key, we.ID, "")
	if len(got) != 2 || got[0].ID == got[1].ID || got[0].Event != ev || got[1].Event != ev {
		t.Errorf("deliveries after two resends: got %+v, want two of %s", got, ev)
	}
	// Written with their event's type, which the delivery log reads from
	// the delivery alone (migration 0020).
	var typed int
	if err := h.db.Get(&typed, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1 AND event_type = 'payment_intent.succeeded'`, we.ID); err != nil || typed != 2 {
		t.Errorf("resent deliveries with their event's type: %d, %v; want 2", typed, err)
	}
}

func TestEndpointRotateSecret(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s, other := newShop(h), newShop(h)
	ep := createEndpointOK(t, h, s.key, map[string]any{"url": publicHook})
	rotate := func(body any) (endpointView, int64) {
		t.Helper()
		r := h.do("POST", "/v1/webhook-endpoints/"+ep.ID+"/rotate-secret", s.key, body)
		wantOK(t, r)
		var e struct {
			endpointView
			PreviousSecretExpiresAt *int64 `json:"previous_secret_expires_at"`
		}
		r.data(t, &e)
		if e.Secret == nil || !secretPattern.MatchString(*e.Secret) || e.PreviousSecretExpiresAt == nil {
			t.Fatalf("rotate: got %s, want a new secret and previous_secret_expires_at", r.Raw)
		}
		return e.endpointView, *e.PreviousSecretExpiresAt
	}
	now := time.Now().Unix()
	first, until := rotate(nil) // no body: the default grace
	if *first.Secret == *ep.Secret || until < now+86400-5 || until > now+86400+5 {
		t.Errorf("default rotation: got secret changed %v, grace until %d, want a new secret until about %d",
			*first.Secret != *ep.Secret, until, now+86400)
	}
	second, until := rotate(map[string]any{"grace_period": 604800})
	if *second.Secret == *first.Secret || until < now+604800-5 {
		t.Errorf("7-day rotation: got grace until %d, want about %d", until, now+604800)
	}
	r := h.do("POST", "/v1/webhook-endpoints/"+ep.ID+"/rotate-secret", s.key, map[string]any{"grace_period": 0})
	wantOK(t, r)
	var zero struct {
		PreviousSecretExpiresAt *int64 `json:"previous_secret_expires_at"`
	}
	r.data(t, &zero)
	if zero.PreviousSecretExpiresAt != nil {
		t.Errorf("grace_period 0: got previous_secret_expires_at %d, want null (the old secret retired at once)", *zero.PreviousSecretExpiresAt)
	}
	if g := h.do("GET", "/v1/webhook-endpoints/"+ep.ID, s.key, nil); strings.Contains(string(g.Raw), "whsec_") {
		t.Errorf("GET after rotation shows a secret: %s", g.Raw)
	}
	for _, c := range []struct {
		name, key string
		body      any
		status    int
		code      string
	}{
		{"negative grace", s.key, map[string]any{"grace_period": -1}, 400, "validation_error"},
		{"grace over 7 days", s.key, map[string]any{"grace_period": 604801}, 400, "validation_error"},
		{"grace not a number", s.key, map[string]any{"grace_period": "1h"}, 400, "validation_error"},
		{"unknown field", s.key, map[string]any{"expires": 1}, 400, "validation_error"},
		{"another merchant", other.key, nil, 404, "endpoint_not_found"},
		{"another mode", s.liveKey, nil, 404, "endpoint_not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("POST", "/v1/webhook-endpoints/"+ep.ID+"/rotate-secret", c.key, c.body), c.status, c.code)
		})
	}
}
