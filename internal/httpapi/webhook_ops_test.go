package httpapi_test

import (
	"net/http"
	"slices"
	"testing"

	"paysvc/internal/payments"
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
