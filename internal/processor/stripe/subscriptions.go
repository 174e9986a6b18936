package stripe

// Stripe Billing (README, "Subscriptions on Stripe"): with PROCESSOR=stripe
// Stripe owns a subscription. Our prices are mirrored as Stripe products
// and prices, the first checkout is Stripe Checkout in subscription mode,
// and cancel, resume, quantity and the portal are calls on Stripe's
// subscription; renewals, prorations and dunning are Stripe's, and come
// back as its events. Every call is on the merchant's connected account
// with an idempotency key from our row id.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

var _ processor.Billing = (*Processor)(nil)

// metaSubscription carries our sub_ id on Stripe's subscription, metaPrice
// our price id on Stripe's price.
const (
	metaSubscription = "paysvc_subscription"
	metaPrice        = "paysvc_price"
)

// Names in stripe_objects of what one of our ids maps to, beside the id
// itself (a payment's pi_ maps to Stripe's payment intent).
func priceKey(ours string) string { return "price:" + ours }

// MirrorPrice creates a Stripe product and recurring price for our price,
// and records Stripe's price id. Stripe prices are immutable and ours are
// too, so once recorded the mirror is never redone. Two idempotency keys
// from our price id: a crash between the calls, or before the record,
// gets Stripe's first product and price back on the retry.
func (p *Processor) MirrorPrice(ctx context.Context, acct processor.Account, rp processor.RecurringPrice) error {
	const op = "mirror_price"
	if known, err := p.stripeID(ctx, acct, priceKey(rp.ID)); err != nil {
		return &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	} else if known != "" {
		return nil
	}
	interval, count, ok := stripeInterval(rp.Months, rp.Days)
	if !ok {
		// payments.CheckProcessorInterval refuses these before anything
		// is written; this is the guard behind it.
		return &processor.Error{Op: op, Code: "unsupported_interval",
			Err: fmt.Errorf("no Stripe interval for %d months or %d days", rp.Months, rp.Days)}
	}
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return err
	}
	prodParams := &stripego.ProductParams{
		Name:     stripego.String(rp.ProductName),
		Metadata: map[string]string{metaPrice: rp.ID},
	}
	c.params(ctx, &prodParams.Params, "product:"+rp.ID)
	prod, err := c.api.Products.New(prodParams)
	if err != nil {
		return asError(op, err)
	}
	priceParams := &stripego.PriceParams{
		Product:    stripego.String(prod.ID),
		Currency:   stripego.String(rp.Currency),
		UnitAmount: stripego.Int64(rp.Amount),
		Recurring: &stripego.PriceRecurringParams{
			Interval:      stripego.String(interval),
			IntervalCount: stripego.Int64(count),
		},
		Metadata: map[string]string{metaPrice: rp.ID},
	}
	c.params(ctx, &priceParams.Params, "price:"+rp.ID)
	price, err := c.api.Prices.New(priceParams)
	if err != nil {
		return asError(op, err)
	}
	if err := p.remember(ctx, acct, priceKey(rp.ID), price.ID); err != nil {
		return &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	return nil
}

// stripeInterval is Stripe's interval and interval_count for a period of
// months or days, in the largest unit that divides it (12 months is a
// year, 14 days two weeks). ok is false beyond Stripe's 3 years.
func stripeInterval(months, days int) (string, int64, bool) {
	switch {
	case months <= 0 && days <= 0, months > 0 && days > 0:
		return "", 0, false
	case months > 36 || days > 3*365:
		return "", 0, false
	case months%12 == 0 && months > 0:
		return string(stripego.PriceRecurringIntervalYear), int64(months / 12), true
	case months > 0:
		return string(stripego.PriceRecurringIntervalMonth), int64(months), true
	case days%7 == 0 && days/7 <= 156:
		return string(stripego.PriceRecurringIntervalWeek), int64(days / 7), true
	}
	return string(stripego.PriceRecurringIntervalDay), int64(days), true
}

// CreateSubscriptionCheckout creates Stripe Checkout in subscription mode
// on the mirrored price: the trial, the quantity, and the platform's fee
// as application_fee_percent of every invoice (Stripe takes it on each
// renewal too). Our session id is the idempotency key and rides on the
// session and the subscription, so Stripe's events name it.
func (p *Processor) CreateSubscriptionCheckout(ctx context.Context, acct processor.Account, s processor.SubscriptionCheckout) (processor.HostedCheckout, error) {
	const op = "subscription_checkout"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.HostedCheckout{}, err
	}
	price, err := p.stripeID(ctx, acct, priceKey(s.PriceID))
	if err != nil {
		return processor.HostedCheckout{}, &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	if price == "" {
		return processor.HostedCheckout{}, &processor.Error{Op: op, Code: "unknown_price",
			Err: fmt.Errorf("price %s is not mirrored to Stripe", s.PriceID)}
	}
	ours := strings.NewReplacer("{CHECKOUT_SESSION_ID}", s.ID)
	data := &stripego.CheckoutSessionSubscriptionDataParams{
		ApplicationFeePercent: stripego.Float64(payments.FeePercent(c.plan)),
		Metadata:              map[string]string{metaSession: s.ID},
	}
	if s.TrialPeriodDays > 0 {
		data.TrialPeriodDays = stripego.Int64(s.TrialPeriodDays)
	}
	quantity := s.Quantity
	if quantity < 1 {
		quantity = 1
	}
	params := &stripego.CheckoutSessionParams{
		Mode:              stripego.String(string(stripego.CheckoutSessionModeSubscription)),
		SuccessURL:        stripego.String(ours.Replace(s.SuccessURL)),
		CancelURL:         stripego.String(ours.Replace(s.CancelURL)),
		ClientReferenceID: stripego.String(s.ID),
		Metadata:          map[string]string{metaSession: s.ID},
		LineItems:         []*stripego.CheckoutSessionLineItemParams{{Price: stripego.String(price), Quantity: stripego.Int64(quantity)}},
		SubscriptionData:  data,
	}
	if s.CustomerEmail != "" {
		params.CustomerEmail = stripego.String(s.CustomerEmail)
	}
	if ttl := time.Until(s.ExpiresAt); ttl >= minCheckoutTTL && ttl <= maxCheckoutTTL {
		params.ExpiresAt = stripego.Int64(s.ExpiresAt.Unix())
	}
	c.params(ctx, &params.Params, s.ID)
	out, err := c.api.CheckoutSessions.New(params)
	if err != nil {
		return processor.HostedCheckout{}, asError(op, err)
	}
	return processor.HostedCheckout{URL: out.URL}, nil
}

// subscription is Stripe's id of our subscription, recorded when its
// checkout completed; a permanent error when there is none.
func (p *Processor) subscription(ctx context.Context, op string, acct processor.Account, ours string) (string, error) {
	id, err := p.stripeID(ctx, acct, ours)
	if err == nil && id == "" {
		// Recorded on the subscription when its checkout's completion was
		// applied (payments.Subscription.ProcessorID).
		const q = `SELECT coalesce(processor_subscription_id, '') FROM subscriptions WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if err = p.db.GetContext(ctx, &id, q, acct.MerchantID, acct.Live, ours); errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	}
	if err != nil {
		return "", &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	if id == "" {
		return "", &processor.Error{Op: op, Code: "unknown_subscription",
			Err: fmt.Errorf("no Stripe subscription recorded for %s", ours)}
	}
	return id, nil
}

// CancelSubscription cancels on Stripe: at the period end by setting
// cancel_at_period_end (Stripe ends it then and sends
// customer.subscription.deleted), or now. Canceling now does not prorate:
// our cancel refunds nothing either.
func (p *Processor) CancelSubscription(ctx context.Context, acct processor.Account, sc processor.SubscriptionCancel) error {
	const op = "cancel_subscription"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return err
	}
	id, err := p.subscription(ctx, op, acct, sc.SubscriptionID)
	if err != nil {
		return err
	}
	if sc.AtPeriodEnd {
		return p.setCancelAtPeriodEnd(ctx, c, op, id, sc.Key, true)
	}
	params := &stripego.SubscriptionCancelParams{Prorate: stripego.Bool(false)}
	c.params(ctx, &params.Params, sc.Key)
	if _, err := c.api.Subscriptions.Cancel(id, params); err != nil {
		return asError(op, err)
	}
	return nil
}

// ResumeSubscription clears cancel_at_period_end. Stripe cannot resume a
// subscription that has ended; the service refuses that before calling.
func (p *Processor) ResumeSubscription(ctx context.Context, acct processor.Account, key, subscriptionID string) error {
	const op = "resume_subscription"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return err
	}
	id, err := p.subscription(ctx, op, acct, subscriptionID)
	if err != nil {
		return err
	}
	return p.setCancelAtPeriodEnd(ctx, c, op, id, key, false)
}

func (p *Processor) setCancelAtPeriodEnd(ctx context.Context, c call, op, id, key string, v bool) error {
	params := &stripego.SubscriptionParams{CancelAtPeriodEnd: stripego.Bool(v)}
	c.params(ctx, &params.Params, key)
	if _, err := c.api.Subscriptions.Update(id, params); err != nil {
		return asError(op, err)
	}
	return nil
}

// Proration behaviours, ours and Stripe's by the same names.
var prorationBehaviors = map[string]bool{
	string(stripego.SubscriptionSchedulePhaseProrationBehaviorCreateProrations): true,
	string(stripego.SubscriptionSchedulePhaseProrationBehaviorAlwaysInvoice):    true,
	string(stripego.SubscriptionSchedulePhaseProrationBehaviorNone):             true,
}

// ChangeQuantity updates the subscription item's quantity on Stripe with
// the proration behaviour, at the preview's proration_date when there is
// one, so Stripe prorates at the instant the merchant was quoted.
// The item is ours mapped to Stripe's, or the subscription's only item.
func (p *Processor) ChangeQuantity(ctx context.Context, acct processor.Account, q processor.QuantityChange) error {
	const op = "change_quantity"
	if !prorationBehaviors[q.ProrationBehavior] {
		return &processor.Error{Op: op, Code: "invalid_proration_behavior",
			Err: fmt.Errorf("proration behavior %q", q.ProrationBehavior)}
	}
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return err
	}
	id, err := p.subscription(ctx, op, acct, q.SubscriptionID)
	if err != nil {
		return err
	}
	item, err := p.stripeID(ctx, acct, q.ItemID)
	if err != nil {
		return &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	if item == "" {
		// Ours are single-item subscriptions: read Stripe's item.
		get := &stripego.SubscriptionParams{}
		c.params(ctx, &get.Params, "")
		sub, err := c.api.Subscriptions.Get(id, get)
		if err != nil {
			return asError(op, err)
		}
		if sub.Items == nil || len(sub.Items.Data) != 1 {
			return &processor.Error{Op: op, Code: "unknown_item",
				Err: fmt.Errorf("the Stripe subscription of %s has no single item", q.SubscriptionID)}
		}
		item = sub.Items.Data[0].ID
	}
	params := &stripego.SubscriptionParams{
		Items:             []*stripego.SubscriptionItemsParams{{ID: stripego.String(item), Quantity: stripego.Int64(q.Quantity)}},
		ProrationBehavior: stripego.String(q.ProrationBehavior),
	}
	if !q.ProrationDate.IsZero() && q.ProrationBehavior != string(stripego.SubscriptionSchedulePhaseProrationBehaviorNone) {
		params.ProrationDate = stripego.Int64(q.ProrationDate.Unix())
	}
	c.params(ctx, &params.Params, q.Key)
	if _, err := c.api.Subscriptions.Update(id, params); err != nil {
		return asError(op, err)
	}
	return nil
}

// CreatePortalSession opens Stripe's billing portal for the subscription's
// customer (read from Stripe's subscription), returning to return_url.
// Stripe's portal shows all of the customer's subscriptions on that
// connected account, not only this one (README).
func (p *Processor) CreatePortalSession(ctx context.Context, acct processor.Account, ps processor.PortalSession) (string, error) {
	const op = "portal_session"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return "", err
	}
	id, err := p.subscription(ctx, op, acct, ps.SubscriptionID)
	if err != nil {
		return "", err
	}
	get := &stripego.SubscriptionParams{}
	c.params(ctx, &get.Params, "")
	sub, err := c.api.Subscriptions.Get(id, get)
	if err != nil {
		return "", asError(op, err)
	}
	if sub.Customer == nil || sub.Customer.ID == "" {
		return "", &processor.Error{Op: op, Code: "unknown_customer", Err: fmt.Errorf("the Stripe subscription of %s has no customer", ps.SubscriptionID)}
	}
	params := &stripego.BillingPortalSessionParams{
		Customer:  stripego.String(sub.Customer.ID),
		ReturnURL: stripego.String(ps.ReturnURL),
	}
	c.params(ctx, &params.Params, ps.ID)
	out, err := c.api.BillingPortalSessions.New(params)
	if err != nil {
		return "", asError(op, err)
	}
	return out.URL, nil
}
