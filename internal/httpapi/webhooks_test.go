package httpapi_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// publicHook is a public address (example.com's), so registration passes
// the SSRF check without DNS; nothing is delivered in these tests.
const publicHook = "https://93.184.215.14/hook"

// endpointView is a webhook endpoint as the API returns it.
type endpointView struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Status      string   `json:"status"`
	Description *string  `json:"description"`
	Livemode    bool     `json:"livemode"`
	Created     int64    `json:"created"`
	Secret      *string  `json:"secret"`
}

var secretPattern = regexp.MustCompile(`^whsec_[A-Za-z0-9+/]{43}=$`) // base64 of 32 bytes (Standard Webhooks)

// createEndpointOK registers an endpoint and returns it with its secret.
func createEndpointOK(t *testing.T, h *harness, key string, body any, headers ...string) endpointView {
	t.Helper()
	r := h.do("POST", "/v1/webhook-endpoints", key, body, headers...)
	wantOK(t, r)
	var e endpointView
	r.data(t, &e)
	return e
}

// listEndpoints returns GET /v1/webhook-endpoints, checking it is an array
// in data whose items never carry a secret.
func listEndpoints(t *testing.T, h *harness, key string) []endpointView {
	t.Helper()
	r := h.do("GET", "/v1/webhook-endpoints", key, nil)
	wantOK(t, r)
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(r.Body.Data, &raw); err != nil {
		t.Fatalf("got data %s, want an array of endpoints: %v", r.Body.Data, err)
	}
	for _, e := range raw {
		if _, ok := e["secret"]; ok {
			t.Errorf("got a secret in the list: %s", r.Body.Data)
		}
	}
	var out []endpointView
	r.data(t, &out)
	return out
}

func endpointIDs(es []endpointView) []string {
	ids := make([]string, 0, len(es))
	for _, e := range es {
		ids = append(ids, e.ID)
	}
	return ids
}

func TestEndpointCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	testKey, liveKey := h.key(m, false), h.key(m, true)
	cases := []struct {
		name     string
		key      string
		body     map[string]any
		wantLive bool
		events   []string
		desc     *string
	}{
		{"defaults, test key", testKey, map[string]any{"url": publicHook}, false, []string{"*"}, nil},
		{"defaults, live key", liveKey, map[string]any{"url": publicHook}, true, []string{"*"}, nil},
		{"explicit star", testKey, map[string]any{"url": publicHook, "events": []string{"*"}}, false, []string{"*"}, nil},
		{"event types and description", testKey, map[string]any{"url": publicHook + "?v=1",
			"events": []string{"payment_intent.succeeded", "checkout.session.completed"}, "description": "orders"},
			false, []string{"payment_intent.succeeded", "checkout.session.completed"}, ptr("orders")},
		{"every event type", liveKey, map[string]any{"url": publicHook, "events": payments.EventTypes},
			true, payments.EventTypes, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now().Unix()
			e := createEndpointOK(t, h, c.key, c.body)
			if !strings.HasPrefix(e.ID, "we_") || len(e.ID) < len("we_")+20 {
				t.Errorf("got id %q, want we_ and at least 20 characters", e.ID)
			}
			if e.Secret == nil || !secretPattern.MatchString(*e.Secret) {
				t.Errorf("got secret %v, want whsec_ and at least 32 base62 characters", e.Secret)
			}
			if e.URL != c.body["url"] {
				t.Errorf("got url %q, want %q", e.URL, c.body["url"])
			}
			if !slices.Equal(e.Events, c.events) {
				t.Errorf("got events %v, want %v", e.Events, c.events)
			}
			if e.Status != "enabled" {
				t.Errorf("got status %q, want enabled", e.Status)
			}
			if deref(e.Description) != deref(c.desc) || (e.Description == nil) != (c.desc == nil) {
				t.Errorf("got description %v, want %v", e.Description, c.desc)
			}
			if e.Livemode != c.wantLive {
				t.Errorf("got livemode %v, want %v", e.Livemode, c.wantLive)
			}
			if e.Created < before-1 || e.Created > time.Now().Unix()+1 {
				t.Errorf("got created %d, want about %d", e.Created, before)
			}
		})
	}

	// Two endpoints never share a secret.
	a := createEndpointOK(t, h, testKey, map[string]any{"url": publicHook})
	b := createEndpointOK(t, h, testKey, map[string]any{"url": publicHook})
	if *a.Secret == *b.Secret {
		t.Errorf("got the same secret %q for %s and %s, want different", *a.Secret, a.ID, b.ID)
	}
}

func TestEndpointCreateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	cases := []struct {
		name     string
		body     any
		code     string
		mentions string // in the error message
	}{
		{"http url", map[string]any{"url": "http://93.184.215.14/hook"}, "webhook_url_must_be_https", ""},
		{"http url of a name", map[string]any{"url": "http://example.com/hook"}, "webhook_url_must_be_https", ""},
		{"missing url", map[string]any{"events": []string{"*"}}, "validation_error", "url"},
		{"empty url", map[string]any{"url": ""}, "validation_error", "url"},
		{"null url", map[string]any{"url": nil}, "validation_error", "url"},
		{"not a URL", map[string]any{"url": "not a url"}, "validation_error", "url"},
		{"relative url", map[string]any{"url": "/hook"}, "validation_error", "url"},
		{"url not a string", map[string]any{"url": 42}, "validation_error", "url"},
		{"url with credentials", map[string]any{"url": "https://user:pass@93.184.215.14/hook"}, "validation_error", "url"},
		{"port 0", map[string]any{"url": "https://93.184.215.14:0/hook"}, "validation_error", "url"},
		{"port over 65535", map[string]any{"url": "https://93.184.215.14:99999/hook"}, "validation_error", "url"},
		{"port without a host", map[string]any{"url": "https://:443/hook"}, "validation_error", "url"},
		{"url too long", map[string]any{"url": publicHook + "?" + strings.Repeat("a", 2048)}, "validation_error", "url"},
		{"unknown event type", map[string]any{"url": publicHook, "events": []string{"payment_intent.succeeded", "payment.succeeded"}},
			"validation_error", "events[1]"},
		{"unknown event type first", map[string]any{"url": publicHook, "events": []string{"charge.failed"}},
			"validation_error", "events[0]"},
		{"event type with other case", map[string]any{"url": publicHook, "events": []string{"Charge.Refunded"}},
			"validation_error", "events[0]"},
		{"duplicate event type", map[string]any{"url": publicHook, "events": []string{"charge.refunded", "charge.dispute.created", "charge.refunded"}},
			"validation_error", "events[2]"},
		{"duplicate star", map[string]any{"url": publicHook, "events": []string{"*", "*"}}, "validation_error", "events"},
		{"empty events", map[string]any{"url": publicHook, "events": []string{}}, "validation_error", "events"},
		{"star mixed with a type", map[string]any{"url": publicHook, "events": []string{"*", "charge.refunded"}},
			"validation_error", "events"},
		{"type mixed with star", map[string]any{"url": publicHook, "events": []string{"charge.refunded", "*"}},
			"validation_error", "events"},
		{"events not an array", map[string]any{"url": publicHook, "events": "*"}, "validation_error", "events"},
		{"description not a string", map[string]any{"url": publicHook, "description": 1}, "validation_error", "description"},
		{"unknown field", map[string]any{"url": publicHook, "secret": "whsec_mine"}, "validation_error", "secret"},
		{"malformed JSON", `{"url":`, "validation_error", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/webhook-endpoints", key, c.body)
			wantError(t, r, http.StatusBadRequest, c.code)
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, c.mentions) {
				t.Errorf("got message %q, want it to name %q", r.Body.Error.Message, c.mentions)
			}
		})
	}
	if got := listEndpoints(t, h, key); len(got) != 0 {
		t.Errorf("got %d endpoints after refused creations, want 0", len(got))
	}
}

// TestEndpointPrivateURLs: outside WEBHOOK_ALLOW_PRIVATE_NETWORKS, URLs on
// loopback, private, link-local and metadata addresses are refused.
func TestEndpointPrivateURLs(t *testing.T) {
	t.Parallel()
	private := []string{
		"https://127.0.0.1/hook",
		"https://10.1.2.3/",
		"https://172.16.0.5/",
		"https://192.168.1.10/hook",
		"https://169.254.169.254/latest",
		"https://100.64.0.1/",
		"https://localhost:8443/x",
		"https://[::1]/",
		"https://[fd00::1]/",
		"https://[fe80::1]/",
		"https://[::ffff:127.0.0.1]/",
		"https://0.0.0.0/",
		"https://[::1%25lo]/", // a zone must not hide the loopback address
	}
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, u := range private {
		t.Run(u, func(t *testing.T) {
			r := h.do("POST", "/v1/webhook-endpoints", key, map[string]any{"url": u})
			wantError(t, r, http.StatusBadRequest, "validation_error")
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, "url") {
				t.Errorf("got message %q, want it to name url", r.Body.Error.Message)
			}
		})
	}
	if got := listEndpoints(t, h, key); len(got) != 0 {
		t.Errorf("got endpoints %v after refused creations, want none", endpointIDs(got))
	}

	// Allowed in development (WEBHOOK_ALLOW_PRIVATE_NETWORKS=true).
	dev := newHarness(t, harnessOpts{allowPrivateWebhooks: true})
	devKey := dev.testKey()
	for _, u := range private {
		t.Run("allowed "+u, func(t *testing.T) {
			e := createEndpointOK(t, dev, devKey, map[string]any{"url": u})
			if e.URL != u {
				t.Errorf("got url %q, want %q", e.URL, u)
			}
		})
	}
}

// TestEndpointTranslatedURLs: addresses that a NAT64, 6to4 or SIIT
// translator maps onto loopback, private or metadata addresses, and reserved
// ranges, are refused at registration like the addresses themselves.
func TestEndpointTranslatedURLs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, u := range []string{
		"https://[64:ff9b:1::a9fe:a9fe]/",
		"https://[64:ff9b::a9fe:a9fe]/",
		"https://[2002:7f00:1::]/",
		"https://[::127.0.0.1]/",
		"https://[::ffff:0:127.0.0.1]/",
		"https://[fec0::1]/",
		"https://[100::1]/",
		"https://192.0.2.1/",
		"https://[2001:db8::1]/",
	} {
		t.Run(u, func(t *testing.T) {
			r := h.do("POST", "/v1/webhook-endpoints", key, map[string]any{"url": u})
			wantError(t, r, http.StatusBadRequest, "validation_error")
		})
	}
	if got := listEndpoints(t, h, key); len(got) != 0 {
		t.Errorf("got endpoints %v after refused creations, want none", endpointIDs(got))
	}
	e := createEndpointOK(t, h, key, map[string]any{"url": "https://[2606:4700::1111]/hook"})
	if e.URL != "https://[2606:4700::1111]/hook" {
		t.Errorf("got url %q, want the global address accepted", e.URL)
	}
}

func TestEndpointListAndIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest, bLive := h.key(mA, false), h.key(mA, true), h.key(mB, false), h.key(mB, true)

	if got := listEndpoints(t, h, aTest); got == nil || len(got) != 0 {
		t.Errorf("got %v before any creation, want an empty array", got)
	}
	t1 := createEndpointOK(t, h, aTest, map[string]any{"url": publicHook, "description": "first"})
	t2 := createEndpointOK(t, h, aTest, map[string]any{"url": publicHook + "/2", "events": []string{"charge.refunded"}})
	l1 := createEndpointOK(t, h, aLive, map[string]any{"url": publicHook + "/live"})

	cases := []struct {
		name string
		key  string
		want []string // ids, in any order
	}{
		{"A test sees its test endpoints", aTest, []string{t1.ID, t2.ID}},
		{"A live sees its live endpoint", aLive, []string{l1.ID}},
		{"B test sees none of A's", bTest, nil},
		{"B live sees none of A's", bLive, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := endpointIDs(listEndpoints(t, h, c.key))
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}

	// The listed endpoint is the created one, without its secret.
	for _, e := range listEndpoints(t, h, aTest) {
		want := t1
		if e.ID == t2.ID {
			want = t2
		}
		if e.Secret != nil || e.URL != want.URL || !slices.Equal(e.Events, want.Events) || e.Status != want.Status ||
			deref(e.Description) != deref(want.Description) || e.Livemode != want.Livemode || e.Created != want.Created {
			t.Errorf("got listed %+v (description %s), want %+v (description %s) without secret",
				e, deref(e.Description), want, deref(want.Description))
		}
	}
	r := h.do("GET", "/v1/webhook-endpoints", aTest, nil)
	for _, s := range []string{*t1.Secret, *t2.Secret, "whsec_"} {
		if bytes.Contains(r.Raw, []byte(s)) {
			t.Errorf("got list %s holding %q, want no secret", r.Raw, s)
		}
	}
}

func TestEndpointDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)
	keep := createEndpointOK(t, h, aTest, map[string]any{"url": publicHook})
	gone := createEndpointOK(t, h, aTest, map[string]any{"url": publicHook})

	// Not found for another merchant, another mode, or an unknown id; nothing changes.
	for _, c := range []struct{ name, key, id string }{
		{"another merchant", bTest, gone.ID},
		{"another mode", aLive, gone.ID},
		{"unknown id", aTest, "we_doesnotexist0000000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("DELETE", "/v1/webhook-endpoints/"+c.id, c.key, nil)
			wantError(t, r, http.StatusNotFound, "endpoint_not_found")
		})
	}
	if got := len(listEndpoints(t, h, aTest)); got != 2 {
		t.Fatalf("got %d endpoints after refused deletes, want 2", got)
	}

	r := h.do("DELETE", "/v1/webhook-endpoints/"+gone.ID, aTest, nil)
	wantOK(t, r)
	var d struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}
	r.data(t, &d)
	if d.ID != gone.ID || !d.Deleted {
		t.Errorf("got %+v, want {ID:%s Deleted:true}", d, gone.ID)
	}
	if got := endpointIDs(listEndpoints(t, h, aTest)); !slices.Equal(got, []string{keep.ID}) {
		t.Errorf("got %v after delete, want [%s]", got, keep.ID)
	}
	r = h.do("DELETE", "/v1/webhook-endpoints/"+gone.ID, aTest, nil)
	wantError(t, r, http.StatusNotFound, "endpoint_not_found")
}

// TestEndpointSecretSealed: the secret is stored only sealed with
// SECRETS_KEY, bound to its endpoint; no column holds it in clear.
func TestEndpointSecretSealed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	e := createEndpointOK(t, h, key, map[string]any{"url": publicHook, "description": "sealed"})
	secret := *e.Secret

	var sealed []byte
	if err := h.db.Get(&sealed, `SELECT secret_sealed FROM webhook_endpoints WHERE id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	random := strings.TrimPrefix(secret, "whsec_")
	for _, s := range []string{secret, random, hex.EncodeToString([]byte(random))} {
		if bytes.Contains(sealed, []byte(s)) {
			t.Errorf("got secret_sealed holding %q in clear, want it sealed", s)
		}
	}
	opened, err := testBox.Open(sealed, payments.EndpointAAD(e.ID))
	if err != nil || string(opened) != secret {
		t.Errorf("got opened secret %q (%v), want %q", opened, err, secret)
	}
	if _, err := testBox.Open(sealed, payments.EndpointAAD("we_other")); err == nil {
		t.Error("got the sealed secret opened for another endpoint, want it bound to its own")
	}

	var row string
	if err := h.db.Get(&row, `SELECT (to_jsonb(we) - 'secret_sealed')::text FROM webhook_endpoints we WHERE id = $1`, e.ID); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, random) {
		t.Errorf("got the secret in another column of the row: %s", row)
	}
	if got := secretHolders(t, h, random); len(got) > 0 {
		t.Errorf("got the secret stored in clear in %v, want nowhere", got)
	}
}

func TestEndpointLimitPerMode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	testKey, liveKey := h.key(m, false), h.key(m, true)
	var first string
	for i := range payments.MaxEndpoints {
		e := createEndpointOK(t, h, testKey, map[string]any{"url": fmt.Sprintf("%s/%d", publicHook, i)})
		if i == 0 {
			first = e.ID
		}
	}
	if payments.MaxEndpoints != 16 {
		t.Errorf("got MaxEndpoints %d, want 16", payments.MaxEndpoints)
	}
	r := h.do("POST", "/v1/webhook-endpoints", testKey, map[string]any{"url": publicHook + "/17"})
	wantError(t, r, http.StatusBadRequest, "validation_error")
	if got := len(listEndpoints(t, h, testKey)); got != payments.MaxEndpoints {
		t.Errorf("got %d test endpoints, want %d", got, payments.MaxEndpoints)
	}

	// The limit is per mode: the live mode is empty.
	createEndpointOK(t, h, liveKey, map[string]any{"url": publicHook})
	// A deleted endpoint frees its place.
	wantOK(t, h.do("DELETE", "/v1/webhook-endpoints/"+first, testKey, nil))
	createEndpointOK(t, h, testKey, map[string]any{"url": publicHook + "/again"})
}

// TestEndpointIdempotentCreate: a replay returns the same endpoint and
// secret, creates nothing, and the stored response is sealed.
func TestEndpointIdempotentCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	idem := "we-" + payments.NewID("")
	body := map[string]any{"url": publicHook, "events": []string{"checkout.session.completed"}}

	first := h.do("POST", "/v1/webhook-endpoints", key, body, "Idempotency-Key", idem)
	wantOK(t, first)
	var a endpointView
	first.data(t, &a)
	replay := h.do("POST", "/v1/webhook-endpoints", key, body, "Idempotency-Key", idem)
	wantOK(t, replay)
	var b endpointView
	replay.data(t, &b)
	if got := replay.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("got Idempotent-Replayed %q, want true", got)
	}
	if a.ID != b.ID || a.Secret == nil || b.Secret == nil || *a.Secret != *b.Secret {
		t.Errorf("got replay %s %v, want %s %v", b.ID, b.Secret, a.ID, a.Secret)
	}
	if got := endpointIDs(listEndpoints(t, h, key)); !slices.Equal(got, []string{a.ID}) {
		t.Errorf("got endpoints %v, want [%s]", got, a.ID)
	}

	var stored []byte
	if err := h.db.Get(&stored, `SELECT response FROM idempotency_keys WHERE merchant_id = $1 AND key = $2`, m, idem); err != nil {
		t.Fatal(err)
	}
	random := strings.TrimPrefix(*a.Secret, "whsec_")
	if len(stored) == 0 {
		t.Fatal("got no stored response, want the sealed one")
	}
	for _, s := range []string{*a.Secret, random, a.ID} {
		if bytes.Contains(stored, []byte(s)) {
			t.Errorf("got idempotency_keys.response holding %q in clear, want it sealed", s)
		}
	}
	if got := secretHolders(t, h, random); len(got) > 0 {
		t.Errorf("got the secret stored in clear in %v, want nowhere", got)
	}

	// Another body with the same key is refused.
	r := h.do("POST", "/v1/webhook-endpoints", key, map[string]any{"url": publicHook + "/other"}, "Idempotency-Key", idem)
	wantError(t, r, http.StatusBadRequest, "validation_error")
}
