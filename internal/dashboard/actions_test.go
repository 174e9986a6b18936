package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"paysvc/internal/dashboard"
	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// Webhooks: adding an endpoint shows its secret once; a disabled endpoint
// is enabled again from its page with its failure count reset; a viewer
// can do neither.
func TestWebhooksPages(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	sc := payments.Scope{MerchantID: m}
	c := s.client()
	c.mustSignIn(email)
	tok := c.csrf("/dashboard/test/webhooks")
	a := c.do("POST", "/dashboard/test/webhooks", url.Values{"csrf_token": {tok}, "url": {"https://hooks.example/in"}, "events": {"charge.refunded, payment_intent.succeeded"}})
	secret := regexp.MustCompile(`value="(whsec_[^"]+)"`).FindStringSubmatch(a.body)
	if a.status != http.StatusCreated || secret == nil {
		t.Fatalf("add endpoint: got %d, want 201 with the whsec_ secret: %.500s", a.status, a.body)
	}
	if b := c.do("GET", "/dashboard/test/webhooks", nil); strings.Contains(b.body, secret[1]) || !strings.Contains(b.body, "https://hooks.example/in") {
		t.Error("webhooks page: want the endpoint listed and its secret never shown again")
	}
	a = c.do("POST", "/dashboard/test/webhooks", url.Values{"csrf_token": {tok}, "url": {"http://hooks.example/in"}})
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "webhook_url_must_be_https") {
		t.Errorf("add an http endpoint: got %d, want 400 webhook_url_must_be_https", a.status)
	}

	eps, err := s.svc.Endpoints(context.Background(), sc)
	if err != nil || len(eps) != 1 {
		t.Fatalf("got %d endpoints (%v), want 1", len(eps), err)
	}
	id := eps[0].ID
	disabled := payments.EndpointDisabled
	if _, err := s.svc.UpdateEndpoint(context.Background(), sc, id, payments.EndpointUpdate{Status: &disabled}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`UPDATE webhook_endpoints SET consecutive_failures = 10 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	a = c.do("POST", "/dashboard/test/webhooks/"+id+"/status", url.Values{"csrf_token": {tok}, "status": {"enabled"}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("enable: got %d, want 303: %.300s", a.status, a.body)
	}
	if e, _ := s.svc.Endpoint(context.Background(), sc, id); e.Status != payments.EndpointEnabled || e.FailureCount != 0 {
		t.Errorf("after enabling: got status %s, %d failures; want enabled, 0", e.Status, e.FailureCount)
	}
	// Rotating shows the new secret once; the old one keeps signing for the
	// grace period chosen.
	a = c.do("POST", "/dashboard/test/webhooks/"+id+"/rotate", url.Values{"csrf_token": {tok}, "grace_period": {"3600"}})
	rotated := regexp.MustCompile(`id="secret" readonly value="(whsec_[^"]+)"`).FindStringSubmatch(a.body)
	if a.status != http.StatusOK || rotated == nil || rotated[1] == secret[1] || !strings.Contains(a.body, "also signs until") {
		t.Errorf("rotate: got %d, want 200 with a new secret and the old one's end shown: %.300s", a.status, a.body)
	}
	if e, _ := s.svc.Endpoint(context.Background(), sc, id); e.PreviousSecretExpiresAt == nil {
		t.Error("after rotating with a grace period: the previous secret has no end")
	}
	// An event after re-enabling is delivered to it (pending: no worker
	// runs here); its delivery is in the log and resent from its page.
	s.pay(m, 1000, sandbox.CardSuccess)
	page := c.do("GET", "/dashboard/test/webhooks/"+id, nil)
	did := regexp.MustCompile(`data-delivery="(whd_[^"]+)"`).FindStringSubmatch(page.body)
	if page.status != http.StatusOK || did == nil || !strings.Contains(page.body, "payment_intent.succeeded") {
		t.Fatalf("endpoint page: got %d, want the payment's delivery in the log: %.400s", page.status, page.body)
	}
	if a := c.do("GET", "/dashboard/test/webhooks/"+id+"/deliveries/"+did[1], nil); a.status != http.StatusOK || !strings.Contains(a.body, `id="request"`) {
		t.Errorf("delivery page: got %d, want it with its request body", a.status)
	}
	a = c.do("POST", "/dashboard/test/webhooks/"+id+"/deliveries/"+did[1]+"/resend", url.Values{"csrf_token": {tok}})
	if a.status != http.StatusSeeOther || !strings.Contains(a.header.Get("Location"), "/deliveries/whd_") || strings.Contains(a.header.Get("Location"), did[1]) {
		t.Fatalf("resend: got %d to %q, want 303 to the new delivery", a.status, a.header.Get("Location"))
	}
	var n int
	if err := s.db.Get(&n, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, id); err != nil || n != 2 {
		t.Errorf("got %d deliveries after the resend (%v), want 2", n, err)
	}
	// Another merchant's endpoint id is not found.
	_, emailB := s.merchant(payments.RoleAdmin)
	cb := s.client()
	cb.mustSignIn(emailB)
	tokB := cb.csrf("/dashboard/test/webhooks")
	if a := cb.do("GET", "/dashboard/test/webhooks/"+id, nil); a.status != http.StatusNotFound {
		t.Errorf("another merchant's endpoint page: got %d, want 404", a.status)
	}
	if a := cb.do("GET", "/dashboard/test/webhooks/"+id+"/deliveries/"+did[1], nil); a.status != http.StatusNotFound {
		t.Errorf("another merchant's delivery page: got %d, want 404", a.status)
	}
	if a := cb.do("POST", "/dashboard/test/webhooks/"+id+"/deliveries/"+did[1]+"/resend", url.Values{"csrf_token": {tokB}}); a.status != http.StatusNotFound {
		t.Errorf("resend another merchant's delivery: got %d, want 404", a.status)
	}
	if a := cb.do("POST", "/dashboard/test/webhooks/"+id+"/rotate", url.Values{"csrf_token": {tokB}}); a.status != http.StatusNotFound {
		t.Errorf("rotate another merchant's endpoint: got %d, want 404", a.status)
	}
	if a := cb.do("POST", "/dashboard/test/webhooks/"+id+"/delete", url.Values{"csrf_token": {tokB}}); a.status != http.StatusNotFound {
		t.Errorf("delete another merchant's endpoint: got %d, want 404", a.status)
	}
	a = c.do("POST", "/dashboard/test/webhooks/"+id+"/delete", url.Values{"csrf_token": {tok}})
	if eps, _ := s.svc.Endpoints(context.Background(), sc); a.status != http.StatusSeeOther || len(eps) != 0 {
		t.Errorf("delete: got %d and %d endpoints left, want 303 and 0", a.status, len(eps))
	}
}

// subscription stores an active monthly subscription of the merchant.
func (s *stack) subscription(merchantID string) string {
	s.t.Helper()
	ctx := context.Background()
	sc := payments.Scope{MerchantID: merchantID}
	cus, err := s.svc.CreateCustomer(ctx, sc, payments.CustomerInput{Email: ptr("sub@example.com")})
	if err != nil {
		s.t.Fatal(err)
	}
	two := 2 // every 2 months: the pages show the count with the unit
	iv, _ := payments.UnitInterval(payments.Month, &two)
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	card := "card_x"
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: start,
		CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1),
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Pro", Quantity: 1,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
		CardID: &card, Created: start,
	}
	if err := s.store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
		s.t.Fatal(err)
	}
	return sub.ID
}

// Subscriptions: cancel at the period's end, withdraw it, cancel now; an
// ended subscription refuses with the API's validation_error.
func TestSubscriptionCancel(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	sc := payments.Scope{MerchantID: m}
	id := s.subscription(m)
	c := s.client()
	c.mustSignIn(email)
	if a := c.do("GET", "/dashboard/test/subscriptions", nil); a.status != http.StatusOK || !strings.Contains(a.body, id) || !strings.Contains(a.body, "$15.00 every 2 months") {
		t.Errorf("subscriptions page: got %d, want %s at $15.00 every 2 months listed", a.status, id)
	}
	if a := c.do("GET", "/dashboard/test/subscriptions/"+id, nil); a.status != http.StatusOK || !strings.Contains(a.body, "$15.00 every 2 months × 1") {
		t.Errorf("subscription page: got %d, want $15.00 every 2 months × 1", a.status)
	}
	tok := c.csrf("/dashboard/test/subscriptions/" + id)
	post := func(path string, form url.Values) answer {
		form.Set("csrf_token", tok)
		return c.do("POST", "/dashboard/test/subscriptions/"+id+path, form)
	}
	if a := post("/cancel", url.Values{"when": {"period_end"}}); a.status != http.StatusSeeOther {
		t.Fatalf("cancel at period end: got %d: %.300s", a.status, a.body)
	}
	if sub, _ := s.svc.Subscription(context.Background(), sc, id); !sub.CancelAtPeriodEnd || sub.Status != payments.SubActive {
		t.Errorf("after cancel at period end: got %s, cancel_at_period_end %v; want active, true", sub.Status, sub.CancelAtPeriodEnd)
	}
	if a := post("/resume", url.Values{}); a.status != http.StatusSeeOther {
		t.Fatalf("resume: got %d", a.status)
	}
	if a := post("/cancel", url.Values{"when": {"now"}}); a.status != http.StatusSeeOther {
		t.Fatalf("cancel now: got %d", a.status)
	}
	if sub, _ := s.svc.Subscription(context.Background(), sc, id); sub.Status != payments.SubCanceled {
		t.Errorf("after cancel now: got %s, want canceled", sub.Status)
	}
	if a := post("/cancel", url.Values{"when": {"now"}}); a.status != http.StatusBadRequest || !strings.Contains(a.body, "validation_error") {
		t.Errorf("cancel an ended subscription: got %d, want 400 validation_error", a.status)
	}
}

// Disputes: evidence saved as a draft, then submitted (under_review);
// after that the form is gone and a late post gets the API's
// validation_error.
func TestDisputeEvidence(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: m}
	s.pay(m, 10000, sandbox.CardSuccess)
	disputed := s.pay(m, 2500, sandbox.CardDispute)
	var pev, id string
	if err := s.db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, disputed); err != nil {
		t.Fatal(err)
	}
	if err := s.svc.ApplyProcessorEvent(ctx, sc, pev); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Get(&id, `SELECT id FROM disputes WHERE payment_intent_id = $1`, disputed); err != nil {
		t.Fatal(err)
	}
	c := s.client()
	c.mustSignIn(email)
	page := c.do("GET", "/dashboard/test/disputes/"+id, nil)
	if page.status != http.StatusOK || !strings.Contains(page.body, `id="evidence-form"`) || !strings.Contains(page.body, "needs_response") {
		t.Fatalf("dispute page: got %d, want the evidence form of a dispute needing a response", page.status)
	}
	tok := c.csrf("/dashboard/test/disputes/" + id)
	a := c.do("POST", "/dashboard/test/disputes/"+id+"/evidence", url.Values{"csrf_token": {tok}, "customer_name": {"Ada"}, "submit": {"false"}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("save evidence: got %d: %.300s", a.status, a.body)
	}
	if dp, _ := s.svc.Dispute(ctx, sc, id); dp.Evidence["customer_name"] != "Ada" || dp.Status != payments.DisputeNeedsResponse {
		t.Errorf("after the draft: got %s %v, want needs_response with customer_name Ada", dp.Status, dp.Evidence)
	}
	a = c.do("POST", "/dashboard/test/disputes/"+id+"/evidence", url.Values{"csrf_token": {tok}, "customer_name": {"Ada"},
		"uncategorized_text": {"receipt attached"}, "submit": {"true"}})
	if a.status != http.StatusSeeOther {
		t.Fatalf("submit evidence: got %d", a.status)
	}
	if dp, _ := s.svc.Dispute(ctx, sc, id); dp.Status != payments.DisputeUnderReview || dp.SubmittedAt == nil {
		t.Errorf("after submitting: got %s, want under_review, submitted", dp.Status)
	}
	if page := c.do("GET", "/dashboard/test/disputes/"+id, nil); strings.Contains(page.body, `id="evidence-form"`) {
		t.Error("the evidence form is still offered after submission")
	}
	a = c.do("POST", "/dashboard/test/disputes/"+id+"/evidence", url.Values{"csrf_token": {tok}, "customer_name": {"Eve"}, "submit": {"false"}})
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "validation_error") {
		t.Errorf("evidence after submission: got %d, want 400 validation_error", a.status)
	}
}
