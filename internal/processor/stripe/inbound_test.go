package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/processor/stripe"
	"paysvc/internal/processor/stripe/stripemock"
	"paysvc/internal/testenv"
)

const whsec = "whsec_test_inbound"

// inboundEnv is a service on the Stripe adapter (against stripe-mock) and
// its webhook receiver, for one connected merchant.
type inboundEnv struct {
	t      *testing.T
	db     *sqlx.DB
	svc    *payments.Service
	p      *stripe.Processor
	in     *stripe.Inbound
	acct   processor.Account
	sc     payments.Scope
	stripe string // the connected account id
}

func newInboundEnv(t *testing.T) *inboundEnv {
	db := testenv.DB(t)
	p := newProcessor(db, stripemock.Start(t))
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(p))
	acct := connected(t, db, false)
	var id string
	if err := db.Get(&id, `SELECT account_id FROM stripe_accounts WHERE merchant_id = $1`, acct.MerchantID); err != nil {
		t.Fatal(err)
	}
	return &inboundEnv{t: t, db: db, svc: svc, p: p, in: p.Inbound(whsec, svc), acct: acct,
		sc: payments.Scope{MerchantID: acct.MerchantID}, stripe: id}
}

// event is a Stripe event about obj on the merchant's account, signed the
// way Stripe signs it (t=…,v1=HMAC-SHA256 of "t.payload").
func (e *inboundEnv) event(id, typ string, obj map[string]any, at time.Time) ([]byte, string) {
	e.t.Helper()
	payload, err := json.Marshal(map[string]any{
		"id": id, "object": "event", "api_version": "2023-10-16", "created": at.Unix(), "livemode": false,
		"account": e.stripe, "type": typ, "pending_webhooks": 1, "data": map[string]any{"object": obj},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: whsec, Timestamp: at})
	return payload, signed.Header
}

// send delivers an event as Stripe would, checking it was kept.
func (e *inboundEnv) send(id, typ string, obj map[string]any) {
	e.t.Helper()
	payload, sig := e.event(id, typ, obj, time.Now())
	kept, err := e.in.Receive(context.Background(), payload, sig)
	if err != nil || !kept {
		e.t.Fatalf("receive %s %s: got kept=%v, %v, want kept", typ, id, kept, err)
	}
}

// work applies the stored events as the worker does (in store order) and
// returns how many failed (to be retried).
func (e *inboundEnv) work() int {
	e.t.Helper()
	var ids []string
	if err := e.db.Select(&ids, `SELECT id FROM processor_events WHERE merchant_id = $1 AND processed_at IS NULL ORDER BY created_at, id`, e.sc.MerchantID); err != nil {
		e.t.Fatal(err)
	}
	failed := 0
	for _, id := range ids {
		if err := e.svc.ApplyProcessorEvent(context.Background(), e.sc, id); err != nil {
			if !errors.Is(err, payments.ErrNotYet) {
				e.t.Fatalf("apply %s: %v", id, err)
			}
			failed++
		}
	}
	return failed
}

func (e *inboundEnv) ledger() map[string]int64 {
	e.t.Helper()
	var rows []struct {
		Type   string `db:"type"`
		Amount int64  `db:"amount"`
	}
	if err := e.db.Select(&rows, `SELECT type, sum(amount) AS amount FROM ledger_entries WHERE merchant_id = $1 GROUP BY type`, e.sc.MerchantID); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[r.Type] = r.Amount
	}
	return out
}

func (e *inboundEnv) stripeID(ours string) string {
	e.t.Helper()
	var id string
	if err := e.db.Get(&id, `SELECT stripe_id FROM stripe_objects WHERE merchant_id = $1 AND id = $2`, e.sc.MerchantID, ours); err != nil {
		e.t.Fatalf("stripe id of %s: %v", ours, err)
	}
	return id
}

// An embedded payment's Stripe events, redelivered and out of order, leave
// one end state: paid once; a late payment_failed changes nothing; a
// dispute closed before it was opened waits for the opening, then wins
// once.
func TestInboundEmbeddedPayment(t *testing.T) {
	e := newInboundEnv(t)
	ctx := context.Background()
	amount, cur := int64(5000), "usd"
	created, err := e.svc.CreateIntent(ctx, e.sc, payments.IntentInput{Amount: &amount, Currency: &cur})
	if err != nil {
		t.Fatal(err)
	}
	if created.PublishableKey != "pk_test_platform" || created.AccountID != e.stripe || !strings.Contains(created.ClientSecret, "_secret_") {
		t.Errorf("client values: got %+v, want the platform's key, the connected account and Stripe's client secret", created)
	}
	ours, theirs := created.PaymentIntentID, e.stripeID(created.PaymentIntentID)
	pi := map[string]any{"id": theirs, "object": "payment_intent", "amount": amount, "currency": "usd", "status": "succeeded",
		"metadata": map[string]string{"paysvc_payment_intent": ours}}
	failedPI := map[string]any{"id": theirs, "object": "payment_intent", "status": "requires_payment_method",
		"metadata":           map[string]string{"paysvc_payment_intent": ours},
		"last_payment_error": map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "insufficient_funds"}}

	e.send("evt_succeeded", "payment_intent.succeeded", pi)
	e.send("evt_succeeded", "payment_intent.succeeded", pi) // redelivered: dropped
	e.send("evt_failed_earlier", "payment_intent.payment_failed", failedPI)
	if n := e.work(); n != 0 {
		t.Fatalf("%d events not applied", n)
	}
	net := amount - payments.Fee(payments.PlanPro, "usd", amount)
	if got := e.ledger(); got[payments.LedgerPayment] != net || len(got) != 1 {
		t.Errorf("ledger after the payment's events: got %v, want one payment credit of %d", got, net)
	}
	var n int
	if err := e.db.Get(&n, `SELECT count(*) FROM processor_events WHERE merchant_id = $1`, e.sc.MerchantID); err != nil || n != 2 {
		t.Errorf("stored events: got %d (%v), want 2 (the redelivery dropped)", n, err)
	}
	var status string
	if err := e.db.Get(&status, `SELECT status FROM payment_intents WHERE id = $1`, ours); err != nil || status != payments.IntentSucceeded {
		t.Errorf("payment: got %q (%v), want succeeded after a late payment_failed", status, err)
	}

	dispute := map[string]any{"id": "dp_stripe1", "object": "dispute", "amount": amount, "currency": "usd", "payment_intent": theirs,
		"reason": "fraudulent", "status": "won"}
	e.send("evt_dispute_closed", "charge.dispute.closed", dispute) // before the opening
	if n := e.work(); n != 1 {
		t.Fatalf("dispute closed before it was opened: got %d events waiting, want 1", n)
	}
	opened := map[string]any{"id": "dp_stripe1", "object": "dispute", "amount": amount, "currency": "usd", "payment_intent": theirs,
		"reason": "fraudulent", "status": "needs_response"}
	e.send("evt_dispute_created", "charge.dispute.created", opened)
	e.send("evt_dispute_created_again", "charge.dispute.created", opened) // a second event for the same dispute
	for i := 0; i < 3 && e.work() > 0; i++ {
	}
	if n := e.work(); n != 0 {
		t.Fatalf("%d events still waiting", n)
	}
	var d struct {
		Status string `db:"status"`
		Reason string `db:"reason"`
	}
	if err := e.db.Get(&d, `SELECT status, reason FROM disputes WHERE payment_intent_id = $1`, ours); err != nil || d.Status != payments.DisputeWon || d.Reason != "fraudulent" {
		t.Errorf("dispute: got %+v (%v), want one, won, fraudulent", d, err)
	}
	if got := e.ledger(); got[payments.LedgerDispute] != -amount || got[payments.LedgerDisputeReversal] != amount || got[payments.LedgerPayment] != net {
		t.Errorf("ledger after the dispute: got %v, want the disputed %d taken and returned once", got, amount)
	}
}

// A Checkout payment: the session's url is Stripe's; its completion comes
// as checkout.session.completed naming our session, creates the payment,
// and a later dispute names Stripe's payment intent, found through the
// session; evidence goes to Stripe's dispute.
func TestInboundCheckout(t *testing.T) {
	e := newInboundEnv(t)
	ctx := context.Background()
	amount, cur, name, qty := int64(2500), "usd", "Poster", int64(2)
	ok, cancel := "https://shop.example/ok?cs={CHECKOUT_SESSION_ID}", "https://shop.example/cart"
	cs, err := e.svc.CreateSession(ctx, e.sc, payments.SessionInput{
		LineItems:  []payments.LineItemInput{{Amount: &amount, Currency: &cur, Name: &name, Quantity: &qty}},
		SuccessURL: &ok, CancelURL: &cancel,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cs.URL, "https://checkout.stripe.com/") {
		t.Errorf("session url: got %q, want Stripe Checkout's", cs.URL)
	}
	session := map[string]any{"id": "cs_test_stripe1", "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "client_reference_id": cs.ID, "payment_intent": "pi_stripe_checkout1", "amount_total": 5000,
		"customer_details": map[string]any{"email": "ada@example.com", "name": "Ada"}}
	e.send("evt_cs_completed", "checkout.session.completed", session)
	e.send("evt_cs_completed_again", "checkout.session.completed", session) // a second event: the session is complete
	if n := e.work(); n != 0 {
		t.Fatalf("%d events not applied", n)
	}
	got, err := e.svc.Session(ctx, e.sc, cs.ID)
	if err != nil || got.Status != payments.SessionComplete || got.PaymentIntentID == nil {
		t.Fatalf("session: got %+v, %v, want complete with a payment", got, err)
	}
	if l := e.ledger(); l[payments.LedgerPayment] != 5000-payments.Fee(payments.PlanPro, "usd", 5000) {
		t.Errorf("ledger: got %v, want one payment", l)
	}

	e.send("evt_cs_dispute", "charge.dispute.created", map[string]any{"id": "dp_stripe2", "object": "dispute", "amount": 5000,
		"currency": "usd", "payment_intent": "pi_stripe_checkout1", "reason": "product_not_received", "status": "needs_response"})
	if n := e.work(); n != 0 {
		t.Fatalf("%d events not applied", n)
	}
	var dp string
	if err := e.db.Get(&dp, `SELECT id FROM disputes WHERE payment_intent_id = $1`, *got.PaymentIntentID); err != nil {
		t.Fatalf("dispute of the checkout payment: %v", err)
	}
	submit := true
	if _, err := e.svc.UpdateEvidence(ctx, e.sc, dp, payments.EvidenceInput{Evidence: map[string]string{"uncategorized_text": "shipped"}, Submit: &submit}); err != nil {
		t.Fatal(err)
	}
	if d, err := e.svc.SendEvidence(ctx, e.sc, dp); err != nil || d.Status != payments.DisputeUnderReview {
		t.Errorf("evidence sent to Stripe: got %+v, %v, want under_review (Stripe decides later)", d, err)
	}
	var sent bool
	if err := e.db.Get(&sent, `SELECT evidence_sent_at IS NOT NULL FROM disputes WHERE id = $1`, dp); err != nil || !sent {
		t.Errorf("evidence_sent_at: got %v (%v), want set", sent, err)
	}
}

// Payloads that are not Stripe's, or are replayed late, are refused;
// events of accounts or objects this service does not know are
// acknowledged and dropped.
func TestInboundRefusals(t *testing.T) {
	e := newInboundEnv(t)
	ctx := context.Background()
	obj := map[string]any{"id": "pi_x", "object": "payment_intent", "metadata": map[string]string{"paysvc_payment_intent": "pi_unknown"}}
	payload, sig := e.event("evt_a", "payment_intent.succeeded", obj, time.Now())
	for name, c := range map[string]struct {
		payload []byte
		sig     string
	}{
		"no signature":   {payload, ""},
		"another secret": {payload, webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: "whsec_other"}).Header},
		"altered body":   {append([]byte(" "), payload...), sig},
		"replayed late": func() struct {
			payload []byte
			sig     string
		} {
			p, s := e.event("evt_b", "payment_intent.succeeded", obj, time.Now().Add(-301*time.Second))
			return struct {
				payload []byte
				sig     string
			}{p, s}
		}(),
	} {
		if _, err := e.in.Receive(ctx, c.payload, c.sig); payments.ErrorCode(err) != payments.ValidationError {
			t.Errorf("%s: got %v, want validation_error", name, err)
		}
	}
	// A payment id of ours that does not exist: stored, and applied as a
	// no-op (the worker does not retry it).
	if _, err := e.in.Receive(ctx, payload, sig); err != nil {
		t.Errorf("an event about a payment not ours: got %v, want it acknowledged", err)
	}
	if n := e.work(); n != 0 || len(e.ledger()) != 0 {
		t.Errorf("applying it: got %d waiting, ledger %v, want nothing", n, e.ledger())
	}
	if kept, err := e.in.Receive(ctx, payload, sig); err != nil || !kept {
		t.Errorf("the same event again: got kept=%v, %v, want acknowledged", kept, err)
	}
	e.stripe = "acct_nobodyhere"
	p, s := e.event("evt_c", "payment_intent.succeeded", obj, time.Now())
	if kept, err := e.in.Receive(ctx, p, s); err != nil || kept {
		t.Errorf("an event of an unknown account: got kept=%v, %v, want acknowledged and dropped", kept, err)
	}
}
