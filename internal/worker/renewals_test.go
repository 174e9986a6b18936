package worker_test

// Renewals, dunning and scheduled cancellations under a moved sandbox
// clock, through payments.Service.AdvanceClock as `api sandbox
// advance-clock` runs it, on the real store and the sandbox processor.
// Each test has its own merchant and moves only its clock. The global
// sweep (RenewDueSubscriptions) also renews and ends the subscriptions of
// every merchant whose clock was moved, so a test that runs it does so on a
// database of its own (ownSweepDB): on the shared one it could end
// another test's subscription between that test's clock move and its own
// sweep, and that test's advance would report nothing ended.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

type renewalEnv struct {
	db    *sqlx.DB
	store *postgres.Store
	svc   *payments.Service
	sc    payments.Scope
}

func newRenewalEnv(t *testing.T) *renewalEnv {
	t.Helper()
	return newRenewalEnvOn(t, testenv.DB(t))
}

// ownSweepDB is a database of the test's own, for a test that runs the
// global sweep: it builds its renewalEnvs on it (newRenewalEnvOn).
func ownSweepDB(t *testing.T) *sqlx.DB {
	t.Helper()
	return testenv.DBOn(t, testenv.OwnDatabaseURL(t))
}

// newRenewalEnvOn is a merchant of its own, with its service, on db.
func newRenewalEnvOn(t *testing.T, db *sqlx.DB) *renewalEnv {
	t.Helper()
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now,
		payments.WithProcessor(sandbox.New(db, "http://checkout.test")), payments.WithSandboxClocks())
	m, err := svc.CreateMerchant(context.Background(), "Renewal shop", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	return &renewalEnv{db: db, store: store, svc: svc, sc: payments.Scope{MerchantID: m.ID}}
}

// clockTo moves the merchant's clock to t (in the future of real time).
func (e *renewalEnv) clockTo(t *testing.T, at time.Time) {
	t.Helper()
	if _, err := e.svc.AdvanceClock(context.Background(), e.sc, time.Until(at)); err != nil {
		t.Fatalf("advance clock to %s: %v", at, err)
	}
}

// advance moves the clock by d and returns what came due.
func (e *renewalEnv) advance(t *testing.T, d time.Duration) payments.ClockAdvance {
	t.Helper()
	a, err := e.svc.AdvanceClock(context.Background(), e.sc, d)
	if err != nil {
		t.Fatalf("advance clock by %s: %v", d, err)
	}
	return a
}

// subscribe stores a subscription of qty × 1500 usd every interval from
// start, paid with a saved sandbox card of behavior; with trial > 0 it is
// trialing until start+trial.
func (e *renewalEnv) subscribe(t *testing.T, iv payments.Interval, start time.Time, qty int, behavior string, trial time.Duration) payments.Subscription {
	t.Helper()
	ctx := context.Background()
	cus := payments.Customer{ID: payments.NewID("cus_"), Created: start}
	if err := e.store.CreateCustomer(ctx, e.sc, cus); err != nil {
		t.Fatal(err)
	}
	card := e.card(t, cus.ID, behavior)
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: start,
		CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1), Metadata: map[string]string{"plan": "gold"},
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Gold", Quantity: qty,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
		CardID: &card, Created: start,
	}
	if trial > 0 {
		end := start.Add(trial)
		sub.Status, sub.TrialEnd, sub.CurrentPeriodEnd = payments.SubTrialing, &end, end
	}
	if err := e.store.CreateSubscription(ctx, e.sc, sub, payments.Effects{}); err != nil {
		t.Fatal(err)
	}
	return sub
}

// card saves a sandbox card of behavior for the customer and returns its id.
func (e *renewalEnv) card(t *testing.T, customerID, behavior string) string {
	t.Helper()
	id, last4 := payments.NewID("card_"), "4242"
	if behavior == payments.CardDeclines {
		last4 = "0341"
	}
	_, err := e.db.Exec(`INSERT INTO sandbox_cards (id, merchant_id, livemode, customer_id, brand, last4, exp_month, exp_year, behavior)
		VALUES ($1, $2, $3, $4, 'visa', $5, 12, 2040, $6)`, id, e.sc.MerchantID, e.sc.Live, customerID, last4, behavior)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// dueUnswept subscribes from start (the clock moved there) with a card that
// succeeds, then moves the clock by d without sweeping (the store's
// AdvanceClock, not the Service's), and waits out the clock's offset cache:
// the renewal is due, for the test's own sweeps.
func (e *renewalEnv) dueUnswept(t *testing.T, start time.Time, d time.Duration) payments.Subscription {
	t.Helper()
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardSucceeds, 0)
	if _, err := e.store.AdvanceClock(context.Background(), e.sc, d); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the clock's offset cache
	return s
}

// setCard makes card the subscription's card, as the portal does.
func (e *renewalEnv) setCard(t *testing.T, subID, card string) {
	t.Helper()
	if _, err := e.db.Exec(`UPDATE subscriptions SET card_id = $1 WHERE id = $2`, card, subID); err != nil {
		t.Fatal(err)
	}
}

func (e *renewalEnv) sub(t *testing.T, id string) payments.Subscription {
	t.Helper()
	s, err := e.svc.Subscription(context.Background(), e.sc, id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// charges returns the subscription's charge ids once there is one (or after
// 10 s). Sweeps are global: a parallel test's sweep may hold this
// subscription's row, writing its charge, while this test's own sweeps skip
// the locked row and return; that charge commits a moment later.
func (e *renewalEnv) charges(t *testing.T, subID string) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ids []string
		if err := e.db.Select(&ids, `SELECT id FROM subscription_charges WHERE subscription_id = $1`, subID); err != nil {
			t.Fatal(err)
		}
		if len(ids) > 0 || time.Now().After(deadline) {
			return ids
		}
	}
}

func (e *renewalEnv) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.Get(&n, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// payments returns the amounts of the subscription's payments, oldest first.
func (e *renewalEnv) payments(t *testing.T, subID string) []int64 {
	t.Helper()
	var out []int64
	if err := e.db.Select(&out, `SELECT amount FROM payment_intents WHERE merchant_id = $1 AND subscription_id = $2
		AND status = 'succeeded' ORDER BY created_at, id`, e.sc.MerchantID, subID); err != nil {
		t.Fatal(err)
	}
	return out
}

// eventTypes are the types of the scope's events about id, in order, with
// each one's status.
func (e *renewalEnv) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	evs, err := e.store.Events(context.Background(), e.sc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		var p struct {
			Data struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Data.ID == id {
			out = append(out, ev.Type+":"+p.Data.Status)
		}
	}
	return out
}

func checkPeriod(t *testing.T, what string, s payments.Subscription, status, start, end string) {
	t.Helper()
	if s.Status != status || !s.CurrentPeriodStart.Equal(utc(t, start)) || !s.CurrentPeriodEnd.Equal(utc(t, end)) {
		t.Errorf("%s: got %s [%s, %s), want %s [%s, %s)", what, s.Status, s.CurrentPeriodStart.Format(time.RFC3339),
			s.CurrentPeriodEnd.Format(time.RFC3339), status, start, end)
	}
}

func utc(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func monthly(t *testing.T) payments.Interval {
	iv, err := payments.ProductInterval(payments.Monthly)
	if err != nil {
		t.Fatal(err)
	}
	return iv
}

// A monthly subscription anchored on Jan 31 renews Feb 29 (a leap year),
// then Mar 31, then Apr 30: periods come from the anchor, not from the
// previous end. Each renewal is a payment naming the subscription, with
// its fee and ledger entry, and customer.subscription.updated follows it.
func TestRenewalMonthEndAnchors(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2028-01-31T12:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 2, payments.CardSucceeds, 0)

	if a := e.advance(t, 28*24*time.Hour); a.Renewals != 0 {
		t.Fatalf("Feb 28: got %d renewals, want 0 (the period ends Feb 29)", a.Renewals)
	}
	a := e.advance(t, 24*time.Hour)
	if a.Renewals != 1 || a.RenewalFailures != 0 {
		t.Fatalf("Feb 29: got %+v, want one renewal", a)
	}
	checkPeriod(t, "after the first renewal", e.sub(t, s.ID), payments.SubActive, "2028-02-29T12:00:00Z", "2028-03-31T12:00:00Z")
	e.advance(t, 31*24*time.Hour)
	checkPeriod(t, "after the second renewal", e.sub(t, s.ID), payments.SubActive, "2028-03-31T12:00:00Z", "2028-04-30T12:00:00Z")
	if a := e.advance(t, 30*24*time.Hour); a.Renewals != 1 {
		t.Fatalf("Apr 30: got %+v, want one renewal", a)
	}
	checkPeriod(t, "after the third renewal", e.sub(t, s.ID), payments.SubActive, "2028-04-30T12:00:00Z", "2028-05-31T12:00:00Z")

	if got := e.payments(t, s.ID); fmt.Sprint(got) != "[3000 3000 3000]" {
		t.Errorf("payments of the subscription: got %v, want three of 3000", got)
	}
	// 3000 − 4.9 % − 40 = 2813 each, credited through the ledger.
	if n := e.count(t, `SELECT count(*) FROM ledger_entries l JOIN payment_intents p ON p.id = l.source_id
		WHERE p.subscription_id = $1 AND l.type = 'payment' AND l.amount = 2813 AND l.fee = 187`, s.ID); n != 3 {
		t.Errorf("ledger entries of the renewals: got %d of 2813 net (fee 187), want 3", n)
	}
	if n := e.count(t, `SELECT count(*) FROM subscription_charges WHERE subscription_id = $1 AND status = 'succeeded'
		AND payment_intent_id IS NOT NULL AND attempts = 1`, s.ID); n != 3 {
		t.Errorf("succeeded charges: got %d, want 3", n)
	}
	want := "[customer.subscription.updated:active customer.subscription.updated:active customer.subscription.updated:active]"
	if got := e.eventTypes(t, s.ID); fmt.Sprint(got) != want {
		t.Errorf("events of the subscription: got %v, want %s", got, want)
	}
}

// A renewal charged to the dispute card (4000 0000 0000 0259) succeeds,
// then a fraudulent dispute opens on its payment, as on a one-time payment:
// the processor event is written with the charge, and a worker opens it.
func TestRenewalOnTheDisputeCardOpensADispute(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	ctx := context.Background()
	start := utc(t, "2028-06-01T00:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardDisputes, 0)
	if a := e.advance(t, 30*24*time.Hour); a.Renewals != 1 {
		t.Fatalf("renewal: got %+v, want one", a)
	}
	checkPeriod(t, "after the renewal", e.sub(t, s.ID), payments.SubActive, "2028-07-01T00:00:00Z", "2028-08-01T00:00:00Z")
	var pi, pev string
	if err := e.db.QueryRow(`SELECT payment_intent_id FROM subscription_charges WHERE subscription_id = $1 AND status = 'succeeded'`,
		s.ID).Scan(&pi); err != nil {
		t.Fatalf("the renewal's payment: %v", err)
	}
	if err := e.db.QueryRow(`SELECT id FROM processor_events WHERE merchant_id = $1 AND payment_intent_id = $2 AND type = $3 AND processed_at IS NULL`,
		e.sc.MerchantID, pi, payments.ProcessorDisputeCreated).Scan(&pev); err != nil {
		t.Fatalf("the renewal's dispute.created, written with the charge: %v", err)
	}
	if err := e.svc.ApplyProcessorEvent(ctx, e.sc, pev); err != nil {
		t.Fatal(err)
	}
	var d struct {
		Status, Reason string
		Amount         int64
	}
	if err := e.db.QueryRow(`SELECT status, reason, amount FROM disputes WHERE merchant_id = $1 AND payment_intent_id = $2`,
		e.sc.MerchantID, pi).Scan(&d.Status, &d.Reason, &d.Amount); err != nil {
		t.Fatalf("the renewal's dispute: %v", err)
	}
	if d.Status != payments.DisputeNeedsResponse || d.Reason != "fraudulent" || d.Amount != 1500 {
		t.Errorf("the renewal's dispute: got %+v, want needs_response, fraudulent, 1500", d)
	}
	// The working card's renewals open none.
	ok := e.subscribe(t, monthly(t), start.Add(time.Hour), 1, payments.CardSucceeds, 0)
	e.advance(t, 24*time.Hour)
	if n := e.count(t, `SELECT count(*) FROM processor_events p JOIN subscription_charges c ON c.payment_intent_id = p.payment_intent_id
		WHERE c.subscription_id = $1 AND p.type = $2`, ok.ID, payments.ProcessorDisputeCreated); n != 0 {
		t.Errorf("dispute.created on a renewal with 4242: got %d, want 0", n)
	}
}

// A trial's end charges the first period and re-anchors the cycle on it.
func TestRenewalAtTrialEnd(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2027-03-10T08:30:00Z")
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardSucceeds, 14*24*time.Hour)

	if a := e.advance(t, 13*24*time.Hour); a.Renewals != 0 || e.sub(t, s.ID).Status != payments.SubTrialing {
		t.Fatalf("day 13: got %+v, want still trialing", a)
	}
	if a := e.advance(t, 24*time.Hour); a.Renewals != 1 {
		t.Fatalf("trial end: got %+v, want one renewal", a)
	}
	got := e.sub(t, s.ID)
	checkPeriod(t, "after the trial", got, payments.SubActive, "2027-03-24T08:30:00Z", "2027-04-24T08:30:00Z")
	if !got.Anchor.Equal(utc(t, "2027-03-24T08:30:00Z")) {
		t.Errorf("anchor: got %s, want the trial's end", got.Anchor)
	}
	e.advance(t, 31*24*time.Hour)
	checkPeriod(t, "next renewal", e.sub(t, s.ID), payments.SubActive, "2027-04-24T08:30:00Z", "2027-05-24T08:30:00Z")
	if got := e.payments(t, s.ID); fmt.Sprint(got) != "[1500 1500]" {
		t.Errorf("payments: got %v, want two of 1500", got)
	}
}

// A declined renewal makes the subscription past_due and is retried 2, 7
// and 14 days after the first failure, each attempt its own processor
// charge; the last decline makes it unpaid. A card that works then, with
// RetryOpenCharge (the portal's card update), makes it active again.
func TestDunningToUnpaidThenActive(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2027-06-01T00:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardDeclines, 0)

	steps := []struct {
		by     time.Duration
		fails  int
		status string
	}{
		{30 * 24 * time.Hour, 1, payments.SubPastDue}, // Jul 1: first failure
		{24 * time.Hour, 0, payments.SubPastDue},      // day 1: nothing due
		{24 * time.Hour, 1, payments.SubPastDue},      // day 2: second attempt
		{5 * 24 * time.Hour, 1, payments.SubPastDue},  // day 7: third
		{6 * 24 * time.Hour, 0, payments.SubPastDue},  // day 13
		{24 * time.Hour, 1, payments.SubUnpaid},       // day 14: last
		{30 * 24 * time.Hour, 0, payments.SubUnpaid},  // no more attempts, no renewal
	}
	for i, st := range steps {
		a := e.advance(t, st.by)
		got := e.sub(t, s.ID)
		if a.RenewalFailures != st.fails || a.Renewals != 0 || got.Status != st.status {
			t.Fatalf("step %d: got %d failures, %d renewals, %s, want %d failures, %s", i, a.RenewalFailures, a.Renewals, got.Status, st.fails, st.status)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM sandbox_card_charges WHERE merchant_id = $1 AND NOT succeeded`, e.sc.MerchantID); n != 4 {
		t.Errorf("declined processor charges: got %d, want 4 (one per attempt)", n)
	}
	if n := e.count(t, `SELECT count(*) FROM subscription_charges WHERE subscription_id = $1 AND status = 'failed'
		AND attempts = 4 AND first_failed_at IS NOT NULL`, s.ID); n != 1 {
		t.Errorf("charge after the last attempt: want one failed after 4 attempts")
	}
	want := "[customer.subscription.updated:past_due customer.subscription.updated:unpaid]"
	if got := e.eventTypes(t, s.ID); fmt.Sprint(got) != want {
		t.Errorf("events: got %v, want %s", got, want)
	}

	// The customer saves a working card (the portal), which retries at once.
	card := e.card(t, s.CustomerID, payments.CardSucceeds)
	e.setCard(t, s.ID, card)
	got, err := e.svc.RetryOpenCharge(context.Background(), e.sc, s.ID)
	if err != nil {
		t.Fatalf("RetryOpenCharge: %v", err)
	}
	checkPeriod(t, "after the retry", got, payments.SubActive, "2027-07-01T00:00:00Z", "2027-08-01T00:00:00Z")
	if got := e.payments(t, s.ID); fmt.Sprint(got) != "[1500]" {
		t.Errorf("payments: got %v, want one of 1500", got)
	}
	if _, err := e.svc.RetryOpenCharge(context.Background(), e.sc, s.ID); payments.ErrorCode(err) != payments.ValidationError {
		t.Errorf("RetryOpenCharge of an active subscription: got %v, want validation_error", err)
	}
}

// A past_due subscription whose retry succeeds is active again, in the
// period the charge was for.
func TestDunningRecovers(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2027-09-15T10:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	iv, _ := payments.ProductInterval(payments.Weekly)
	s := e.subscribe(t, iv, start, 3, payments.CardDeclines, 0)
	if a := e.advance(t, 7*24*time.Hour); a.RenewalFailures != 1 || e.sub(t, s.ID).Status != payments.SubPastDue {
		t.Fatalf("week 1: got %+v, want one failure, past_due", a)
	}
	card := e.card(t, s.CustomerID, payments.CardSucceeds)
	e.setCard(t, s.ID, card)
	if a := e.advance(t, 2*24*time.Hour); a.Renewals != 1 {
		t.Fatalf("retry on day 2: got %+v, want one renewal", a)
	}
	checkPeriod(t, "after the successful retry", e.sub(t, s.ID), payments.SubActive, "2027-09-22T10:00:00Z", "2027-09-29T10:00:00Z")
	if got := e.payments(t, s.ID); fmt.Sprint(got) != "[4500]" {
		t.Errorf("payments: got %v, want one of 4500", got)
	}
	want := "[customer.subscription.updated:past_due customer.subscription.updated:active]"
	if got := e.eventTypes(t, s.ID); fmt.Sprint(got) != want {
		t.Errorf("events: got %v, want %s", got, want)
	}
}

// A cancellation scheduled for the period's end ends the subscription at
// that end, without a charge; .deleted is recorded only then.
func TestScheduledCancellationAtPeriodEnd(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2027-11-05T00:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	s := e.subscribe(t, monthly(t), start, 1, payments.CardSucceeds, 0)
	if _, err := e.svc.CancelSubscription(context.Background(), e.sc, s.ID, payments.CancelInput{}); err != nil {
		t.Fatal(err)
	}
	if a := e.advance(t, 29*24*time.Hour); a.EndedSubscriptions != 0 || e.sub(t, s.ID).Status != payments.SubActive {
		t.Fatalf("before the end: got %+v, want still active", a)
	}
	if a := e.advance(t, 24*time.Hour); a.EndedSubscriptions != 1 || a.Renewals != 0 {
		t.Fatalf("period end: got %+v, want one ended, no renewal", a)
	}
	got := e.sub(t, s.ID)
	end := utc(t, "2027-12-05T00:00:00Z")
	if got.Status != payments.SubCanceled || got.EndedAt == nil || !got.EndedAt.Equal(end) || got.CanceledAt == nil || !got.CanceledAt.Equal(end) {
		t.Errorf("after the end: got %s ended %v canceled %v, want canceled at %s", got.Status, got.EndedAt, got.CanceledAt, end)
	}
	if n := e.count(t, `SELECT count(*) FROM subscription_charges WHERE subscription_id = $1`, s.ID); n != 0 {
		t.Errorf("charges: got %d, want none", n)
	}
	want := "[customer.subscription.updated:active customer.subscription.updated:canceled customer.subscription.deleted:canceled]"
	if got := e.eventTypes(t, s.ID); fmt.Sprint(got) != want {
		t.Errorf("events: got %v, want %s", got, want)
	}
}

// However often the renewal of a period is attempted at once (two
// schedulers' sweeps, a duplicated task, advance-clock beside the worker),
// it is one charge row, one processor charge and one payment.
func TestRenewalExactlyOnceUnderRaces(t *testing.T) {
	t.Parallel()
	e := newRenewalEnvOn(t, ownSweepDB(t))
	ctx := context.Background()
	s := e.dueUnswept(t, utc(t, "2027-02-01T00:00:00Z"), 28*24*time.Hour)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
				t.Errorf("sweep: %v", err)
			}
		}()
	}
	wg.Wait()
	ids := e.charges(t, s.ID)
	if len(ids) != 1 {
		t.Fatalf("charges after four sweeps: got %v, want one", ids)
	}
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.svc.ChargeSubscription(ctx, e.sc, ids[0]); err != nil {
				t.Errorf("charge: %v", err)
			}
		}()
	}
	wg.Wait()
	if got := e.payments(t, s.ID); fmt.Sprint(got) != "[1500]" {
		t.Errorf("payments after six concurrent charges: got %v, want one of 1500", got)
	}
	if n := e.count(t, `SELECT count(*) FROM sandbox_card_charges WHERE merchant_id = $1`, e.sc.MerchantID); n != 1 {
		t.Errorf("processor charges: got %d, want 1", n)
	}
	checkPeriod(t, "after the renewal", e.sub(t, s.ID), payments.SubActive, "2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z")
}

// The sweep leaves out of its index the subscriptions whose renewal charge
// it wrote (renewal_charged_for, migration 0017), so that a backlog of
// charges waiting for their attempt is not read again by every batch, and
// takes each back once its charge moved the period.
func TestSweepLeavesChargedSubscriptionsOut(t *testing.T) {
	t.Parallel()
	e := newRenewalEnvOn(t, ownSweepDB(t))
	ctx := context.Background()
	s := e.dueUnswept(t, utc(t, "2028-09-01T00:00:00Z"), 30*24*time.Hour)
	// inIndex is whether the subscription is in the sweep's index.
	inIndex := func() bool {
		t.Helper()
		return e.count(t, `SELECT count(*) FROM subscriptions WHERE id = $1 AND status IN ('active', 'trialing', 'past_due')
			AND processor_subscription_id IS NULL AND renewal_charged_for IS DISTINCT FROM current_period_end`, s.ID) == 1
	}
	if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
		t.Fatal(err)
	}
	ids := e.charges(t, s.ID)
	if len(ids) != 1 {
		t.Fatalf("charges after the sweep: got %v, want one", ids)
	}
	if inIndex() {
		t.Error("its renewal charge written: still in the sweep's index")
	}
	if _, err := e.svc.ChargeSubscription(ctx, e.sc, ids[0]); err != nil {
		t.Fatal(err)
	}
	checkPeriod(t, "after the charge", e.sub(t, s.ID), payments.SubActive, "2028-10-01T00:00:00Z", "2028-11-01T00:00:00Z")
	if !inIndex() {
		t.Error("renewed: not back in the sweep's index")
	}
}

// A cancellation racing a renewal's charge leaves one consistent outcome:
// canceled, with either no charge made (the charge failed
// subscription_ended) or one payment that stands (renewed, then canceled;
// or canceled while the processor charged: not renewed), and never a
// canceled subscription moved to a new period or made active again.
func TestCancelRacingRenewal(t *testing.T) {
	t.Parallel()
	db := ownSweepDB(t)
	for i := range 6 {
		e := newRenewalEnvOn(t, db)
		ctx := context.Background()
		s := e.dueUnswept(t, utc(t, "2027-04-01T00:00:00Z"), 30*24*time.Hour)
		if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		ids := e.charges(t, s.ID)
		if len(ids) != 1 {
			t.Fatalf("charges after the sweep: got %v, want one", ids)
		}
		id := ids[0]
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := e.svc.ChargeSubscription(ctx, e.sc, id); err != nil {
				t.Errorf("charge: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if i%2 == 1 {
				time.Sleep(time.Duration(i) * time.Millisecond)
			}
			f := false
			if _, err := e.svc.CancelSubscription(ctx, e.sc, s.ID, payments.CancelInput{AtPeriodEnd: &f}); err != nil {
				t.Errorf("cancel: %v", err)
			}
		}()
		wg.Wait()
		got := e.sub(t, s.ID)
		ch, err := e.store.SubscriptionCharge(ctx, e.sc, id)
		if err != nil {
			t.Fatal(err)
		}
		pays := e.payments(t, s.ID)
		renewed := got.CurrentPeriodEnd.Equal(utc(t, "2027-06-01T00:00:00Z"))
		if got.Status != payments.SubCanceled || (!renewed && !got.CurrentPeriodEnd.Equal(utc(t, "2027-05-01T00:00:00Z"))) ||
			(renewed && ch.Status != payments.ChargeSucceeded) {
			t.Errorf("run %d: got %s until %s with the charge %s, want canceled, renewed only by a charge that succeeded",
				i, got.Status, got.CurrentPeriodEnd, ch.Status)
		}
		switch ch.Status {
		case payments.ChargeSucceeded:
			if len(pays) != 1 {
				t.Errorf("run %d: charge succeeded with payments %v, want one", i, pays)
			}
		case payments.ChargeFailed:
			if len(pays) != 0 || ch.DeclineCode == nil || *ch.DeclineCode != payments.DeclineSubscriptionEnded {
				t.Errorf("run %d: charge failed (%v) with payments %v, want subscription_ended and none", i, ch.DeclineCode, pays)
			}
		default:
			t.Errorf("run %d: charge left %s", i, ch.Status)
		}
	}
}

// workerFirst is the store of an advance-clock with a worker beside it:
// whenever the command looks for the scope's due charges, the worker has
// just charged them all (it took their tasks the moment the sweep wrote
// them), so the command finds none to charge itself. The worker is the
// command's own Service, which knows of the move at once (another's clock
// cache would see it a second later).
type workerFirst struct {
	*postgres.Store
	worker *payments.Service
}

func (w *workerFirst) DueSubscriptionCharges(ctx context.Context, sc payments.Scope, now time.Time, limit int) ([]string, error) {
	ids, err := w.Store.DueSubscriptionCharges(ctx, sc, now, limit)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := w.worker.ChargeSubscription(ctx, sc, id); err != nil {
			return nil, err
		}
	}
	return w.Store.DueSubscriptionCharges(ctx, sc, now, limit)
}

// advance-clock reports what the move made happen in the scope, whoever
// did it: renewals a worker charged while the command ran count as the
// command's own would.
func TestAdvanceClockCountsWhatAWorkerDid(t *testing.T) {
	t.Parallel()
	e := newRenewalEnv(t)
	start := utc(t, "2029-04-01T00:00:00Z")
	e.clockTo(t, start.Add(time.Minute))
	paid := e.subscribe(t, monthly(t), start, 1, payments.CardSucceeds, 0)
	declined := e.subscribe(t, monthly(t), start, 2, payments.CardDeclines, 0)
	store := &workerFirst{Store: e.store}
	cmd := payments.NewService(store, nil, time.Now,
		payments.WithProcessor(sandbox.New(e.db, "http://checkout.test")), payments.WithSandboxClocks())
	store.worker = cmd
	a, err := cmd.AdvanceClock(context.Background(), e.sc, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if a.Renewals != 1 || a.RenewalFailures != 1 || a.EndedSubscriptions != 0 {
		t.Errorf("got %+v, want 1 renewal and 1 failure, which the worker charged", a)
	}
	checkPeriod(t, "the paid one", e.sub(t, paid.ID), payments.SubActive, "2029-05-01T00:00:00Z", "2029-06-01T00:00:00Z")
	if got := e.sub(t, declined.ID); got.Status != payments.SubPastDue {
		t.Errorf("the declined one: got %s, want past_due", got.Status)
	}
}
