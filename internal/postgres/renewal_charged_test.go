package postgres_test

import (
	"testing"
	"time"

	"paysvc/internal/payments"
)

// TestMigrationMarksChargedRenewals: 0017 marks the subscriptions whose
// renewal charge for the period after their current one exists (a renewal
// waiting for its attempt, or dunning), and only those, so that the sweep's
// index leaves them out from the start.
func TestMigrationMarksChargedRenewals(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 16)
	sc, _ := seedScope(t, db)
	cus := payments.NewID("cus_")
	if _, err := db.Exec(`INSERT INTO customers (id, merchant_id, livemode) VALUES ($1, $2, false)`, cus, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 1, 0)
	subscription := func(status string) string {
		t.Helper()
		id := payments.NewID("sub_")
		if _, err := db.Exec(`INSERT INTO subscriptions (id, merchant_id, livemode, customer_id, status, currency, anchor,
			current_period_start, current_period_end) VALUES ($1, $2, false, $3, $4, 'usd', $5, $5, $6)`,
			id, sc.MerchantID, cus, status, start, end); err != nil {
			t.Fatal(err)
		}
		return id
	}
	charge := func(sub string, periodStart time.Time, status string) {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO subscription_charges (id, merchant_id, livemode, subscription_id, kind, period_start, period_end,
			amount, currency, status) VALUES ($1, $2, false, $3, 'renewal', $4, $5, 1500, 'usd', $6)`,
			payments.NewID("subch_"), sc.MerchantID, sub, periodStart, periodStart.AddDate(0, 1, 0), status); err != nil {
			t.Fatal(err)
		}
	}
	waiting, dunning, due, renewedBefore := subscription("active"), subscription("past_due"), subscription("active"), subscription("active")
	charge(waiting, end, "pending")
	charge(dunning, end, "pending")
	charge(renewedBefore, start, "succeeded") // the charge of its current period, not the next

	migrateTo(t, db, 17)
	for id, want := range map[string]bool{waiting: true, dunning: true, due: false, renewedBefore: false} {
		var marked bool
		if err := db.Get(&marked, `SELECT renewal_charged_for IS NOT DISTINCT FROM current_period_end FROM subscriptions WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if marked != want {
			t.Errorf("subscription %s: marked %v, want %v", id, marked, want)
		}
	}
}
