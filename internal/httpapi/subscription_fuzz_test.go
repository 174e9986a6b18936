package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

func FuzzCreateSubscriptionProduct(f *testing.F) {
	h, m, key := fuzzServer(f)
	for _, seed := range []string{
		`{"name":"Pro","amount":1500,"currency":"usd","interval":"monthly"}`,
		`{"name":"Team","description":"Seats","amount":99999999,"currency":"EUR","interval":"bi-monthly",` +
			`"trial_period_days":730,"metadata":{"tier":"team"}}`,
		`{"name":"x","amount":1,"currency":"jpy","interval":"semi-annual","trial_period_days":0}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"month"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"Monthly"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":""}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"monthly\u0000"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":1}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"weekly","interval_count":2}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"annual","trial_period_days":731}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"annual","trial_period_days":-1}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"annual","trial_period_days":1e3}`,
		`{"name":"x","amount":0,"currency":"usd","interval":"weekly"}`,
		`{"name":"x","amount":100000000,"currency":"usd","interval":"weekly"}`,
		`{"name":"x","amount":1,"currency":"zzz","interval":"weekly"}`,
		`{"name":"","amount":1,"currency":"usd","interval":"weekly"}`,
		`{"name":"` + fuzzTerm + `","amount":1,"currency":"usd","interval":"weekly"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"weekly","metadata":{"k":null}}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"weekly"} trailing`,
		`{"name":"\ud800","amount":1,"currency":"usd","interval":"weekly"}`,
		`{"interval":"quarterly"}`,
		`{`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h := h.forInput(t)
		r := h.do("POST", "/v1/subscription-products", key, body)
		switch {
		case r.Status == http.StatusOK:
			var v struct {
				ID    string `json:"id"`
				Price struct {
					ID string `json:"id"`
				} `json:"price"`
			}
			r.data(t, &v)
			if !strings.HasPrefix(v.ID, "prod_") || !strings.HasPrefix(v.Price.ID, "price_") {
				t.Errorf("got ids %q, %q; want prod_ and price_", v.ID, v.Price.ID)
			}
		case r.Status == http.StatusBadRequest && (r.code() == "validation_error" || r.code() == "invalid_interval"):
		case r.Status == http.StatusRequestEntityTooLarge && r.code() == "payload_too_large" && len(body) > 1<<20:
		case r.Status == http.StatusBadRequest && r.code() == "prohibited_content":
			if _, err := h.svc.UnsuspendMerchant(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("body %q: got %d %s, want 200, or 400 validation_error, invalid_interval or prohibited_content", body, r.Status, r.Raw)
		}
	})
}
