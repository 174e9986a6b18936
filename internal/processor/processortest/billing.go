package processortest

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"paysvc/internal/processor"
)

// BillingHarness drives RunBilling: Harness, plus a way to make one of our
// subscription ids known to the processor as its own events would (for
// Stripe: the id map its checkout.session.completed fills).
type BillingHarness struct {
	Harness
	Subscribed func(t *testing.T, acct processor.Account, subscriptionID string)
}

// RunBilling is the contract of processor.Billing, for processors that own
// subscriptions; it is skipped for one that does not (the sandbox, with
// which the service bills subscriptions itself).
func RunBilling(t *testing.T, h BillingHarness) {
	ctx := context.Background()
	b, ok := h.New(t).(processor.Billing)
	if !ok {
		t.Skip("this processor does not own subscriptions")
	}
	permanent := func(t *testing.T, what string, err error) {
		t.Helper()
		var pe *processor.Error
		if !errors.As(err, &pe) || pe.Retryable || pe.Code == "" {
			t.Errorf("%s: got %v, want a permanent *processor.Error with a code", what, err)
		}
	}
	absolute := func(t *testing.T, what, u string) {
		t.Helper()
		if p, err := url.Parse(u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			t.Errorf("%s: got %q, want an absolute http(s) URL", what, u)
		}
	}

	t.Run("checkout on a mirrored price", func(t *testing.T) {
		acct := h.Account(t, false)
		cs := processor.SubscriptionCheckout{ID: h.NewID("cs_"), PriceID: h.NewID("price_"), Quantity: 2, TrialPeriodDays: 7,
			SuccessURL: "https://shop.example/ok", CancelURL: "https://shop.example/no", ExpiresAt: time.Now().Add(time.Hour)}
		_, err := b.CreateSubscriptionCheckout(ctx, acct, cs)
		permanent(t, "checkout on a price never mirrored", err)
		rp := processor.RecurringPrice{ID: cs.PriceID, ProductName: "Seats", Amount: 900, Currency: "usd", Months: 1}
		for i := 0; i < 2; i++ { // mirroring is idempotent
			if err := b.MirrorPrice(ctx, acct, rp); err != nil {
				t.Fatalf("mirror %d: %v", i+1, err)
			}
		}
		hc, err := b.CreateSubscriptionCheckout(ctx, acct, cs)
		if err != nil {
			t.Fatalf("checkout: %v", err)
		}
		absolute(t, "checkout URL", hc.URL)
	})

	t.Run("management", func(t *testing.T) {
		acct := h.Account(t, false)
		unknown := h.NewID("sub_")
		permanent(t, "cancel unknown", b.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: h.NewID("k_"), SubscriptionID: unknown, AtPeriodEnd: true}))
		permanent(t, "resume unknown", b.ResumeSubscription(ctx, acct, h.NewID("k_"), unknown))
		permanent(t, "quantity unknown", b.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: h.NewID("sqp_"), SubscriptionID: unknown, Quantity: 2, ProrationBehavior: "none"}))
		_, err := b.CreatePortalSession(ctx, acct, processor.PortalSession{ID: h.NewID("bps_"), SubscriptionID: unknown, ReturnURL: "https://shop.example/"})
		permanent(t, "portal unknown", err)

		sub := h.NewID("sub_")
		h.Subscribed(t, acct, sub)
		if err := b.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: h.NewID("k_"), SubscriptionID: sub, AtPeriodEnd: true}); err != nil {
			t.Errorf("cancel at period end: %v", err)
		}
		if err := b.ResumeSubscription(ctx, acct, h.NewID("k_"), sub); err != nil {
			t.Errorf("resume: %v", err)
		}
		for _, pb := range []string{"create_prorations", "always_invoice", "none"} {
			if err := b.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: h.NewID("sqp_"), SubscriptionID: sub, Quantity: 3, ProrationBehavior: pb}); err != nil {
				t.Errorf("quantity %s: %v", pb, err)
			}
		}
		permanent(t, "quantity with an unknown behavior", b.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: h.NewID("sqp_"), SubscriptionID: sub, Quantity: 3, ProrationBehavior: "later"}))
		u, err := b.CreatePortalSession(ctx, acct, processor.PortalSession{ID: h.NewID("bps_"), SubscriptionID: sub, ReturnURL: "https://shop.example/"})
		if err != nil {
			t.Errorf("portal: %v", err)
		}
		absolute(t, "portal URL", u)
		if err := b.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: h.NewID("k_"), SubscriptionID: sub}); err != nil {
			t.Errorf("cancel now: %v", err)
		}
	})

	t.Run("backend gone is retryable", func(t *testing.T) {
		if h.Unavailable == nil {
			t.Skip("no way to make this processor unavailable")
		}
		down, _ := h.Unavailable(t).(processor.Billing)
		acct := h.Account(t, false)
		sub := h.NewID("sub_")
		h.Subscribed(t, acct, sub)
		err := down.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: h.NewID("sqp_"), SubscriptionID: sub, Quantity: 2, ProrationBehavior: "always_invoice"})
		var pe *processor.Error
		if !errors.As(err, &pe) || !pe.Retryable {
			t.Errorf("quantity with the backend gone: got %v, want a retryable *processor.Error", err)
		}
	})
}
