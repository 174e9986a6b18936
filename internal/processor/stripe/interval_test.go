package stripe_test

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// With Stripe as processor, an inline subscription interval longer than
// Stripe bills (3 years: 36 months) is refused invalid_interval before
// anything is written or sent; the sandbox accepts it.
func TestIntervalBeyondStripe(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	p := newProcessor(db, closedPort(t)) // never called: the refusal comes first
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(p))
	acct := connected(t, db, false)
	sc := payments.Scope{MerchantID: acct.MerchantID}
	session := func(unit string, count int) error {
		amount, cur, ok, cancel := int64(1000), "usd", "https://shop.example/ok", "https://shop.example/no"
		_, err := svc.CreateSubscriptionSession(ctx, sc, payments.SubscriptionSessionInput{
			AmountCents: &amount, Currency: &cur, Interval: &unit, IntervalCount: &count, SuccessURL: &ok, CancelURL: &cancel,
		})
		return err
	}
	for _, c := range []struct {
		unit  string
		count int
	}{{"month", 37}, {"year", 4}, {"month", 52}} {
		if err := session(c.unit, c.count); payments.ErrorCode(err) != payments.InvalidInterval {
			t.Errorf("%d %s: got %v, want invalid_interval", c.count, c.unit, err)
		}
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1`, sc.MerchantID); err != nil || n != 0 {
		t.Errorf("sessions written: got %d (%v), want 0", n, err)
	}
	// Within the limit the request goes on to Stripe (here unreachable:
	// processor_error, not invalid_interval).
	for _, c := range []struct {
		unit  string
		count int
	}{{"month", 36}, {"year", 3}, {"week", 52}} {
		if err := session(c.unit, c.count); payments.ErrorCode(err) == payments.InvalidInterval {
			t.Errorf("%d %s: got %v, want it accepted", c.count, c.unit, err)
		}
	}
}
