package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/stripe"
	"paysvc/internal/processor/stripe/stripemock"
)

// POST /stripe/webhook takes Stripe's signed events without an API key:
// a verified one is stored for the worker (200, kept) and applied once; a
// bad signature is 400 validation_error in the envelope. Without Stripe
// (the other tests' harness) the route does not exist.
func TestStripeWebhookRoute(t *testing.T) {
	t.Parallel()
	const secret = "whsec_route"
	h := newHarness(t, harnessOpts{stripeWebhook: func(db *sqlx.DB, svc *payments.Service) httpapi.StripeWebhook {
		return stripe.New(db, stripe.Config{}).Inbound(secret, svc)
	}})
	s := newShop(h)
	acct := payments.NewID("acct_")
	if err := stripe.SetConnectedAccount(context.Background(), h.db, processor.Account{MerchantID: s.id}, acct); err != nil {
		t.Fatal(err)
	}
	iv := createIntentOK(t, h, s.key, map[string]any{"amount": 1200, "currency": "usd"})
	payload, _ := json.Marshal(map[string]any{
		"id": "evt_route1", "object": "event", "api_version": "2023-10-16", "created": time.Now().Unix(), "livemode": false,
		"account": acct, "type": "payment_intent.succeeded",
		"data": map[string]any{"object": map[string]any{"id": "pi_3Stripe", "object": "payment_intent", "status": "succeeded",
			"metadata": map[string]string{"paysvc_payment_intent": iv.PaymentIntentID}}},
	})
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret}).Header

	r := h.do("POST", "/stripe/webhook", "", payload, "Stripe-Signature", sig)
	wantOK(t, r)
	var got struct{ Received, Kept bool }
	r.data(t, &got)
	if !got.Received || !got.Kept {
		t.Errorf("got %+v, want received and kept", got)
	}
	wantOK(t, h.do("POST", "/stripe/webhook", "", payload, "Stripe-Signature", sig)) // redelivered
	var ids []string
	if err := h.db.Select(&ids, `SELECT id FROM processor_events WHERE external_id = 'evt_route1'`); err != nil || len(ids) != 1 {
		t.Fatalf("stored events: got %v (%v), want one", ids, err)
	}
	if err := h.svc.ApplyProcessorEvent(context.Background(), s.sc, ids[0]); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := h.db.Get(&status, `SELECT status FROM payment_intents WHERE id = $1`, iv.PaymentIntentID); err != nil || status != "succeeded" {
		t.Errorf("payment: got %q (%v), want succeeded", status, err)
	}

	wantError(t, h.do("POST", "/stripe/webhook", "", bytes.Replace(payload, []byte("evt_route1"), []byte("evt_route2"), 1), "Stripe-Signature", sig),
		http.StatusBadRequest, "validation_error")
	wantError(t, h.do("POST", "/stripe/webhook", "", payload), http.StatusBadRequest, "validation_error")

	// Signed events whose object does not decode: 400, never 500 (a 500
	// once; Stripe would send them again for days), and nothing stored.
	for i, ev := range []map[string]any{
		{"type": "payment_intent.succeeded", "data": map[string]any{"object": map[string]any{"id": 5}}},
		{"type": "charge.dispute.created", "data": map[string]any{"object": map[string]any{"id": "dp_1", "amount": json.Number("99999999999999999999")}}},
		{"type": "checkout.session.completed", "data": map[string]any{"object": map[string]any{"id": "cs_x", "client_reference_id": 7}}},
	} {
		ev["id"], ev["object"], ev["api_version"], ev["created"], ev["livemode"], ev["account"] =
			fmt.Sprintf("evt_bad%d", i), "event", "2023-10-16", time.Now().Unix(), false, acct
		bad, _ := json.Marshal(ev)
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: bad, Secret: secret}).Header
		wantError(t, h.do("POST", "/stripe/webhook", "", bad, "Stripe-Signature", sig), http.StatusBadRequest, "validation_error")
	}
	var stored int
	if err := h.db.Get(&stored, `SELECT count(*) FROM processor_events WHERE external_id LIKE 'evt_bad%'`); err != nil || stored != 0 {
		t.Errorf("undecodable events stored: %d (%v), want none", stored, err)
	}

	plain := newHarness(t, harnessOpts{})
	wantError(t, plain.do("POST", "/stripe/webhook", "", payload, "Stripe-Signature", sig), http.StatusNotFound, "endpoint_not_found")
}

// With PROCESSOR=stripe (the adapter against stripe-mock) the subscription
// routes go to Stripe Billing: the session's url is Stripe Checkout's; the
// subscription created by Stripe's checkout.session.completed is canceled,
// resized and given a portal on Stripe (its url is Stripe's); an interval
// Stripe cannot bill is 400 before anything is sent; a Stripe that does not
// answer is 502 processor_error with nothing written.
// stripeSubsSecret signs the Stripe events of the subscription tests.
const stripeSubsSecret = "whsec_subs"

// stripeAt is a harness whose processor is the Stripe adapter at base.
func stripeAt(base string) harnessOpts {
	var p *stripe.Processor
	get := func(db *sqlx.DB) *stripe.Processor {
		if p == nil {
			p = stripe.New(db, stripe.Config{Test: stripe.Keys{Secret: "sk_test_subs", Publishable: "pk_test_subs"}, APIBase: base})
		}
		return p
	}
	return harnessOpts{
		processor: func(db *sqlx.DB) processor.Processor { return get(db) },
		stripeWebhook: func(db *sqlx.DB, svc *payments.Service) httpapi.StripeWebhook {
			return get(db).Inbound(stripeSubsSecret, svc)
		},
	}
}

// inlineSubscription is the body of a subscription session for an inline
// price billed every count intervals.
func inlineSubscription(interval string, count int) map[string]any {
	return map[string]any{"amount_cents": 1500, "currency": "usd", "interval": interval, "interval_count": count,
		"success_url": "https://shop.example/ok", "cancel_url": "https://shop.example/no"}
}

// stripeSubscription sells s a subscription on Stripe: a session, then
// Stripe's checkout.session.completed naming the Stripe subscription
// stripeID, received and applied. It returns our subscription's id.
func stripeSubscription(t *testing.T, h *harness, s shop, acct, stripeID string) string {
	t.Helper()
	r := h.do("POST", "/v1/subscription-sessions", s.key, inlineSubscription("month", 1))
	wantOK(t, r)
	var cs struct{ ID, URL string }
	r.data(t, &cs)
	if !strings.HasPrefix(cs.URL, "https://checkout.stripe.com/") {
		t.Errorf("session url: got %q, want Stripe Checkout's", cs.URL)
	}
	evt := payments.NewID("evt_")
	payload, _ := json.Marshal(map[string]any{
		"id": evt, "object": "event", "api_version": "2023-10-16", "created": time.Now().Unix(), "livemode": false,
		"account": acct, "type": "checkout.session.completed",
		"data": map[string]any{"object": map[string]any{"id": "cs_test_" + stripeID, "object": "checkout.session", "mode": "subscription",
			"status": "complete", "payment_status": "paid", "client_reference_id": cs.ID, "subscription": stripeID,
			"customer_details": map[string]any{"email": "ada@example.com"}}},
	})
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: stripeSubsSecret}).Header
	wantOK(t, h.do("POST", "/stripe/webhook", "", payload, "Stripe-Signature", sig))
	var pev string
	if err := h.db.Get(&pev, `SELECT id FROM processor_events WHERE external_id = $1`, evt); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.ApplyProcessorEvent(context.Background(), s.sc, pev); err != nil {
		t.Fatal(err)
	}
	var sub string
	if err := h.db.Get(&sub, `SELECT id FROM subscriptions WHERE session_id = $1 AND processor_subscription_id = $2`, cs.ID, stripeID); err != nil {
		t.Fatalf("the subscription of the completed checkout: %v", err)
	}
	return sub
}

func TestStripeSubscriptionRoutes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, stripeAt(stripemock.Start(t)))
	s := newShop(h)
	acct := payments.NewID("acct_")
	if err := stripe.SetConnectedAccount(context.Background(), h.db, processor.Account{MerchantID: s.id}, acct); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.do("POST", "/v1/subscription-sessions", s.key, inlineSubscription("year", 4)), http.StatusBadRequest, "invalid_interval")
	sub := stripeSubscription(t, h, s, acct, "sub_stripe_http")
	r := h.do("POST", "/v1/subscriptions/"+sub+"/cancel", s.key, map[string]any{"at_period_end": true})
	wantOK(t, r)
	wantOK(t, h.do("POST", "/v1/subscriptions/"+sub+"/resume", s.key, nil))
	wantOK(t, h.do("PATCH", "/v1/subscriptions/"+sub+"/quantity", s.key, map[string]any{"quantity": 3, "proration_behavior": "always_invoice"}))
	r = h.do("POST", "/v1/subscriptions/"+sub+"/portal-session", s.key, map[string]any{"return_url": "https://shop.example/account"})
	wantOK(t, r)
	var ps struct{ URL string }
	r.data(t, &ps)
	if !strings.HasPrefix(ps.URL, "https://") || strings.Contains(ps.URL, "/portal/") {
		t.Errorf("portal url: got %q, want Stripe's billing portal", ps.URL)
	}

	// Stripe gone: 502 processor_error, nothing written.
	down := newHarness(t, stripeAt("http://127.0.0.1:1"))
	ds := newShop(down)
	if err := stripe.SetConnectedAccount(context.Background(), down.db, processor.Account{MerchantID: ds.id}, payments.NewID("acct_")); err != nil {
		t.Fatal(err)
	}
	wantError(t, down.do("POST", "/v1/subscription-sessions", ds.key, inlineSubscription("month", 1)), http.StatusBadGateway, "processor_error")
	var n int
	if err := down.db.Get(&n, `SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1`, ds.id); err != nil || n != 0 {
		t.Errorf("sessions after a Stripe failure: got %d (%v), want 0", n, err)
	}
}

// While as many Stripe calls inside a transaction as the bound allows
// (here one: a cancel that Stripe is slow to answer) hold their database
// connections, another subscription's cancel and quantity change are
// refused at once, 502 processor_error with nothing written, nothing sent
// to Stripe and nothing stored for their Idempotency-Keys, instead of
// taking one more connection each to wait on Stripe; once the slow call
// ends, they go through when retried with the same keys.
func TestStripeCallsInTxBounded(t *testing.T) {
	t.Parallel()
	target, err := url.Parse(stripemock.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	const slowID = "sub_stripe_slow"
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var fastCalls, fastChanges atomic.Int32 // requests about the other subscription; of those, not GETs
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/v1/subscriptions/" + slowID: // Stripe slow to answer
			arrived <- struct{}{}
			select {
			case <-release:
			case <-req.Context().Done():
				return
			}
		case "/v1/subscriptions/sub_stripe_fast":
			fastCalls.Add(1)
			if req.Method != http.MethodGet {
				fastChanges.Add(1)
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	o := stripeAt(srv.URL)
	o.callsInTx = 1
	h := newHarness(t, o)
	s := newShop(h)
	acct := payments.NewID("acct_")
	if err := stripe.SetConnectedAccount(context.Background(), h.db, processor.Account{MerchantID: s.id}, acct); err != nil {
		t.Fatal(err)
	}
	slow := stripeSubscription(t, h, s, acct, slowID)
	fast := stripeSubscription(t, h, s, acct, "sub_stripe_fast")
	cancel := map[string]any{"at_period_end": true}

	slowDone := make(chan *response, 1)
	go func() { slowDone <- h.do("POST", "/v1/subscriptions/"+slow+"/cancel", s.key, cancel) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow cancel never reached Stripe")
	}

	// A cancel and a quantity change of another subscription, each with an
	// Idempotency-Key: refused, and not stored as the key's answer.
	quantity := map[string]any{"quantity": 3, "proration_behavior": "always_invoice"}
	refused := []struct {
		method, path string
		body         map[string]any
		key          string
	}{
		{"POST", "/v1/subscriptions/" + fast + "/cancel", cancel, payments.NewID("idem_")},
		{"PATCH", "/v1/subscriptions/" + fast + "/quantity", quantity, payments.NewID("idem_")},
	}
	for _, r := range refused {
		start := time.Now()
		wantError(t, h.do(r.method, r.path, s.key, r.body, "Idempotency-Key", r.key), http.StatusBadGateway, "processor_error")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s %s refused after %v, want an answer at once", r.method, r.path, d)
		}
	}
	if n := fastCalls.Load(); n != 0 {
		t.Errorf("the refused requests sent %d requests to Stripe, want none", n)
	}
	var row struct {
		Scheduled bool `db:"cancel_at_period_end"`
		Quantity  int  `db:"quantity"`
	}
	if err := h.db.Get(&row, `SELECT s.cancel_at_period_end, i.quantity FROM subscriptions s JOIN subscription_items i ON i.subscription_id = s.id WHERE s.id = $1`, fast); err != nil || row.Scheduled || row.Quantity != 1 {
		t.Errorf("after the refused requests: %+v (%v), want nothing written (not scheduled, quantity 1)", row, err)
	}

	once.Do(func() { close(release) })
	select {
	case r := <-slowDone:
		wantOK(t, r)
	case <-time.After(30 * time.Second):
		t.Fatal("the slow cancel did not end after Stripe answered")
	}
	for _, r := range refused { // retried with the same keys: done now
		wantOK(t, h.do(r.method, r.path, s.key, r.body, "Idempotency-Key", r.key))
	}
	if n := fastChanges.Load(); n != 2 {
		t.Errorf("the retried requests changed Stripe's subscription %d times, want 2", n)
	}
}
