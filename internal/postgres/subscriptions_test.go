package postgres_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestSubscriptionRecords: a subscription is stored and read back whole
// (items included), only in its own scope; UpdateSubscription saves what
// its function changed with its events; the list filters by status and
// customer and pages through the filtered rows only.
func TestSubscriptionRecords(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	store := postgres.New(db)
	ctx := context.Background()
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: "Subs", Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	cus := payments.Customer{ID: payments.NewID("cus_"), Created: time.Now()}
	if err := store.CreateCustomer(ctx, sc, cus); err != nil {
		t.Fatal(err)
	}
	iv, _ := payments.UnitInterval(payments.Month, nil)
	start := time.Date(2026, 1, 31, 10, 0, 0, 0, time.UTC)
	mk := func(status string, created time.Time) payments.Subscription {
		card := "card_x"
		sub := payments.Subscription{
			ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: status, Currency: "usd", Anchor: start,
			CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1), Metadata: map[string]string{"k": "v"},
			Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Plan", Quantity: 2,
				Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
			CardID: &card, Created: created.Truncate(time.Microsecond),
		}
		if status == payments.SubTrialing {
			end := sub.CurrentPeriodEnd
			sub.TrialEnd = &end
		}
		if err := store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	t0 := time.Now()
	a := mk(payments.SubActive, t0)
	b := mk(payments.SubTrialing, t0.Add(time.Second))
	c := mk(payments.SubActive, t0.Add(2*time.Second))

	got, err := store.Subscription(ctx, sc, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Object(), got.Object()) || *got.CardID != *a.CardID || !got.Anchor.Equal(a.Anchor) || got.Currency != "usd" {
		t.Errorf("read back:\ngot  %+v\nwant %+v", got, a)
	}
	for _, other := range []payments.Scope{{MerchantID: m.ID, Live: true}, {MerchantID: "mch_other"}} {
		if _, err := store.Subscription(ctx, other, a.ID); payments.ErrorCode(err) != payments.SubscriptionNotFound {
			t.Errorf("scope %+v: got %v, want subscription_not_found", other, err)
		}
	}

	upd, err := store.UpdateSubscription(ctx, sc, a.ID, func(s *payments.Subscription) (payments.Effects, error) {
		s.Items[0].Quantity = 5
		s.CancelAtPeriodEnd = true
		return payments.Effects{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Subscription(ctx, sc, a.ID); got.Items[0].Quantity != 5 || !got.CancelAtPeriodEnd || upd.Items[0].Quantity != 5 {
		t.Errorf("after update: got quantity %d, cancel_at_period_end %v; want 5, true", got.Items[0].Quantity, got.CancelAtPeriodEnd)
	}

	ids := func(p payments.Page[payments.Subscription]) []string {
		var out []string
		for _, s := range p.Data {
			out = append(out, s.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    payments.SubscriptionFilter
		want []string
	}{
		{"active", payments.SubscriptionFilter{Status: payments.SubActive}, []string{c.ID, a.ID}},
		{"all", payments.SubscriptionFilter{}, []string{c.ID, b.ID, a.ID}},
		{"trialing", payments.SubscriptionFilter{Status: payments.SubTrialing}, []string{b.ID}},
		{"customer", payments.SubscriptionFilter{CustomerID: cus.ID, Status: payments.SubPastDue}, nil},
		{"after c, active", payments.SubscriptionFilter{Status: payments.SubActive, ListParams: payments.ListParams{StartingAfter: c.ID}}, []string{a.ID}},
	} {
		if tc.f.Limit == 0 {
			tc.f.Limit = 10
		}
		p, err := store.Subscriptions(ctx, sc, tc.f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := ids(p); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// b is trialing: not a known id of the active list.
	_, err = store.Subscriptions(ctx, sc, payments.SubscriptionFilter{Status: payments.SubActive, ListParams: payments.ListParams{Limit: 10, StartingAfter: b.ID}})
	if payments.ErrorCode(err) != payments.ValidationError {
		t.Errorf("cursor outside the filter: got %v, want validation_error", err)
	}
}
