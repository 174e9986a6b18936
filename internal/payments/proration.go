package payments

import (
	"math/bits"
	"time"
)

// ProrationBehavior is how a quantity change is billed, as in Stripe's API.
type ProrationBehavior string

// The proration behaviours of the quantity change.
const (
	// CreateProrations records the credit for the unused time and the
	// charge for the remaining time as pending items that the next renewal
	// charges with the period. Stripe's default, and ours.
	CreateProrations ProrationBehavior = "create_prorations"
	// AlwaysInvoice bills the proration at once, together with any pending
	// items: a positive total is charged now; a negative one (fewer seats)
	// is a credit that stays pending and lowers the next renewal, as
	// Stripe's customer credit balance does. Nothing is refunded.
	AlwaysInvoice ProrationBehavior = "always_invoice"
	// ProrationNone changes the quantity only: the next renewal charges
	// the new quantity for the whole next period, and nothing else.
	ProrationNone ProrationBehavior = "none"
)

// ParseProrationBehavior reads proration_behavior; nil means
// create_prorations. Codes: validation_error.
func ParseProrationBehavior(s *string) (ProrationBehavior, error) {
	if s == nil {
		return CreateProrations, nil
	}
	switch b := ProrationBehavior(*s); b {
	case CreateProrations, AlwaysInvoice, ProrationNone:
		return b, nil
	}
	return "", Invalid("proration_behavior", "must be one of create_prorations, always_invoice, none")
}

// ProrationLine is one line of a proration: the credit (negative Amount)
// for the unused time of the old quantity, or the charge for the remaining
// time of the new one, both over [From, To).
type ProrationLine struct {
	Description string    `json:"description"`
	Quantity    int       `json:"quantity"`
	UnitAmount  int64     `json:"unit_amount"`
	Amount      int64     `json:"amount"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
}

// ProrationLines prices a quantity change from oldQty to newQty of a price of
// unitAmount at time at within the period [p.Start, p.End), to the second as
// Stripe does: with r = p.End − at and d = p.End − p.Start in whole seconds,
//
//	credit = −round(unitAmount × oldQty × r / d)
//	charge = +round(unitAmount × newQty × r / d)
//
// Each line is rounded on its own to the nearest minor unit, halves away
// from zero (Stripe rounds each proration line), so the sum can differ by
// one unit from prorating the difference. A change at the period's start
// credits and charges whole periods; an unchanged quantity, or a time
// outside the period, gives no lines.
func ProrationLines(unitAmount int64, oldQty, newQty int, p Period, at time.Time) []ProrationLine {
	start, end, t := p.Start.Unix(), p.End.Unix(), at.Unix()
	if oldQty == newQty || end <= start || t < start || t >= end {
		return nil
	}
	from := time.Unix(t, 0).UTC()
	to := p.End.UTC()
	return []ProrationLine{
		{
			Description: "Unused time after " + from.Format(time.RFC3339),
			Quantity:    oldQty, UnitAmount: unitAmount, From: from, To: to,
			Amount: -prorate(unitAmount*int64(oldQty), end-t, end-start),
		},
		{
			Description: "Remaining time after " + from.Format(time.RFC3339),
			Quantity:    newQty, UnitAmount: unitAmount, From: from, To: to,
			Amount: prorate(unitAmount*int64(newQty), end-t, end-start),
		},
	}
}

// prorate returns amount × num / den rounded to the nearest integer, halves
// away from zero, for 0 ≤ num ≤ den and amount ≥ 0. The product is taken in
// 128 bits: a 52-year period in seconds times the largest amount (99999999
// × 1000 seats) overflows int64.
func prorate(amount, num, den int64) int64 {
	if amount <= 0 || num <= 0 || den <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(amount), uint64(num))
	q, r := bits.Div64(hi, lo, uint64(den)) // q ≤ amount since num ≤ den: no overflow
	if r >= uint64(den)-r {
		q++
	}
	return int64(q)
}

// QuantityChange is what changing an item's quantity does, computed before
// anything changes: the preview a merchant asks for, and the exact value the
// change then applies. It is a plain value (it can be stored or sent and
// read back): ApplyQuantityChange applies its amounts as they are, or
// refuses when the subscription is no longer in the state it was computed
// from, so a preview's amount is binding, never recomputed. A change made
// later with the preview's ProrationDate computes the same value (the
// computation is a pure function of the subscription and the date), which
// is how Stripe's proration_date makes a preview and its update agree.
type QuantityChange struct {
	SubscriptionID string            `json:"subscription"`
	ItemID         string            `json:"item_id"`
	OldQuantity    int               `json:"old_quantity"`
	NewQuantity    int               `json:"new_quantity"`
	Behavior       ProrationBehavior `json:"proration_behavior"`
	ProrationDate  time.Time         `json:"proration_date"`
	// PeriodStart and PeriodEnd are the period prorated over
	// (Subscription.ProrationPeriod).
	PeriodStart time.Time       `json:"period_start"`
	PeriodEnd   time.Time       `json:"period_end"`
	Currency    string          `json:"currency"`
	Lines       []ProrationLine `json:"lines"`
	// Proration is the sum of Lines (negative: a net credit).
	Proration int64 `json:"proration"`
	// PendingBefore and PendingAfter are the subscription's pending
	// proration amount before and after the change.
	PendingBefore int64 `json:"pending_before"`
	PendingAfter  int64 `json:"pending_after"`
	// AmountDue is what is charged now: with always_invoice the pending
	// items and the proration when their sum is positive; else 0.
	AmountDue int64 `json:"amount_due"`
}

// QuantityRequest is a quantity change as asked: ItemID "" means the only
// item; Behavior "" means create_prorations; a nil ProrationDate means now.
type QuantityRequest struct {
	ItemID        string
	Quantity      int
	Behavior      ProrationBehavior
	ProrationDate *time.Time
}

// ProrationPeriod is the period a quantity change is prorated over: the
// current one, or, once the renewal charge of the next one is written (its
// amount fixed at the quantities of then, while the period moves only when
// it is paid), that next period, in which the time of a change then falls.
func (s Subscription) ProrationPeriod() Period {
	if s.NextPeriodCharged {
		return s.NextPeriod()
	}
	return Period{Start: s.CurrentPeriodStart, End: s.CurrentPeriodEnd}
}

// PreviewQuantity computes the change req would make at now, without making
// it. The proration date must lie in the proration period and not after
// now. A trial is free, so a change within it prorates nothing.
// Codes: validation_error (bad quantity, item, date or behaviour, a
// subscription that has ended or never started).
func (s Subscription) PreviewQuantity(req QuantityRequest, now time.Time) (QuantityChange, error) {
	if err := s.canChangeQuantity(); err != nil {
		return QuantityChange{}, err
	}
	if req.Quantity < 1 || req.Quantity > maxQuantity {
		return QuantityChange{}, Invalid("quantity", "must be between 1 and %d", maxQuantity)
	}
	b := req.Behavior
	if b == "" {
		b = CreateProrations
	}
	if _, err := ParseProrationBehavior((*string)(&b)); err != nil {
		return QuantityChange{}, err
	}
	item, err := s.item(req.ItemID)
	if err != nil {
		return QuantityChange{}, err
	}
	period := s.ProrationPeriod()
	at := now.Truncate(time.Second)
	if req.ProrationDate != nil {
		at = req.ProrationDate.Truncate(time.Second)
		if at.Before(period.Start.Truncate(time.Second)) || !at.Before(period.End) || at.After(now) {
			return QuantityChange{}, Invalid("proration_date", "must lie in the period being billed (the current one, or the next once its renewal charge is written) and not in the future")
		}
	}
	qc := QuantityChange{
		SubscriptionID: s.ID, ItemID: item.ID, OldQuantity: item.Quantity, NewQuantity: req.Quantity,
		Behavior: b, ProrationDate: at.UTC(), PeriodStart: period.Start, PeriodEnd: period.End,
		Currency: item.Price.Currency, Lines: []ProrationLine{}, PendingBefore: s.PendingProration, PendingAfter: s.PendingProration,
	}
	if b == ProrationNone || (s.Status == SubTrialing && !s.NextPeriodCharged) {
		return qc, nil
	}
	qc.Lines = ProrationLines(item.Price.Amount, item.Quantity, req.Quantity, period, at)
	if qc.Lines == nil {
		qc.Lines = []ProrationLine{}
	}
	for _, l := range qc.Lines {
		qc.Proration += l.Amount
	}
	qc.PendingAfter = s.PendingProration + qc.Proration
	if b == AlwaysInvoice && qc.PendingAfter > 0 {
		qc.AmountDue, qc.PendingAfter = qc.PendingAfter, 0
	}
	return qc, nil
}

// ApplyQuantityChange makes the change qc describes, with qc's amounts: the
// item's quantity and the pending proration amount. It refuses a qc computed
// from another state of the subscription (another quantity, period, price or
// pending amount), so what was previewed is what is billed or nothing is.
// The caller charges qc.AmountDue. Codes: validation_error.
func (s *Subscription) ApplyQuantityChange(qc QuantityChange) error {
	if err := s.canChangeQuantity(); err != nil {
		return err
	}
	i, period := s.itemIndex(qc.ItemID), s.ProrationPeriod()
	if qc.SubscriptionID != s.ID || i < 0 || s.Items[i].Quantity != qc.OldQuantity ||
		!period.Start.Equal(qc.PeriodStart) || !period.End.Equal(qc.PeriodEnd) ||
		s.PendingProration != qc.PendingBefore || s.Items[i].Price.Currency != qc.Currency {
		return Errorf(ValidationError, "The subscription has changed since this quantity change was computed; preview it again.")
	}
	s.Items[i].Quantity = qc.NewQuantity
	s.PendingProration = qc.PendingAfter
	return nil
}

// ChangeQuantity previews req at now and applies it.
// Codes: validation_error.
func (s *Subscription) ChangeQuantity(req QuantityRequest, now time.Time) (QuantityChange, error) {
	qc, err := s.PreviewQuantity(req, now)
	if err != nil {
		return QuantityChange{}, err
	}
	return qc, s.ApplyQuantityChange(qc)
}
