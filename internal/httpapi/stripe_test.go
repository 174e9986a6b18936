package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/stripe"
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

	plain := newHarness(t, harnessOpts{})
	wantError(t, plain.do("POST", "/stripe/webhook", "", payload, "Stripe-Signature", sig), http.StatusNotFound, "endpoint_not_found")
}
