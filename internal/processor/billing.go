package processor

import (
	"context"
	"time"
)

// Billing is implemented by processors that own subscriptions themselves
// (Stripe Billing: Stripe keeps the subscription, bills its renewal
// invoices, prorates and runs dunning, and reports back by events). The
// sandbox does not implement it: with the sandbox the service bills its
// subscriptions itself and charges saved cards with ChargeCard. Like
// IntervalChecker, callers ask for it with a type assertion.
//
// Every mutating method takes the id of the row of ours that asked for it
// as the idempotency key, so a retry after a crash does nothing twice.
type Billing interface {
	// MirrorPrice creates the processor's product and recurring price for
	// one of our prices (a subscription product's, or a session's inline
	// price), once: asking again returns at once.
	MirrorPrice(ctx context.Context, acct Account, p RecurringPrice) error
	// CreateSubscriptionCheckout hosts the checkout of a subscription on
	// a price mirrored before.
	CreateSubscriptionCheckout(ctx context.Context, acct Account, s SubscriptionCheckout) (HostedCheckout, error)
	// CancelSubscription cancels at the period end, or now.
	CancelSubscription(ctx context.Context, acct Account, c SubscriptionCancel) error
	// ResumeSubscription clears a cancellation scheduled for the period end.
	ResumeSubscription(ctx context.Context, acct Account, key, subscriptionID string) error
	// ChangeQuantity sets an item's quantity with a proration behaviour.
	ChangeQuantity(ctx context.Context, acct Account, q QuantityChange) error
	// CreatePortalSession opens the processor's customer portal for the
	// subscription's customer and returns its URL.
	CreatePortalSession(ctx context.Context, acct Account, ps PortalSession) (string, error)
}

// RecurringPrice is one of our prices to mirror. Its period is Months or
// Days (one of them zero), as IntervalChecker counts them.
type RecurringPrice struct {
	ID          string // our price id (a product's price_, or an inline session's cs_)
	ProductName string
	Amount      int64
	Currency    string
	Months      int
	Days        int
}

// SubscriptionCheckout is a subscription's first checkout.
type SubscriptionCheckout struct {
	ID              string // our cs_ id, also the idempotency key
	PriceID         string // our price id, mirrored by MirrorPrice
	Quantity        int64
	TrialPeriodDays int64 // 0: no trial
	CustomerEmail   string
	SuccessURL      string
	CancelURL       string
	ExpiresAt       time.Time
}

// SubscriptionCancel cancels a subscription.
type SubscriptionCancel struct {
	Key            string // the row id of the change, the idempotency key
	SubscriptionID string // our sub_ id
	AtPeriodEnd    bool
}

// QuantityChange changes a subscription item's quantity.
type QuantityChange struct {
	Key               string // our change's row id (sqp_), the idempotency key
	SubscriptionID    string // our sub_ id
	ItemID            string // our si_ id; "" for the subscription's only item
	Quantity          int64
	ProrationBehavior string // create_prorations, always_invoice or none
	// ProrationDate is the instant the proration is computed at (a
	// preview's), so that the processor's amount is the previewed one.
	// Zero: now.
	ProrationDate time.Time
}

// PortalSession opens the customer portal.
type PortalSession struct {
	ID             string // our bps_ id, the idempotency key
	SubscriptionID string // our sub_ id: the portal is its customer's
	ReturnURL      string
}
