package main

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// `api sandbox advance-clock` renews what came due on the merchant's clock
// before it returns, and counts it: a renewal charged, one declined (the
// 0341 card: past_due) and a scheduled cancellation that took effect.
func TestSandboxAdvanceClockRenews(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	store := postgres.New(db)
	ctx := context.Background()
	mch := newMerchant(t, db)
	sc := payments.Scope{MerchantID: mch}
	iv, _ := payments.ProductInterval(payments.Monthly)
	start := time.Now().UTC().Truncate(time.Second).AddDate(0, -1, 1) // the period ends in a day
	subscribe := func(behavior string, cancelAtEnd bool) string {
		t.Helper()
		cus := payments.Customer{ID: payments.NewID("cus_"), Created: start}
		if err := store.CreateCustomer(ctx, sc, cus); err != nil {
			t.Fatal(err)
		}
		card := payments.NewID("card_")
		if _, err := db.Exec(`INSERT INTO sandbox_cards (id, merchant_id, livemode, customer_id, brand, last4, exp_month, exp_year, behavior)
			VALUES ($1, $2, false, $3, 'visa', '4242', 12, 2040, $4)`, card, mch, cus.ID, behavior); err != nil {
			t.Fatal(err)
		}
		sub := payments.Subscription{
			ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: start,
			CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1), CancelAtPeriodEnd: cancelAtEnd,
			Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Plan", Quantity: 1,
				Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
			CardID: &card, Created: start,
		}
		if err := store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
			t.Fatal(err)
		}
		return sub.ID
	}
	renewed, declined, ended := subscribe(payments.CardSucceeds, false), subscribe(payments.CardDeclines, false), subscribe(payments.CardSucceeds, true)

	args := []string{"sandbox", "advance-clock", "--merchant", mch, "--mode", "test", "--by", "2d"}
	r := cli(t, args...)
	r.wantExit(t, 0, "sandbox advance-clock --by 2d")
	got := r.decode(t)
	if got["renewals"] != float64(1) || got["renewal_failures"] != float64(1) || got["ended_subscriptions"] != float64(1) {
		t.Errorf("got %v, want renewals 1, renewal_failures 1, ended_subscriptions 1", got)
	}
	for id, want := range map[string]string{renewed: payments.SubActive, declined: payments.SubPastDue, ended: payments.SubCanceled} {
		var status string
		if err := db.Get(&status, `SELECT status FROM subscriptions WHERE id = $1`, id); err != nil || status != want {
			t.Errorf("subscription %s: got %q, %v, want %s when the command returns", id, status, err, want)
		}
	}
}
