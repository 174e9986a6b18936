package payments

// Subscriptions a processor bills itself (processor.Billing: Stripe
// Billing under PROCESSOR=stripe; README, "Subscriptions on Stripe"). The
// first checkout, cancel, resume, quantity changes and the portal are
// calls on the processor's subscription, made before anything is written
// here; renewals, prorations and dunning are the processor's, reported by
// its events, which the appliers below turn into the same state changes
// and events the sandbox's renewals make. The renewal sweep and dunning
// skip these subscriptions (Subscription.ProcessorID is set).

import (
	"context"
	"errors"
	"reflect"
	"time"

	"paysvc/internal/processor"
)

// Processor event types of subscriptions the processor bills.
const (
	// ProcessorSubscriptionUpdated: the processor's subscription changed
	// (Stripe's customer.subscription.created and .updated; Data:
	// Subscription, its whole state).
	ProcessorSubscriptionUpdated = "subscription.updated"
	// ProcessorSubscriptionDeleted: the processor's subscription ended
	// (customer.subscription.deleted; Data: Subscription).
	ProcessorSubscriptionDeleted = "subscription.deleted"
	// ProcessorInvoicePaid: the processor collected an invoice of a
	// subscription (a renewal, a proration; Data: Invoice).
	ProcessorInvoicePaid = "invoice.paid"
	// ProcessorInvoiceFailed: the processor could not collect an invoice
	// of a subscription (Data: Invoice); it retries on its own schedule.
	ProcessorInvoiceFailed = "invoice.payment_failed"
)

func init() {
	processorAppliers[ProcessorSubscriptionUpdated] = (*Service).applyProcessorSubscription
	processorAppliers[ProcessorSubscriptionDeleted] = (*Service).applyProcessorSubscription
	processorAppliers[ProcessorInvoicePaid] = (*Service).applyProcessorInvoice
	processorAppliers[ProcessorInvoiceFailed] = (*Service).applyProcessorInvoice
}

// ProcessorSubscription is a processor's subscription as its event reports
// it. ID alone is set by a checkout's completion (it names the processor's
// subscription the checkout created).
type ProcessorSubscription struct {
	ID                 string     `json:"id"`
	Status             string     `json:"status,omitempty"`
	Quantity           int        `json:"quantity,omitempty"` // of its only item; 0 when unknown
	Anchor             *time.Time `json:"billing_cycle_anchor,omitempty"`
	CurrentPeriodStart *time.Time `json:"current_period_start,omitempty"`
	CurrentPeriodEnd   *time.Time `json:"current_period_end,omitempty"`
	CancelAtPeriodEnd  bool       `json:"cancel_at_period_end,omitempty"`
	CanceledAt         *time.Time `json:"canceled_at,omitempty"`
	EndedAt            *time.Time `json:"ended_at,omitempty"`
	TrialEnd           *time.Time `json:"trial_end,omitempty"`
}

// ProcessorInvoice is an invoice of a processor's subscription.
type ProcessorInvoice struct {
	ID             string `json:"id"`
	SubscriptionID string `json:"subscription"` // the processor's id
	// BillingReason is Stripe's: subscription_create (the first invoice,
	// paid by the checkout, recorded by its completion),
	// subscription_cycle (a renewal), subscription_update (a proration).
	BillingReason string `json:"billing_reason,omitempty"`
	AmountPaid    int64  `json:"amount_paid,omitempty"`
	Currency      string `json:"currency,omitempty"`
	// PeriodStart and PeriodEnd are the subscription period the invoice
	// bills (its subscription line's), when it bills one.
	PeriodStart *time.Time `json:"period_start,omitempty"`
	PeriodEnd   *time.Time `json:"period_end,omitempty"`
	// NextAttempt is when the processor retries a failed invoice; nil
	// when it will not.
	NextAttempt *time.Time `json:"next_payment_attempt,omitempty"`
	CardLast4   string     `json:"card_last4,omitempty"`
	// PaymentIntentID is our pi_ id for the payment a paid invoice
	// records, chosen when the event was received (the adapter maps it to
	// the processor's payment, for refunds).
	PaymentIntentID string `json:"payment_intent,omitempty"`
}

// billing is the processor's Billing when it owns subscriptions.
func (s *Service) billing() (processor.Billing, bool) {
	b, ok := s.proc.(processor.Billing)
	return b, ok
}

// WithProcessorCallsInTx bounds the processor calls that run inside a
// database transaction at once to n (n <= 0: no bound). Cancel, resume and
// quantity changes of a subscription the processor bills call it on the
// locked row, so each holds a connection of the pool for as long as the
// processor takes to answer (STRIPE_TIMEOUT at most): without a bound, a
// slow or unreachable Stripe could take the whole pool, and every other
// request of every merchant would wait for a connection. A call beyond the
// bound fails at once, before the processor is asked, as a retryable
// processor error (502 processor_error, nothing written).
func WithProcessorCallsInTx(n int) Option {
	return func(s *Service) {
		if n > 0 {
			s.callsInTx = make(chan struct{}, n)
		}
	}
}

// errCallsInTxBusy is the cause of the processor error a call past
// WithProcessorCallsInTx's bound gets.
var errCallsInTxBusy = errors.New("every slot for processor calls inside a transaction is taken (the processor is slow to answer)")

// callInTx runs call, a processor call made inside a database transaction,
// in one of the Service's slots for those, or refuses it when none is
// free. It never waits for a slot: waiting would hold the transaction's
// connection too.
func (s *Service) callInTx(op string, call func() error) error {
	if s.callsInTx == nil {
		return call()
	}
	select {
	case s.callsInTx <- struct{}{}:
		defer func() { <-s.callsInTx }()
		return call()
	default:
		return &processor.Error{Op: op, Retryable: true, Code: "busy", Err: errCallsInTxBusy}
	}
}

// billingOf is the processor's Billing when it bills sub.
func (s *Service) billingOf(sub Subscription) (processor.Billing, bool) {
	b, ok := s.billing()
	return b, ok && sub.ProcessorID != ""
}

// processorSubscriptionCheckout hosts a subscription session's checkout at
// the processor: the price mirrored first (a product's price once, by its
// id; an inline price by the session's id), then the processor's checkout
// in subscription mode, keyed by the session's id. Nothing is written here
// before both answered.
func (s *Service) processorSubscriptionCheckout(ctx context.Context, sc Scope, b processor.Billing, cs CheckoutSession, iv Interval) (processor.HostedCheckout, error) {
	li := cs.LineItems[0]
	priceID := cs.ID
	if li.PriceID != nil {
		priceID = *li.PriceID
	}
	sp := iv.span()
	rp := processor.RecurringPrice{ID: priceID, ProductName: li.Name, Amount: li.UnitAmount, Currency: li.Currency, Months: sp.months, Days: sp.days}
	if err := b.MirrorPrice(ctx, account(sc), rp); err != nil {
		return processor.HostedCheckout{}, err
	}
	in := processor.SubscriptionCheckout{
		ID: cs.ID, PriceID: priceID, Quantity: li.Quantity, SuccessURL: cs.SuccessURL, CancelURL: cs.CancelURL, ExpiresAt: cs.ExpiresAt,
	}
	if cs.TrialPeriodDays != nil {
		in.TrialPeriodDays = int64(*cs.TrialPeriodDays)
	}
	if cs.CustomerEmail != nil {
		in.CustomerEmail = *cs.CustomerEmail
	}
	return b.CreateSubscriptionCheckout(ctx, account(sc), in)
}

// applyProcessorSubscription applies the processor's state of one of its
// subscriptions (customer.subscription.created, .updated, .deleted): status,
// period, trial, cancellation and quantity, with
// customer.subscription.updated (and .deleted when it ended) when anything
// changed. Events arrive out of order and more than once: a state older
// than the newest applied (by the processor's event time, or a period that
// ends before the current one) and anything about an ended subscription is
// recorded and changes nothing. A subscription whose checkout's
// completion is not applied yet: ErrNotYet, retried.
func (s *Service) applyProcessorSubscription(ctx context.Context, a *application) error {
	ps := a.ev.Data.Subscription
	if a.sc == nil || ps == nil || ps.ID == "" {
		return s.applyUnknownOrRefuse(ctx, a)
	}
	sc := *a.sc
	now := s.clock.Now(ctx, sc)
	return s.syncProcessor(ctx, a, sc, ps.ID, func(plan Plan, sub *Subscription) (*PaymentIntent, Effects, error) {
		if sub.Ended() || a.stale(*sub, ps.CurrentPeriodEnd) {
			return nil, a.effects(Effects{}, "", now), nil
		}
		wasEnded, before := sub.Ended(), sub.Object()
		if a.ev.Type == ProcessorSubscriptionDeleted {
			ps.Status = SubCanceled
		}
		ps.applyTo(sub, now)
		a.synced(sub)
		var eff Effects
		if !reflect.DeepEqual(before, sub.Object()) {
			eff.Events = subscriptionEvents(*sub, wasEnded, now)
		}
		return nil, a.effects(eff, "", now), nil
	})
}

// applyProcessorInvoice applies an invoice of one of the processor's
// subscriptions. Paid: a payment naming the subscription (fee and ledger
// entry as any payment's, payment_intent.succeeded), once per event,
// except the first invoice, which the checkout's completion recorded; a
// renewal's invoice moves the subscription to the period it billed,
// active. Failed: the subscription past_due until the processor's next
// attempt (dunning is the processor's; its subscription events say when it
// gives up); a failed proration invoice changes nothing. State older than
// the newest applied changes nothing; the money of a paid invoice is
// recorded all the same.
func (s *Service) applyProcessorInvoice(ctx context.Context, a *application) error {
	inv := a.ev.Data.Invoice
	if a.sc == nil || inv == nil || inv.SubscriptionID == "" {
		return s.applyUnknownOrRefuse(ctx, a)
	}
	sc := *a.sc
	now := s.clock.Now(ctx, sc)
	return s.syncProcessor(ctx, a, sc, inv.SubscriptionID, func(plan Plan, sub *Subscription) (*PaymentIntent, Effects, error) {
		wasEnded, before := sub.Ended(), sub.Object()
		var eff Effects
		var pi *PaymentIntent
		paid := a.ev.Type == ProcessorInvoicePaid
		if paid && inv.AmountPaid > 0 && inv.BillingReason != "subscription_create" {
			desc := "Subscription renewal"
			if inv.BillingReason == "subscription_update" {
				desc = "Subscription quantity change"
			}
			id := inv.PaymentIntentID
			if id == "" {
				id = NewID("pi_")
			}
			cur := inv.Currency
			if cur == "" {
				cur = sub.Currency
			}
			pi = &PaymentIntent{
				ID: id, Live: sc.Live, Amount: inv.AmountPaid, Currency: cur, CustomerID: &sub.CustomerID,
				SubscriptionID: &sub.ID, Description: &desc, Metadata: sub.Metadata, Created: now,
			}
			eff = pi.succeedWithFee(InvoiceFee(plan, inv.AmountPaid), inv.CardLast4, now)
			eff.Events = []Event{newEvent(EventPaymentSucceeded, pi.Object(), now)}
		}
		if !sub.Ended() && !a.stale(*sub, inv.PeriodEnd) {
			switch {
			case paid:
				if inv.PeriodStart != nil && inv.PeriodEnd != nil && inv.PeriodEnd.After(sub.CurrentPeriodEnd) && inv.PeriodEnd.After(*inv.PeriodStart) {
					sub.CurrentPeriodStart, sub.CurrentPeriodEnd = inv.PeriodStart.UTC(), inv.PeriodEnd.UTC()
					if sub.Status == SubTrialing {
						sub.Anchor = sub.CurrentPeriodStart
					}
				}
				if sub.Status != SubTrialing || !sub.inTrial() {
					sub.Status = SubActive
				}
				sub.NextRetryAt = nil
			case inv.BillingReason == "subscription_update":
				// A declined proration invoice leaves the subscription as it
				// is, as a declined proration charge does in the sandbox.
			case sub.Status != SubUnpaid:
				sub.Status, sub.NextRetryAt = SubPastDue, utcPtr(inv.NextAttempt)
			}
			a.synced(sub)
		}
		if !reflect.DeepEqual(before, sub.Object()) {
			eff.Events = append(eff.Events, subscriptionEvents(*sub, wasEnded, now)...)
		}
		paymentID := ""
		if pi != nil {
			paymentID = pi.ID
		}
		return pi, a.effects(eff, paymentID, now), nil
	})
}

// syncProcessor runs fn on the subscription the processor knows as
// processorID; not found (its checkout's completion not applied yet) is
// ErrNotYet.
func (s *Service) syncProcessor(ctx context.Context, a *application, sc Scope, processorID string, fn func(Plan, *Subscription) (*PaymentIntent, Effects, error)) error {
	_, err := s.store.SyncProcessorSubscription(ctx, sc, processorID, fn)
	if ErrorCode(err) == SubscriptionNotFound {
		return ErrNotYet
	}
	return err
}

// applyUnknownOrRefuse marks a stored event that names nothing applied,
// and refuses one reported inline (no scope).
func (s *Service) applyUnknownOrRefuse(ctx context.Context, a *application) error {
	if a.sc == nil {
		return Errorf(ValidationError, "processor event %s names no processor subscription", a.ev.Type)
	}
	return s.applyUnknown(ctx, a)
}

// stale reports whether the event is older than the newest one applied to
// sub, or reports a period that ends before sub's current one.
func (a *application) stale(sub Subscription, periodEnd *time.Time) bool {
	if sub.ProcessorSyncedAt != nil && a.ev.Created.Before(*sub.ProcessorSyncedAt) {
		return true
	}
	return periodEnd != nil && periodEnd.Before(sub.CurrentPeriodEnd)
}

// synced records the event's time as the newest applied to sub.
func (a *application) synced(sub *Subscription) {
	if t := a.ev.Created.UTC(); !t.IsZero() && (sub.ProcessorSyncedAt == nil || t.After(*sub.ProcessorSyncedAt)) {
		sub.ProcessorSyncedAt = &t
	}
}

// applyTo sets sub to the processor's state, keeping what the service's
// own rules need (a canceled subscription has canceled_at and ended_at; a
// trialing one's period is its trial).
func (ps ProcessorSubscription) applyTo(sub *Subscription, now time.Time) {
	if knownStatus(ps.Status) {
		sub.Status = ps.Status
	}
	if ps.CurrentPeriodStart != nil && ps.CurrentPeriodEnd != nil && ps.CurrentPeriodEnd.After(*ps.CurrentPeriodStart) {
		sub.CurrentPeriodStart, sub.CurrentPeriodEnd = ps.CurrentPeriodStart.UTC(), ps.CurrentPeriodEnd.UTC()
	}
	if ps.Anchor != nil {
		sub.Anchor = ps.Anchor.UTC()
	}
	if ps.TrialEnd != nil {
		sub.TrialEnd = utcPtr(ps.TrialEnd)
	}
	if sub.Status == SubTrialing {
		end := sub.CurrentPeriodEnd
		sub.TrialEnd = &end
	}
	sub.CancelAtPeriodEnd = ps.CancelAtPeriodEnd
	if ps.Quantity > 0 && len(sub.Items) == 1 {
		sub.Items[0].Quantity = ps.Quantity
	}
	if sub.Status != SubPastDue {
		sub.NextRetryAt = nil
	}
	if sub.Status == SubCanceled {
		end := now.UTC()
		if ps.EndedAt != nil {
			end = ps.EndedAt.UTC()
		}
		canceled := end
		if ps.CanceledAt != nil {
			canceled = ps.CanceledAt.UTC()
		}
		sub.CanceledAt, sub.EndedAt, sub.CancelAtPeriodEnd = &canceled, &end, false
	}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
