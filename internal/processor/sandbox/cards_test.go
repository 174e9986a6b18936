package sandbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// TestCardsReportProcessorEvents checks the one path of processor outcomes:
// a confirmation becomes a processor event in the inbox, applied in the
// confirmation's transaction; the dispute card's dispute.created waits
// there for a worker; and an event received twice (same external id) is
// applied once.
func TestCardsReportProcessorEvents(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(sandbox.New(db, "http://checkout.test")))
	cards := sandbox.New(db, "http://checkout.test").Cards(svc)
	m, err := svc.CreateMerchant(ctx, "Inbox shop", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	type pev struct {
		Type       string         `db:"type"`
		ExternalID sql.NullString `db:"external_id"`
		Applied    bool           `db:"applied"`
		Last4      sql.NullString `db:"last4"`
	}
	events := func(pi string) []pev {
		t.Helper()
		var out []pev
		const q = `SELECT type, external_id, processed_at IS NOT NULL AS applied, data->>'card_last4' AS last4
		FROM processor_events WHERE merchant_id = $1 AND payment_intent_id = $2 ORDER BY type`
		if err := db.Select(&out, q, sc.MerchantID, pi); err != nil {
			t.Fatal(err)
		}
		return out
	}
	intent := func() payments.IntentCreated {
		t.Helper()
		amount, cur := int64(2500), "usd"
		in, err := svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}

	paid := intent()
	if o, err := cards.ConfirmPayment(ctx, paid.PaymentIntentID, paid.PublishableKey, paid.ClientSecret, sandbox.CardSuccess); err != nil || !o.Succeeded {
		t.Fatalf("confirm: got %+v, %v, want succeeded", o, err)
	}
	got := events(paid.PaymentIntentID)
	if len(got) != 1 || got[0].Type != payments.ProcessorChargeSucceeded || !got[0].Applied || !got[0].ExternalID.Valid || got[0].Last4.String != "4242" {
		t.Fatalf("processor events of a paid confirmation: got %+v, want one applied charge.succeeded with an external id and last4", got)
	}

	// The same event again (a processor redelivering it) changes nothing.
	balance := func() int64 {
		t.Helper()
		var n int64
		if err := db.Get(&n, `SELECT coalesce(sum(amount), 0) FROM ledger_entries WHERE merchant_id = $1`, sc.MerchantID); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := balance()
	second := intent()
	ev := payments.ProcessorEvent{ExternalID: got[0].ExternalID.String, Type: payments.ProcessorChargeSucceeded, PaymentIntentID: second.PaymentIntentID}
	if err := svc.RecordProcessorEvent(ctx, ev); err != nil {
		t.Fatalf("redelivered event: got %v, want a no-op", err)
	}
	if after := balance(); after != before {
		t.Errorf("ledger after a redelivered event: got %d, want %d", after, before)
	}
	if n := len(events(second.PaymentIntentID)); n != 0 {
		t.Errorf("events of the redelivery: got %d stored, want none", n)
	}

	declined := intent()
	if o, err := cards.ConfirmPayment(ctx, declined.PaymentIntentID, declined.PublishableKey, declined.ClientSecret, sandbox.CardInsufficientFunds); err != nil || o.Succeeded {
		t.Fatalf("confirm declined: got %+v, %v, want declined", o, err)
	}
	if got := events(declined.PaymentIntentID); len(got) != 1 || got[0].Type != payments.ProcessorChargeFailed || !got[0].Applied {
		t.Errorf("processor events of a declined confirmation: got %+v, want one applied charge.failed", got)
	}

	disputed := intent()
	if _, err := cards.ConfirmPayment(ctx, disputed.PaymentIntentID, disputed.PublishableKey, disputed.ClientSecret, sandbox.CardDispute); err != nil {
		t.Fatal(err)
	}
	got = events(disputed.PaymentIntentID)
	if len(got) != 2 || got[0].Type != payments.ProcessorChargeSucceeded || !got[0].Applied ||
		got[1].Type != payments.ProcessorDisputeCreated || got[1].Applied {
		t.Errorf("processor events of the dispute card: got %+v, want an applied charge.succeeded and a pending dispute.created", got)
	}
}
