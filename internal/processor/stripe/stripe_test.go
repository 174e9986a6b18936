package stripe_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/processortest"
	"paysvc/internal/processor/stripe"
	"paysvc/internal/processor/stripe/stripemock"
	"paysvc/internal/testenv"
)

// testKeys are the platform's keys in tests. stripe-mock takes only
// test-mode secret keys, so live mode gets one too; its publishable key is
// live, as the browser would see it.
var testKeys = stripe.Config{
	Test: stripe.Keys{Secret: "sk_test_platform", Publishable: "pk_test_platform"},
	Live: stripe.Keys{Secret: "sk_test_platformlive", Publishable: "pk_live_platform"},
}

func newProcessor(db *sqlx.DB, base string) *stripe.Processor {
	c := testKeys
	c.APIBase = base
	return stripe.New(db, c)
}

// connected makes a merchant with a Stripe connected account in mode live,
// as `api merchant stripe-account` records it.
func connected(t testing.TB, db *sqlx.DB, live bool) processor.Account {
	t.Helper()
	id := payments.NewID("mch_")
	if _, err := db.Exec(`INSERT INTO merchants (id, name, email, plan) VALUES ($1, 'Stripe shop', '', 'pro')`, id); err != nil {
		t.Fatal(err)
	}
	acct := processor.Account{MerchantID: id, Live: live}
	if err := stripe.SetConnectedAccount(context.Background(), db, acct, payments.NewID("acct_")); err != nil {
		t.Fatal(err)
	}
	return acct
}

// TestContract runs the processor contract on the adapter against
// stripe-mock, which checks every request against Stripe's OpenAPI
// description (-strict-version-check: API version 2023-10-16).
func TestContract(t *testing.T) {
	db := testenv.DB(t)
	base := stripemock.Start(t)
	p := newProcessor(db, base)
	processortest.Run(t, processortest.Harness{
		New:     func(t *testing.T) processor.Processor { return p },
		Account: func(t *testing.T, live bool) processor.Account { return connected(t, db, live) },
		Unavailable: func(t *testing.T) processor.Processor {
			return newProcessor(db, closedPort(t))
		},
		NewID:     payments.NewID,
		Stateless: true,
		Paid: func(t *testing.T, acct processor.Account, id string) {
			ctx := context.Background()
			if err := p.Remember(ctx, acct, id, "pi_"+id[3:]); err != nil {
				t.Fatal(err)
			}
			if err := p.Remember(ctx, acct, stripe.DisputeKey(id), "dp_"+id[3:]); err != nil {
				t.Fatal(err)
			}
		},
	})
}
