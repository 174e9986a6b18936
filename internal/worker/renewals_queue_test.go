package worker_test

// Renewals through the queue: the sweep writes the charge and its task is
// enqueued after commit; the relay re-enqueues it after Redis lost it; a
// worker killed in the middle of the processor call leaves the charge to
// the next one, which gets the processor's recorded answer. Not parallel
// (see money_test.go), except TestAfterWorkerKilled/Renewal, which is
// parallel on databases of its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/worker"
)

// dueSubscription stores a monthly subscription of 1500 usd, paid with a
// saved card that succeeds, whose first period ended an hour ago (real
// time), and runs the renewal sweep; it returns the subscription and the
// id of its renewal charge.
func (s *deliveryStack) dueSubscription(t *testing.T, sc payments.Scope) (payments.Subscription, string) {
	t.Helper()
	ctx := context.Background()
	iv, _ := payments.ProductInterval(payments.Monthly)
	start := time.Now().UTC().Truncate(time.Second).AddDate(0, -1, 0).Add(-time.Hour)
	cus := payments.Customer{ID: payments.NewID("cus_"), Created: start}
	if err := s.store.CreateCustomer(ctx, sc, cus); err != nil {
		t.Fatal(err)
	}
	card := payments.NewID("card_")
	if _, err := s.db.Exec(`INSERT INTO sandbox_cards (id, merchant_id, livemode, customer_id, brand, last4, exp_month, exp_year, behavior)
		VALUES ($1, $2, false, $3, 'visa', '4242', 12, 2040, 'succeeds')`, card, sc.MerchantID, cus.ID); err != nil {
		t.Fatal(err)
	}
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: start,
		CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1),
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Plan", Quantity: 1,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: paid, Currency: "usd", Interval: iv}}},
		CardID: &card, Created: start,
	}
	if err := s.store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.RenewDueSubscriptions(ctx, payments.SweepBatch); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	var id string
	if err := s.db.Get(&id, `SELECT id FROM subscription_charges WHERE subscription_id = $1 AND status = 'pending'`, sub.ID); err != nil {
		t.Fatalf("the renewal's charge: %v", err)
	}
	return sub, id
}

// chargeDone waits until the charge is no longer pending.
func (s *deliveryStack) chargeDone(t *testing.T, sc payments.Scope, id string, within time.Duration) payments.SubscriptionCharge {
	t.Helper()
	var ch payments.SubscriptionCharge
	waitUntil(t, within, "charge "+id+" settled", func() (bool, string) {
		var err error
		if ch, err = s.store.SubscriptionCharge(context.Background(), sc, id); err != nil {
			t.Fatal(err)
		}
		return ch.Status != payments.ChargePending, ch.Status
	})
	return ch
}

// checkRenewedOnce: one processor charge, one payment with its ledger
// credit, the period moved once.
func (s *deliveryStack) checkRenewedOnce(t *testing.T, sc payments.Scope, sub payments.Subscription, chargeID string) {
	t.Helper()
	if n := s.count(t, `SELECT count(*) FROM sandbox_card_charges WHERE charge_key LIKE $1`, chargeID+"%"); n != 1 {
		t.Errorf("processor charges of %s: got %d, want 1", chargeID, n)
	}
	if n := s.count(t, `SELECT count(*) FROM payment_intents WHERE subscription_id = $1 AND status = 'succeeded' AND amount = $2`, sub.ID, paid); n != 1 {
		t.Errorf("payments of %s: got %d, want 1", sub.ID, n)
	}
	if n := s.count(t, `SELECT count(*) FROM ledger_entries l JOIN payment_intents p ON p.id = l.source_id
		WHERE p.subscription_id = $1 AND l.amount = $2`, sub.ID, netPaid); n != 1 {
		t.Errorf("ledger credits of %s: got %d, want 1", sub.ID, n)
	}
	got, err := s.svc.Subscription(context.Background(), sc, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != payments.SubActive || !got.CurrentPeriodStart.Equal(sub.CurrentPeriodEnd) {
		t.Errorf("subscription: got %s from %s, want active from %s", got.Status, got.CurrentPeriodStart, sub.CurrentPeriodEnd)
	}
}

// The charge's task is enqueued after the sweep commits; Redis loses it;
// the relay enqueues it again from the pending row, and a duplicate of the
// task (another id, same charge) changes nothing: one charge, one payment.
func TestRenewalAfterRedisFlushAndDuplicatedTask(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Flushed renewal shop")}
	sub, id := s.dueSubscription(t, sc)

	info := s.queuedTask(t, tasks.QueueBilling, id)
	var ref tasks.Ref
	if err := json.Unmarshal(info.Payload, &ref); err != nil || info.Type != tasks.TypeSubscriptionCharge ||
		ref != (tasks.Ref{MerchantID: sc.MerchantID, ID: id}) {
		t.Fatalf("task %s: got %s %s (%v), want a %s for the charge", id, info.Type, info.Payload, err, tasks.TypeSubscriptionCharge)
	}
	if err := testenv.Redis(t).FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := worker.RelayOnce(ctx, s.store, s.enq, time.Now(), 0); err != nil || n < 1 {
		t.Fatalf("RelayOnce: got %d, %v, want the charge re-enqueued", n, err)
	}
	if !s.pendingTasks(t, tasks.QueueBilling)[id] {
		t.Fatalf("after RelayOnce: no task for %s", id)
	}
	dup := tasks.NewMoneyTask(tasks.TypeSubscriptionCharge, tasks.Ref{MerchantID: sc.MerchantID, ID: id})
	client := asynq.NewClient(s.redisOpt)
	defer client.Close()
	if _, err := client.Enqueue(asynq.NewTask(dup.Type(), dup.Payload(), asynq.TaskID(id+"_duplicate"), asynq.Queue(tasks.QueueBilling))); err != nil {
		t.Fatal(err)
	}

	s.startMoneyWorker(t, nil, nil)
	if ch := s.chargeDone(t, sc, id, 15*time.Second); ch.Status != payments.ChargeSucceeded {
		t.Fatalf("charge: got %+v, want succeeded", ch)
	}
	waitUntil(t, 10*time.Second, "both tasks done", func() (bool, string) {
		p := s.pendingTasks(t, tasks.QueueBilling)
		return len(p) == 0, fmt.Sprint(p)
	})
	s.checkRenewedOnce(t, sc, sub, id)
}

// A worker killed after the processor charged the card, before it
// recorded the charge: the next worker runs the same attempt, the sandbox
// answers from its record, and the renewal is recorded once.
func renewalExactlyOnceAfterWorkerKilled(t *testing.T) {
	bin := buildWorker(t)
	s := newDeliveryStackOn(t, testenv.OwnDatabaseURL(t), testenv.OwnRedisURL(t))
	sc := payments.Scope{MerchantID: s.merchant(t, "Killed renewal shop")}

	// SANDBOX_REFUND_LATENCY also delays saved-card charges.
	first := startWorkerProcess(t, s, bin, "first worker", "SANDBOX_REFUND_LATENCY=20s")
	sub, id := s.dueSubscription(t, sc)
	waitUntil(t, 30*time.Second, "the sandbox to have charged "+id, func() (bool, string) {
		n := s.count(t, `SELECT count(*) FROM sandbox_card_charges WHERE charge_key LIKE $1`, id+"%")
		return n == 1, fmt.Sprintf("%d sandbox_card_charges rows", n)
	})
	first.kill(t)
	if ch, err := s.store.SubscriptionCharge(context.Background(), sc, id); err != nil || ch.Status != payments.ChargePending || ch.Attempts != 0 {
		t.Fatalf("charge after the kill: got %+v, %v, want pending with no attempt recorded", ch, err)
	}

	startWorkerProcess(t, s, bin, "second worker", "SANDBOX_REFUND_LATENCY=0s")
	waitUntil(t, 100*time.Second, "the dead worker's task recovered", func() (bool, string) {
		info, err := s.insp.GetTaskInfo(tasks.QueueBilling, id)
		if err != nil {
			return false, err.Error()
		}
		if info.State == asynq.TaskStateRetry {
			_ = s.insp.RunTask(tasks.QueueBilling, id) // cmd/worker would wait its backoff first
		}
		return info.State != asynq.TaskStateActive, fmt.Sprintf("state %v", info.State)
	})
	if ch := s.chargeDone(t, sc, id, 30*time.Second); ch.Status != payments.ChargeSucceeded || ch.Attempts != 1 {
		t.Fatalf("charge after the second worker: got %+v, want succeeded in one attempt", ch)
	}
	s.checkRenewedOnce(t, sc, sub, id)
}
