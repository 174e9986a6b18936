package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"paysvc/internal/payments"
)

// FuzzCreateSubscriptionSession drives POST /v1/subscription-sessions with
// bodies of both forms and their mixtures: every answer is a session in
// subscription mode or one of the documented refusals, never a 5xx.
func FuzzCreateSubscriptionSession(f *testing.F) {
	h, m, key := fuzzServer(f)
	ctx := context.Background()
	name, amount, cur, iv, trial := "Plan", int64(900), "usd", "monthly", 7
	p, err := h.svc.CreateSubscriptionProduct(ctx, payments.Scope{MerchantID: m}, payments.SubscriptionProductInput{
		Name: &name, Amount: &amount, Currency: &cur, Interval: &iv, TrialPeriodDays: &trial})
	if err != nil {
		f.Fatal(err)
	}
	urls := `"success_url":"https://s.example/ok?cs={CHECKOUT_SESSION_ID}","cancel_url":"https://s.example/no"`
	for _, seed := range []string{
		`{"price_id":"` + p.Price.ID + `",` + urls + `}`,
		`{"price_id":"` + p.Price.ID + `","quantity":1000,"trial_period_days":0,"pass_fees_to_customer":true,` + urls + `}`,
		`{"price_id":"` + p.Price.ID + `","customer_id":"cus_nope",` + urls + `}`,
		`{"price_id":"price_nope",` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"week","interval_count":52,"name":"Box","quantity":3,` + urls + `,"metadata":{"a":"b"}}`,
		`{"amount_cents":900,"currency":"usd","interval":"fortnight",` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"month","interval_count":0,` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"month","trial_period_days":3,` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"month","price_id":"` + p.Price.ID + `",` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"month","name":"` + fuzzTerm + `",` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":"month","success_url":"http://x","cancel_url":"https://y"}`,
		`{"amount_cents":"900","currency":"usd","interval":"month",` + urls + `}`,
		`{"amount_cents":900,"currency":"usd","interval":null,` + urls + `}`,
		`{"mode":"subscription"}`,
		`{}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h := h.forInput(t)
		r := h.do("POST", "/v1/subscription-sessions", key, body)
		switch {
		case r.Status == http.StatusOK:
			var v struct {
				ID   string `json:"id"`
				Mode string `json:"mode"`
			}
			r.data(t, &v)
			if !strings.HasPrefix(v.ID, "cs_") || v.Mode != "subscription" {
				t.Errorf("got %q mode %q, want a cs_ session in subscription mode", v.ID, v.Mode)
			}
		case r.Status == http.StatusBadRequest && (r.code() == "validation_error" || r.code() == "invalid_interval" || r.code() == "invalid_url"):
		case r.Status == http.StatusNotFound && (r.code() == "product_not_found" || r.code() == "customer_not_found"):
		case r.Status == http.StatusRequestEntityTooLarge && r.code() == "payload_too_large" && len(body) > 1<<20:
		case r.Status == http.StatusBadRequest && r.code() == "prohibited_content":
			if _, err := h.svc.UnsuspendMerchant(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("body %q: got %d %s, want a session or a documented refusal", body, r.Status, r.Raw)
		}
	})
}

// FuzzSubscriptionListQuery drives GET /v1/subscriptions with arbitrary
// query strings (status, customer, limit, starting_after, page tokens): the
// answer is a list or a 400 validation_error, never a 5xx.
func FuzzSubscriptionListQuery(f *testing.F) {
	h, _, key := fuzzServer(f)
	for _, seed := range []string{
		"", "status=all", "status=canceled&customer=cus_x&limit=100", "status=bogus", "limit=0", "limit=1e2",
		"starting_after=sub_x", "page=eyJzIjoiIiwibCI6MTAsImEiOiJzdWJfeCJ9", "page=eyJzIjoiYm9ndXMiLCJsIjoxMCwiYSI6InN1Yl94In0",
		"page=%00", "page=eyJsIjotMX0&limit=5", "page=x&status=all", "customer=cus_" + strings.Repeat("a", 300),
		"page=eyJzIjoiIiwibCI6MTAsImEiOiJzdWJfXHUwMDAweCJ9", "page=eyJzIjoiIiwiYyI6ImN1c19cdTAwMDAiLCJsIjoxMCwiYSI6InN1Yl94In0",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		h := h.forInput(t)
		q, err := url.ParseQuery(query)
		if err != nil {
			return // not a query a client sends
		}
		r := h.do("GET", "/v1/subscriptions?"+q.Encode(), key, nil)
		switch {
		case r.Status == http.StatusOK:
		case r.Status == http.StatusBadRequest && r.code() == "validation_error":
		default:
			t.Errorf("query %q: got %d %s, want 200 or 400 validation_error", query, r.Status, r.Raw)
		}
	})
}

// FuzzCancelSubscription decodes the cancel body (optional, at_period_end
// a boolean): a missing subscription is 404, a bad body 400, never a 5xx.
func FuzzCancelSubscription(f *testing.F) {
	h, _, key := fuzzServer(f)
	for _, seed := range []string{``, ` `, `{}`, `{"at_period_end":false}`, `{"at_period_end":"false"}`, `{"at_period_end":null}`,
		`{"x":1}`, `[]`, `{`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h := h.forInput(t)
		r := h.do("POST", "/v1/subscriptions/sub_missing/cancel", key, body)
		switch {
		case r.Status == http.StatusNotFound && r.code() == "subscription_not_found":
		case r.Status == http.StatusBadRequest && r.code() == "validation_error":
		case r.Status == http.StatusRequestEntityTooLarge && len(body) > 1<<20:
		default:
			t.Errorf("body %q: got %d %s, want 404 subscription_not_found or 400 validation_error", body, r.Status, r.Raw)
		}
	})
}
