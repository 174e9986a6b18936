package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"paysvc/internal/dashboard"
	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// Bad input anywhere — ids, query, form values — is a 4xx page, never a
// 5xx: every route, signed in as an admin with a valid CSRF token, with
// ids and values that are not text, too long, or another kind's.
func TestBadInputNever5xx(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	pi := s.pay(m, 5000, sandbox.CardSuccess)
	sc := payments.Scope{MerchantID: m}
	ctx := context.Background()
	we, err := s.svc.CreateEndpoint(ctx, sc, payments.EndpointInput{URL: ptr("https://hooks.example/in")})
	if err != nil {
		t.Fatal(err)
	}
	sub := s.subscription(m)
	disputed := s.pay(m, 2500, sandbox.CardDispute)
	var pev, dp string
	if err := s.db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, disputed); err != nil {
		t.Fatal(err)
	}
	if err := s.svc.ApplyProcessorEvent(ctx, sc, pev); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Get(&dp, `SELECT id FROM disputes WHERE payment_intent_id = $1`, disputed); err != nil {
		t.Fatal(err)
	}
	c := s.client()
	c.mustSignIn(email)
	tok := c.csrf("/dashboard/test")
	ids := []string{pi, we.ID, sub, dp, "%00", "%FF", "pi_" + strings.Repeat("x", 300), "re_x", "..%2F..%2Fetc", "%C0%80", "cus_%00x"}
	values := []string{"\x00", "\xff", strings.Repeat("é", 30000), "-1", "1e400", "99999999999999999999", "{}", "<script>"}
	gets := []string{"/payments/{id}", "/refunds/{id}", "/disputes/{id}", "/customers/{id}", "/products/{id}", "/events/{id}",
		"/subscriptions/{id}", "/webhooks/{id}", "/webhooks/{id}/deliveries/{id}", "/payments?starting_after={id}",
		"/events?type={id}", "/subscriptions?status={id}&starting_after={id}", "/webhooks/we_x?status={id}&starting_after={id}"}
	posts := []string{"/payments/{id}/refund", "/disputes/{id}/evidence", "/apikeys", "/apikeys/{id}/revoke", "/webhooks",
		"/webhooks/{id}/status", "/webhooks/{id}/rotate", "/webhooks/{id}/delete", "/webhooks/{id}/deliveries/{id}/resend",
		"/subscriptions/{id}/cancel", "/subscriptions/{id}/resume"}
	for _, id := range ids {
		for _, g := range gets {
			path := "/dashboard/test" + strings.ReplaceAll(g, "{id}", id)
			if a := c.do("GET", path, nil); a.status >= 500 {
				t.Errorf("GET %s: got %d", path, a.status)
			}
		}
		for _, p := range posts {
			path := "/dashboard/test" + strings.ReplaceAll(p, "{id}", id)
			for _, v := range values {
				form := url.Values{"csrf_token": {tok}}
				for _, f := range []string{"amount", "reason", "refund_key", "customer_name", "submit", "mode", "expires_in",
					"url", "events", "description", "status", "grace_period", "when"} {
					form.Set(f, v)
				}
				if a := c.do("POST", path, form); a.status >= 500 {
					t.Errorf("POST %s with %q: got %d", path, v[:min(len(v), 10)], a.status)
				}
			}
		}
	}
	if a := c.do("POST", "/dashboard/login", url.Values{"email": {"\xff"}, "password": {"\x00"}}); a.status >= 500 {
		t.Errorf("POST /dashboard/login with bad text: got %d", a.status)
	}
	big := url.Values{"csrf_token": {tok}, "amount": {strings.Repeat("9", 100<<10)}}
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", big); a.status >= 500 || a.status == http.StatusOK {
		t.Errorf("a 100 KiB form: got %d, want a 4xx", a.status)
	}
}
