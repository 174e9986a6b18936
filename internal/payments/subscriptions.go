package payments

import (
	"time"
)

// The statuses of a subscription (Stripe's vocabulary, listed by the spec).
const (
	SubActive            = "active"
	SubTrialing          = "trialing"
	SubPastDue           = "past_due"
	SubUnpaid            = "unpaid"
	SubCanceled          = "canceled"
	SubIncomplete        = "incomplete"
	SubIncompleteExpired = "incomplete_expired"
	SubPaused            = "paused"
)

// Subscription bills its items every period of their interval. Periods are
// derived from Anchor (period n ends at PeriodEnd(Anchor, interval, n)), not
// chained from the previous end; a trial's end becomes the anchor.
// PendingProration is the sum of the proration items not yet billed (a
// negative sum is a credit); the next renewal charges it with the period.
type Subscription struct {
	ID                 string
	CustomerID         string
	Status             string
	Items              []SubscriptionItem
	Anchor             time.Time
	CurrentPeriodStart time.Time
	CurrentPeriodEnd   time.Time
	CancelAtPeriodEnd  bool
	CanceledAt         *time.Time
	EndedAt            *time.Time
	TrialEnd           *time.Time
	PendingProration   int64
	Metadata           map[string]string
	Live               bool
	Created            time.Time
	// Currency is its items' (one per subscription), PassFees whether every
	// charge is grossed up by the fee as its session's was.
	Currency string
	PassFees bool
	// CardID is the processor's reference of the saved card its charges use
	// (card_… in the sandbox); SessionID the checkout session it came from.
	CardID    *string
	SessionID *string
	// NextRetryAt is when a past_due subscription's open charge is retried
	// (dunning); nil otherwise.
	NextRetryAt *time.Time
	// ProcessorID is the processor's id of a subscription the processor
	// bills itself (Stripe Billing: Stripe's sub_…); "" when this service
	// bills it (the sandbox). The renewal sweep and dunning skip the
	// processor's; its events move them (subscription_billing.go).
	ProcessorID string
	// ProcessorSyncedAt is when the processor created the newest event
	// about it that was applied: an older one arriving late is stale.
	ProcessorSyncedAt *time.Time
	// NextPeriodCharged: the renewal charge of the period after the current
	// one is written (its amount fixed), and the period has not moved yet
	// (the charge is being made, or declined and in dunning). Read only:
	// the store derives it from the charges.
	NextPeriodCharged bool
}

// SubscriptionItem is one price of a subscription and its quantity.
type SubscriptionItem struct {
	ID       string
	Name     string // the product's name, shown on hosted pages
	Price    RecurringPrice
	Quantity int
}

// RecurringPrice is a price billed every Interval: the price of a
// subscription product, or one made inline by a subscription session.
type RecurringPrice struct {
	ID        string
	ProductID string
	Amount    int64
	Currency  string
	Interval  Interval
}

// Ended reports whether the subscription is over: nothing changes it any more.
func (s Subscription) Ended() bool {
	return s.Status == SubCanceled || s.Status == SubIncompleteExpired
}

// Interval is the billing interval of the subscription, its first item's
// (every item of a subscription shares one interval).
func (s Subscription) Interval() Interval {
	if len(s.Items) == 0 {
		return Interval{}
	}
	return s.Items[0].Price.Interval
}

// Quantity is the quantity of a one-item subscription; with several items,
// the sum of their quantities.
func (s Subscription) Quantity() int {
	n := 0
	for _, it := range s.Items {
		n += it.Quantity
	}
	return n
}

// PeriodAmount is what one period of the items costs at their quantities.
func (s Subscription) PeriodAmount() int64 {
	var sum int64
	for _, it := range s.Items {
		sum += it.Price.Amount * int64(it.Quantity)
	}
	return sum
}

// NextChargeAmount is what the next renewal charges: one period at the
// current quantities plus the pending prorations, never below zero (a
// larger credit carries over; see Renewed).
func (s Subscription) NextChargeAmount() int64 {
	return max(0, s.PeriodAmount()+s.PendingProration)
}

func (s Subscription) itemIndex(id string) int {
	for i, it := range s.Items {
		if it.ID == id {
			return i
		}
	}
	return -1
}

// item is the item named id, or the only item when id is "".
func (s Subscription) item(id string) (SubscriptionItem, error) {
	if id == "" {
		if len(s.Items) != 1 {
			return SubscriptionItem{}, Invalid("item_id", "is required: the subscription has %d items", len(s.Items))
		}
		return s.Items[0], nil
	}
	if i := s.itemIndex(id); i >= 0 {
		return s.Items[i], nil
	}
	return SubscriptionItem{}, Invalid("item_id", "is not an item of this subscription: '%s'", id)
}

func notAllowed(format string, args ...any) error {
	return Errorf(ValidationError, format, args...)
}

// canChangeQuantity: every status but the ended ones and incomplete (whose
// first payment never succeeded, so there is no period to prorate).
func (s Subscription) canChangeQuantity() error {
	switch {
	case s.Ended():
		return notAllowed("The subscription has ended (%s); its quantity can no longer change.", s.Status)
	case s.Status == SubIncomplete:
		return notAllowed("The subscription is incomplete: its first payment has not succeeded.")
	}
	return nil
}

// Cancel ends the subscription now, or schedules its end for the end of the
// current period (atPeriodEnd; for a trialing subscription, the trial's end).
// Canceling now sets canceled_at and ended_at to now and clears a scheduled
// cancellation; pending prorations are never billed. Scheduling leaves
// canceled_at null until the period ends (EndIfDue sets both then).
// Scheduling twice changes nothing and reports changed false, so no event
// is recorded. An incomplete subscription can only be canceled now. A
// subscription this service bills whose period has ended already (past_due
// or unpaid: its period moves only when the next one is paid) has no period
// end left to wait for, so at period end means now: else no sweep would
// ever end it (the sweep renews active and trialing ones only).
// Codes: validation_error (already ended).
func (s *Subscription) Cancel(atPeriodEnd bool, now time.Time) (changed bool, err error) {
	if s.Ended() {
		return false, notAllowed("The subscription has already ended (%s).", s.Status)
	}
	if atPeriodEnd && s.PeriodOver(now) {
		atPeriodEnd = false
	}
	if !atPeriodEnd {
		t := now.UTC()
		s.Status, s.CancelAtPeriodEnd, s.CanceledAt, s.EndedAt = SubCanceled, false, &t, &t
		return true, nil
	}
	if s.Status == SubIncomplete {
		return false, notAllowed("An incomplete subscription has no period to end: cancel it now (at_period_end false).")
	}
	if s.CancelAtPeriodEnd {
		return false, nil
	}
	s.CancelAtPeriodEnd = true
	return true, nil
}

// PeriodOver reports whether the current period of a subscription this
// service bills has ended at now without the next one paid (past_due,
// unpaid, or a renewal under way): a cancellation at period end then takes
// effect at once (Cancel).
func (s Subscription) PeriodOver(now time.Time) bool {
	return s.ProcessorID == "" && !now.Before(s.CurrentPeriodEnd)
}

// Resume clears a scheduled cancellation of a subscription that has not
// ended: not canceled, and its period not over at now (a period end that
// came due is the cancellation taking effect, even before the worker has
// recorded it). Codes: validation_error (nothing scheduled, or ended).
func (s *Subscription) Resume(now time.Time) error {
	switch {
	case s.Ended():
		return notAllowed("The subscription has ended (%s) and cannot be resumed.", s.Status)
	case !s.CancelAtPeriodEnd:
		return notAllowed("The subscription has no scheduled cancellation to resume.")
	case !now.Before(s.CurrentPeriodEnd):
		return notAllowed("The subscription's period has ended, and with it the subscription.")
	}
	s.CancelAtPeriodEnd = false
	return nil
}

// EndIfDue makes a scheduled cancellation take effect once the period is
// over at now: canceled, with canceled_at and ended_at at the period's end.
// It reports whether it ended the subscription.
func (s *Subscription) EndIfDue(now time.Time) bool {
	if s.Ended() || !s.CancelAtPeriodEnd || now.Before(s.CurrentPeriodEnd) {
		return false
	}
	end := s.CurrentPeriodEnd.UTC()
	s.Status, s.CancelAtPeriodEnd, s.CanceledAt, s.EndedAt = SubCanceled, false, &end, &end
	return true
}

// BillRenewal fixes the amount of the renewal charge of the period that
// follows the current one: one period at the current quantities plus the
// pending prorations, which it bills (a credit larger than the period
// carries over as the new pending amount). It is called when the renewal's
// charge row is written, under the subscription's lock, so the amount
// charged (on every dunning attempt) is the amount billed, whatever
// quantity changes come while the charge is open.
func (s *Subscription) BillRenewal() int64 {
	amount := s.NextChargeAmount()
	s.PendingProration = min(0, s.PeriodAmount()+s.PendingProration)
	return amount
}

// NextPeriod is the period a renewal of the current one bills: from the
// trial's end when trialing (the trial's end re-anchors the cycle), else
// period n+1 of the anchor.
func (s Subscription) NextPeriod() Period {
	iv := s.Interval()
	if s.inTrial() {
		start := s.TrialEnd.UTC()
		return Period{Start: start, End: PeriodEnd(start, iv, 1)}
	}
	return PeriodAt(s.Anchor, iv, s.CurrentPeriodEnd)
}

// Renewed moves a subscription whose period (or trial) ended to the next
// period after that period's charge succeeded: active. A trial's end
// re-anchors the cycle: the first paid period starts at the trial's end.
// Otherwise period n+1 follows from the anchor. The charge's amount was
// fixed, and the pending prorations billed, by BillRenewal.
func (s *Subscription) Renewed() {
	iv := s.Interval()
	if s.inTrial() {
		s.Anchor = s.TrialEnd.UTC()
		s.CurrentPeriodStart, s.CurrentPeriodEnd = s.Anchor, PeriodEnd(s.Anchor, iv, 1)
	} else {
		next := PeriodAt(s.Anchor, iv, s.CurrentPeriodEnd)
		s.CurrentPeriodStart, s.CurrentPeriodEnd = next.Start, next.End
	}
	s.Status, s.NextRetryAt = SubActive, nil
}

// inTrial reports whether the current period is the trial: trialing, or
// past_due after the charge at the trial's end was declined. Its renewal
// starts at the trial's end, which becomes the anchor.
func (s Subscription) inTrial() bool {
	return s.TrialEnd != nil && s.CurrentPeriodEnd.Equal(*s.TrialEnd)
}

// RenewalFailed marks a subscription whose renewal charge was declined
// past_due (dunning begins); exhausted marks it unpaid after the last retry.
func (s *Subscription) RenewalFailed(exhausted bool) {
	if s.Ended() {
		return
	}
	s.Status = SubPastDue
	if exhausted {
		s.Status = SubUnpaid
	}
}

// SubscriptionItemObject is an item as the API returns it.
type SubscriptionItemObject struct {
	ID       string               `json:"id"`
	Object   string               `json:"object"`
	Price    RecurringPriceObject `json:"price"`
	Quantity int                  `json:"quantity"`
}

// RecurringPriceObject is a recurring price as the API returns it. Interval
// is the name the price was made with (a product's "bi-monthly", or the
// inline form's "month"), and IntervalCount how many of it make one period
// (1 for a product's named interval), so a period is always interval ×
// interval_count.
type RecurringPriceObject struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	Interval      string `json:"interval"`
	IntervalCount int    `json:"interval_count"`
}

// Object returns the price's API shape.
func (p RecurringPrice) Object() RecurringPriceObject {
	return RecurringPriceObject{ID: p.ID, Object: "price", Amount: p.Amount, Currency: p.Currency,
		Interval: p.Interval.Name, IntervalCount: p.Interval.Count}
}

// SubscriptionObject is a subscription as the API returns it (decisions.md §2).
type SubscriptionObject struct {
	ID                 string                   `json:"id"`
	Object             string                   `json:"object"`
	Status             string                   `json:"status"`
	Customer           string                   `json:"customer"`
	Quantity           int                      `json:"quantity"`
	Items              []SubscriptionItemObject `json:"items"`
	CurrentPeriodStart int64                    `json:"current_period_start"`
	CurrentPeriodEnd   int64                    `json:"current_period_end"`
	CancelAtPeriodEnd  bool                     `json:"cancel_at_period_end"`
	CanceledAt         *int64                   `json:"canceled_at"`
	EndedAt            *int64                   `json:"ended_at"`
	TrialEnd           *int64                   `json:"trial_end"`
	PendingProration   int64                    `json:"pending_proration_amount"`
	Metadata           map[string]string        `json:"metadata"`
	Created            int64                    `json:"created"`
	Livemode           bool                     `json:"livemode"`
}

// Object returns the subscription's API shape.
func (s Subscription) Object() SubscriptionObject {
	o := SubscriptionObject{
		ID: s.ID, Object: "subscription", Status: s.Status, Customer: s.CustomerID, Quantity: s.Quantity(),
		Items: make([]SubscriptionItemObject, 0, len(s.Items)), CurrentPeriodStart: s.CurrentPeriodStart.Unix(),
		CurrentPeriodEnd: s.CurrentPeriodEnd.Unix(), CancelAtPeriodEnd: s.CancelAtPeriodEnd,
		CanceledAt: unixPtr(s.CanceledAt), EndedAt: unixPtr(s.EndedAt), TrialEnd: unixPtr(s.TrialEnd),
		PendingProration: s.PendingProration, Metadata: nonNilMap(s.Metadata), Created: s.Created.Unix(), Livemode: s.Live,
	}
	for _, it := range s.Items {
		o.Items = append(o.Items, SubscriptionItemObject{ID: it.ID, Object: "subscription_item", Price: it.Price.Object(), Quantity: it.Quantity})
	}
	return o
}

func unixPtr(t *time.Time) *int64 {
	if t == nil {
		return nil
	}
	u := t.Unix()
	return &u
}
