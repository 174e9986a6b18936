package worker_test

// Money paths of subscriptions that a review found wrong (2026-12-08): a
// seat change while a renewal is being charged, a charge the processor made
// before a worker died, a portal retry after such a death, a cancellation
// of a subscription whose period already ended, and what an ended
// subscription records. Each test failed against the code before its fix.

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
)

func (e *renewalEnv) paidTotal(t *testing.T, subID string) int64 {
	t.Helper()
	var sum int64
	for _, a := range e.payments(t, subID) {
		sum += a
	}
	return sum
}

// chargePending charges every pending charge of the subscription, as the
// worker would.
func (e *renewalEnv) chargePending(t *testing.T, subID string) {
	t.Helper()
	var ids []string
	if err := e.db.Select(&ids, `SELECT id FROM subscription_charges WHERE subscription_id = $1 AND status = 'pending' ORDER BY created_at`, subID); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := e.svc.ChargeSubscription(context.Background(), e.sc, id); err != nil {
			t.Fatalf("charge %s: %v", id, err)
		}
	}
}

// dieAfterCall does what a worker does for the next attempt of a charge up
// to the processor's answer, with card, and then dies: the attempt is
// recorded started and the processor has answered, nothing else is written.
func (e *renewalEnv) dieAfterCall(t *testing.T, chargeID, card string, amount int64) processor.Outcome {
	t.Helper()
	ctx := context.Background()
	ch, err := e.store.SubscriptionCharge(ctx, e.sc, chargeID)
	if err != nil {
		t.Fatal(err)
	}
	a, ok, err := e.store.StartSubscriptionCharge(ctx, e.sc, chargeID, payments.ChargeAttempt{N: ch.Attempts + 1, CardID: card, Amount: amount})
	if err != nil || !ok {
		t.Fatalf("start attempt %d: %v %v", ch.Attempts+1, ok, err)
	}
	sub := e.sub(t, ch.SubscriptionID)
	out, err := sandbox.New(e.db, "http://checkout.test").ChargeCard(ctx, processor.Account{MerchantID: e.sc.MerchantID, Live: e.sc.Live}, processor.CardCharge{
		Key: fmt.Sprintf("%s_attempt_%d", chargeID, a.N), CardID: a.CardID, CustomerID: sub.CustomerID, Amount: a.Amount, Currency: ch.Currency,
	})
	if err != nil {
		t.Fatalf("processor charge: %v", err)
	}
	return out
}

// decliningFromJune is a monthly subscription of one seat at 1500 from
// 2027-06-01 on a card that declines every charge, the clock a minute in.
func (e *renewalEnv) decliningFromJune(t *testing.T) payments.Subscription {
	t.Helper()
	start := utc(t, "2027-06-01T00:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	return e.subscribe(t, monthly(t), start, 1, payments.CardDeclines, 0)
}

// A seat change made after the sweep wrote the next period's charge (at the
// old quantity) is prorated over that period, the one in use.
func TestQuantityChangeWhileRenewalIsCharged(t *testing.T) {
	t.Parallel()
	e := newRenewalEnvOn(t, ownSweepDB(t))
	ctx := context.Background()
	s := e.dueUnswept(t, utc(t, "2027-02-01T00:00:00Z"), 28*24*time.Hour) // clock: Mar 1 00:01
	if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if ids := e.charges(t, s.ID); len(ids) != 1 {
		t.Fatalf("renewal charges: %v", ids)
	}
	q, b := 10, "always_invoice"
	got, err := e.svc.ChangeQuantity(ctx, e.sc, s.ID, payments.QuantityInput{Quantity: &q, ProrationBehavior: &b})
	if err != nil {
		t.Fatalf("quantity change while the renewal is charged: %v", err)
	}
	if got.Status != payments.SubActive || got.Items[0].Quantity != 10 {
		t.Fatalf("after the change: %s qty %d", got.Status, got.Items[0].Quantity)
	}
	e.chargePending(t, s.ID) // the worker: the renewal and the proration
	after := e.sub(t, s.ID)
	checkPeriod(t, "after the renewal", after, payments.SubActive, "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z")
	// March: 1 seat charged by the renewal, 9 more from 00:01 on: 1500 +
	// round(15000 × r/d) − round(1500 × r/d), r = d − 60 s.
	d := int64(31 * 24 * 3600)
	r := d - 60
	want := 1500 + (15000*r+d/2)/d - (1500*r+d/2)/d
	if paid := e.paidTotal(t, s.ID); paid != want || after.PendingProration != 0 {
		t.Errorf("March at 10 seats from 00:01: payments %v (sum %d), pending %d; want %d charged, 0 pending",
			e.payments(t, s.ID), paid, after.PendingProration, want)
	}
}

// A past_due subscription's seat change is prorated over the period its
// open charge bills, and billed with the next renewal.
func TestQuantityChangeWhilePastDue(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	s := e.decliningFromJune(t)
	if a := e.advance(t, 30*24*time.Hour); a.RenewalFailures != 1 || e.sub(t, s.ID).Status != payments.SubPastDue {
		t.Fatalf("Jul 1: got %+v, want past_due", a)
	}
	q := 10
	got, err := e.svc.ChangeQuantity(ctx, e.sc, s.ID, payments.QuantityInput{Quantity: &q})
	if err != nil {
		t.Fatal(err)
	}
	// Changed at Jul 1 00:01 + a minute's sweep: over [Jul 1, Aug 1).
	if got.PendingProration < 13400 || got.PendingProration > 13500 {
		t.Errorf("pending proration after 1 → 10 seats early in July: %d, want about 9 × 1500", got.PendingProration)
	}
	e.setCard(t, s.ID, e.card(t, s.CustomerID, payments.CardSucceeds))
	if got, err = e.svc.RetryOpenCharge(ctx, e.sc, s.ID); err != nil {
		t.Fatal(err)
	}
	checkPeriod(t, "after recovery", got, payments.SubActive, "2027-07-01T00:00:00Z", "2027-08-01T00:00:00Z")
	if paid := e.paidTotal(t, s.ID); paid != 1500 {
		t.Errorf("July's charge: %d, want 1500 (its amount fixed when written)", paid)
	}
	e.advance(t, 31*24*time.Hour)
	if paid := e.paidTotal(t, s.ID); paid != 1500+15000+got.PendingProration {
		t.Errorf("after August's renewal: paid %v, want 1500, then 15000 + the pending %d", e.payments(t, s.ID), got.PendingProration)
	}
}

// A charge the processor made before the worker died stands as a payment
// even when the subscription is canceled before the charge is recorded.
func TestChargeMadeBeforeCrashStandsAfterCancel(t *testing.T) {
	t.Parallel()
	e := newRenewalEnvOn(t, ownSweepDB(t))
	ctx := context.Background()
	s := e.dueUnswept(t, utc(t, "2027-02-01T00:00:00Z"), 28*24*time.Hour)
	if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
		t.Fatal(err)
	}
	ids := e.charges(t, s.ID)
	if len(ids) != 1 {
		t.Fatalf("charges: %v", ids)
	}
	if out := e.dieAfterCall(t, ids[0], *s.CardID, 1500); !out.Succeeded {
		t.Fatalf("processor charge: %+v", out)
	}
	now := false
	if _, err := e.svc.CancelSubscription(ctx, e.sc, s.ID, payments.CancelInput{AtPeriodEnd: &now}); err != nil {
		t.Fatal(err)
	}
	ch, err := e.svc.ChargeSubscription(ctx, e.sc, ids[0]) // the relay's re-run
	if err != nil {
		t.Fatal(err)
	}
	taken := e.count(t, `SELECT coalesce(sum(amount), 0) FROM sandbox_card_charges WHERE merchant_id = $1 AND succeeded`, e.sc.MerchantID)
	if recorded := e.paidTotal(t, s.ID); taken != 1500 || recorded != 1500 || ch.Status != payments.ChargeSucceeded {
		t.Errorf("card charged %d at the processor, payments recorded %v, charge %s: want one charge of 1500, recorded",
			taken, e.payments(t, s.ID), ch.Status)
	}
	if got := e.sub(t, s.ID); got.Status != payments.SubCanceled {
		t.Errorf("status %s, want canceled (the payment stands, the subscription stays ended)", got.Status)
	}
}

// A portal retry after a worker died mid-attempt answers that attempt with
// the card it was sent with, then charges the new card under a new key.
func TestPortalRetryAfterCrashChargesTheNewCard(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	s := e.decliningFromJune(t)
	e.advance(t, 30*24*time.Hour) // first attempt declined: past_due
	ids := e.charges(t, s.ID)
	if len(ids) != 1 {
		t.Fatalf("charges: %v", ids)
	}
	old := *e.sub(t, s.ID).CardID
	if out := e.dieAfterCall(t, ids[0], old, 1500); out.Succeeded {
		t.Fatalf("the declining card's charge: %+v", out)
	}
	e.setCard(t, s.ID, e.card(t, s.CustomerID, payments.CardSucceeds))
	got, err := e.svc.RetryOpenCharge(ctx, e.sc, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != payments.SubActive || e.paidTotal(t, s.ID) != 1500 {
		t.Errorf("retry with the new working card: status %s, payments %v; want active with one payment of 1500",
			got.Status, e.payments(t, s.ID))
	}
	if n := e.count(t, `SELECT count(*) FROM sandbox_card_charges WHERE merchant_id = $1 AND succeeded`, e.sc.MerchantID); n != 1 {
		t.Errorf("successful processor charges: %d, want 1", n)
	}
}

// Canceling at period end a subscription whose period ended already (unpaid
// after dunning) ends it at once, with customer.subscription.deleted.
func TestCancelAtPeriodEndOfUnpaid(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	s := e.decliningFromJune(t)
	for _, d := range []time.Duration{30, 2, 5, 7} {
		e.advance(t, d*24*time.Hour)
	}
	if st := e.sub(t, s.ID).Status; st != payments.SubUnpaid {
		t.Fatalf("after dunning: %s, want unpaid", st)
	}
	got, err := e.svc.CancelSubscription(ctx, e.sc, s.ID, payments.CancelInput{})
	if err != nil {
		t.Fatalf("cancel at period end: %v", err)
	}
	if got.Status != payments.SubCanceled || got.CancelAtPeriodEnd || got.EndedAt == nil {
		t.Errorf("canceled at the end of a period that ended on %s: status %s, cancel_at_period_end %v, ended_at %v; want canceled now",
			got.CurrentPeriodEnd.Format(time.RFC3339), got.Status, got.CancelAtPeriodEnd, got.EndedAt)
	}
	if evs := e.eventTypes(t, s.ID); !slices.Contains(evs, "customer.subscription.deleted:canceled") {
		t.Errorf("events: %v, want customer.subscription.deleted", evs)
	}
}

// A proration charge of a subscription canceled before it was made records
// nothing after customer.subscription.deleted and leaves nothing pending.
func TestProrationChargeOfEndedSubscription(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	start := utc(t, "2027-06-01T00:00:00Z")
	e.clockTo(t, start.Add(10*24*time.Hour))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardSucceeds, 0)
	q, b := 5, "always_invoice"
	if _, err := e.svc.ChangeQuantity(ctx, e.sc, s.ID, payments.QuantityInput{Quantity: &q, ProrationBehavior: &b}); err != nil {
		t.Fatal(err)
	}
	now := false
	if _, err := e.svc.CancelSubscription(ctx, e.sc, s.ID, payments.CancelInput{AtPeriodEnd: &now}); err != nil {
		t.Fatal(err)
	}
	e.chargePending(t, s.ID)
	evs := e.eventTypes(t, s.ID)
	if n := len(evs); n == 0 || evs[n-1] != "customer.subscription.deleted:canceled" {
		t.Errorf("events: %v, want none after customer.subscription.deleted", evs)
	}
	if got := e.sub(t, s.ID); got.PendingProration != 0 {
		t.Errorf("ended subscription's pending_proration_amount: %d, want 0 (never billed)", got.PendingProration)
	}
}

// A trial's session passes no fee on: nothing is due at checkout.
func TestTrialSessionWithPassFeesDueNothing(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	name, cur, iv, amt, trial := "Seats", "usd", "monthly", int64(1500), 14
	p, err := e.svc.CreateSubscriptionProduct(ctx, e.sc, payments.SubscriptionProductInput{Name: &name, Amount: &amt, Currency: &cur, Interval: &iv})
	if err != nil {
		t.Fatal(err)
	}
	pass, ok, cancel := true, "https://shop.example/ok", "https://shop.example/cancel"
	cs, err := e.svc.CreateSubscriptionSession(ctx, e.sc, payments.SubscriptionSessionInput{
		PriceID: &p.Price.ID, TrialPeriodDays: &trial, PassFeesToCustomer: &pass, SuccessURL: &ok, CancelURL: &cancel,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs.AmountTotal != 0 {
		t.Errorf("trial session with pass_fees_to_customer: amount_total %d, want 0", cs.AmountTotal)
	}
}
