package stripe_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/processor/stripe"
)

// closedPort is a loopback URL nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// cardInMessage is what a careless processor message might echo.
const cardInMessage = "4000000000000002"

// faultyStripe answers every request as mode says: 500, 429, a lock
// timeout, a card error, or no answer until the client gives up.
func faultyStripe(t *testing.T, mode *atomic.Value) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", "req_fault123")
		w.Header().Set("Content-Type", "application/json")
		body := `{"error":{"type":"api_error","message":"card ` + cardInMessage + ` exploded"}}`
		switch mode.Load().(string) {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		case "429":
			w.WriteHeader(http.StatusTooManyRequests)
			body = `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"slow down"}}`
		case "lock":
			w.WriteHeader(http.StatusBadRequest)
			body = `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"locked"}}`
		case "card":
			w.WriteHeader(http.StatusPaymentRequired)
			body = `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card ` + cardInMessage + ` was declined."}}`
		case "hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.URL
}

// Faults on the way to Stripe (a closed port; 500, 429 and lock_timeout
// answers; a call hanging past STRIPE_TIMEOUT) are retryable
// processor_errors; a card error is permanent. Either way no payment or
// session is written, the error carries Stripe's request id but never
// Stripe's message, and a refund stays pending with its reservation for
// the worker to retry, then completes once Stripe answers.
func TestFaults(t *testing.T) {
	e := newInboundEnv(t) // a healthy Stripe (stripe-mock) for the setup
	ctx := context.Background()
	var mode atomic.Value
	mode.Store("500")
	faulty := faultyStripe(t, &mode)
	newSvc := func(base string) *payments.Service {
		c := testKeys
		c.APIBase, c.Timeout = base, 300*time.Millisecond
		return payments.NewService(postgres.New(e.db), nil, time.Now, payments.WithProcessor(stripe.New(e.db, c)))
	}
	bad, closed := newSvc(faulty), newSvc(closedPort(t))

	// A paid payment to refund later, through the healthy path.
	amount, cur := int64(8000), "usd"
	paid, err := e.svc.CreateIntent(ctx, e.sc, payments.IntentInput{Amount: &amount, Currency: &cur})
	if err != nil {
		t.Fatal(err)
	}
	e.send("evt_paid", "payment_intent.succeeded", map[string]any{"id": e.stripeID(paid.PaymentIntentID), "object": "payment_intent",
		"status": "succeeded", "metadata": map[string]string{"paysvc_payment_intent": paid.PaymentIntentID}})
	e.work()

	count := func(table string) int {
		var n int
		if err := e.db.Get(&n, `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, e.sc.MerchantID); err != nil {
			t.Fatal(err)
		}
		return n
	}
	intents, sessions := count("payment_intents"), count("checkout_sessions")
	check := func(what string, err error, retryable bool, code string) {
		t.Helper()
		var pe *processor.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%s: got %v (%T), want a *processor.Error (502 processor_error)", what, err, err)
		}
		if pe.Retryable != retryable || (code != "" && pe.Code != code) {
			t.Errorf("%s: got retryable=%v code=%q, want %v %q", what, pe.Retryable, pe.Code, retryable, code)
		}
		if strings.Contains(err.Error(), cardInMessage) || strings.Contains(err.Error(), "exploded") || strings.Contains(err.Error(), "declined.") {
			t.Errorf("%s: the error repeats Stripe's message: %q", what, err)
		}
		if code != "timeout" && code != "network_error" && pe.RequestID != "req_fault123" {
			t.Errorf("%s: request id %q, want Stripe's req_fault123 kept for support", what, pe.RequestID)
		}
	}
	for _, c := range []struct {
		mode      string
		svc       *payments.Service
		retryable bool
		code      string
	}{
		{"500", bad, true, ""}, {"429", bad, true, "rate_limit"}, {"lock", bad, true, "lock_timeout"},
		{"hang", bad, true, "timeout"}, {"card", bad, false, "card_declined"}, {"closed", closed, true, "network_error"},
	} {
		mode.Store(c.mode)
		_, err := c.svc.CreateIntent(ctx, e.sc, payments.IntentInput{Amount: &amount, Currency: &cur})
		check(c.mode+": create intent", err, c.retryable, c.code)
		ok, cancel, name, qty := "https://shop.example/ok", "https://shop.example/no", "Thing", int64(1)
		_, err = c.svc.CreateSession(ctx, e.sc, payments.SessionInput{
			LineItems:  []payments.LineItemInput{{Amount: &amount, Currency: &cur, Name: &name, Quantity: &qty}},
			SuccessURL: &ok, CancelURL: &cancel,
		})
		check(c.mode+": create session", err, c.retryable, c.code)
	}
	if n, m := count("payment_intents"), count("checkout_sessions"); n != intents || m != sessions {
		t.Errorf("rows after failed calls: got %d payments and %d sessions, want %d and %d (nothing half-written)", n, m, intents, sessions)
	}

	// A refund: every retryable fault leaves it pending with its amount
	// reserved, for the worker's next try; then Stripe answers.
	part := int64(1000)
	r, err := e.svc.CreateRefund(ctx, e.sc, payments.RefundInput{PaymentIntent: &paid.PaymentIntentID, Amount: &part})
	if err != nil {
		t.Fatal(err)
	}
	reserved := func() int64 {
		var n int64
		if err := e.db.Get(&n, `SELECT reserved FROM balances WHERE merchant_id = $1`, e.sc.MerchantID); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for m, code := range map[string]string{"500": "api_error", "429": "rate_limit", "hang": "timeout"} {
		mode.Store(m)
		got, err := bad.ExecuteRefund(ctx, e.sc, r.ID)
		check(m+": refund", err, true, code)
		if got.Status != payments.RefundPending || reserved() != part {
			t.Errorf("%s: refund %s reserved %d, want pending with %d reserved", m, got.Status, reserved(), part)
		}
	}
	got, err := e.svc.ExecuteRefund(ctx, e.sc, r.ID)
	if err != nil || got.Status != payments.RefundSucceeded || reserved() != 0 {
		t.Errorf("refund once Stripe answers: got %s, %v, reserved %d, want succeeded, nothing reserved", got.Status, err, reserved())
	}
}
