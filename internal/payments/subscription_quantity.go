package payments

import (
	"context"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// QuantityStore is the persistence of quantity changes (part of Store).
type QuantityStore interface {
	// CreateQuantityPreview stores a preview of a quantity change.
	CreateQuantityPreview(ctx context.Context, sc Scope, p QuantityPreview) error
	// ChangeQuantity locks the subscription and, when previewID is not
	// empty, the scope's unused, unexpired (at now) preview of it, then
	// runs fn with the id of the change (the preview's, or a new one) and
	// the preview's change (nil without one). It writes in one
	// transaction: the change (the preview marked used, or a new row,
	// used), the proration items of fn's change (unless its behaviour is
	// none), the charge fn returns (billing the subscription's unbilled
	// items), the subscription and fn's effects.
	// Codes: subscription_not_found, validation_error (preview).
	ChangeQuantity(ctx context.Context, sc Scope, subscriptionID, previewID string, now time.Time,
		fn func(sub *Subscription, changeID string, preview *QuantityChange) (QuantityChange, *SubscriptionCharge, Effects, error)) (Subscription, error)
}

// QuantityPreviewTTL is how long a preview binds (sqp_… expires_at).
const QuantityPreviewTTL = 24 * time.Hour

// QuantityInput is the body of PATCH /v1/subscriptions/{id}/quantity and
// of its preview: quantity 1..1000, proration_behavior (default
// create_prorations), item_id (required with several items),
// proration_date (Unix seconds in the current period, not in the future;
// default now) and, for the change only, preview (sqp_…): the change is
// then the preview's, and the fields given must agree with it.
type QuantityInput struct {
	Quantity          *int    `json:"quantity"`
	ProrationBehavior *string `json:"proration_behavior"`
	ItemID            *string `json:"item_id"`
	ProrationDate     *int64  `json:"proration_date"`
	Preview           *string `json:"preview"`
}

// Request validates the input into a QuantityRequest; with a preview, the
// quantity may be left out. Codes: validation_error naming the field.
func (in QuantityInput) Request() (QuantityRequest, error) {
	var r QuantityRequest
	if in.Preview != nil && (!strings.HasPrefix(*in.Preview, "sqp_") || len(*in.Preview) > 255) {
		return r, Invalid("preview", "must be a quantity preview id (sqp_…)")
	}
	switch {
	case in.Quantity != nil:
		if *in.Quantity < 1 || *in.Quantity > maxQuantity {
			return r, Invalid("quantity", "must be between 1 and %d", maxQuantity)
		}
		r.Quantity = *in.Quantity
	case in.Preview == nil:
		return r, Invalid("quantity", "is required unless preview is given")
	}
	b, err := ParseProrationBehavior(in.ProrationBehavior)
	if err != nil {
		return r, err
	}
	r.Behavior = b
	if in.ItemID != nil {
		if !strings.HasPrefix(*in.ItemID, "si_") || len(*in.ItemID) > 255 {
			return r, Invalid("item_id", "must be a subscription item id (si_…)")
		}
		r.ItemID = *in.ItemID
	}
	if in.ProrationDate != nil {
		if *in.ProrationDate < 0 || *in.ProrationDate > 253402300799 { // year 9999
			return r, Invalid("proration_date", "must be a Unix time in seconds")
		}
		t := time.Unix(*in.ProrationDate, 0).UTC()
		r.ProrationDate = &t
	}
	return r, nil
}

// agrees reports whether the fields given in the input match the preview.
func (in QuantityInput) agrees(qc QuantityChange) bool {
	return (in.Quantity == nil || *in.Quantity == qc.NewQuantity) &&
		(in.ProrationBehavior == nil || ProrationBehavior(*in.ProrationBehavior) == qc.Behavior) &&
		(in.ItemID == nil || *in.ItemID == qc.ItemID) &&
		(in.ProrationDate == nil || *in.ProrationDate == qc.ProrationDate.Unix())
}

// QuantityPreview is a stored preview of a quantity change: binding until
// ExpiresAt for the change made with it, once.
type QuantityPreview struct {
	ID        string
	Live      bool
	Change    QuantityChange
	ExpiresAt time.Time
	Created   time.Time
}

// ProrationLineObject is a proration line as the API returns it.
type ProrationLineObject struct {
	Description string `json:"description"`
	Quantity    int    `json:"quantity"`
	UnitAmount  int64  `json:"unit_amount"`
	Amount      int64  `json:"amount"`
	PeriodStart int64  `json:"period_start"`
	PeriodEnd   int64  `json:"period_end"`
}

// QuantityPreviewObject is a preview as the API returns it: the lines, the
// proration (their sum), what is charged at once (amount_due) and the
// pending proration amount after the change.
type QuantityPreviewObject struct {
	ID                string                `json:"id"`
	Object            string                `json:"object"`
	Subscription      string                `json:"subscription"`
	ItemID            string                `json:"item_id"`
	OldQuantity       int                   `json:"old_quantity"`
	Quantity          int                   `json:"quantity"`
	ProrationBehavior string                `json:"proration_behavior"`
	ProrationDate     int64                 `json:"proration_date"`
	Currency          string                `json:"currency"`
	Lines             []ProrationLineObject `json:"lines"`
	ProrationAmount   int64                 `json:"proration_amount"`
	AmountDue         int64                 `json:"amount_due"`
	PendingProration  int64                 `json:"pending_proration_amount"`
	ExpiresAt         int64                 `json:"expires_at"`
	Created           int64                 `json:"created"`
	Livemode          bool                  `json:"livemode"`
}

// Object returns the preview's API shape.
func (p QuantityPreview) Object() QuantityPreviewObject {
	qc := p.Change
	o := QuantityPreviewObject{
		ID: p.ID, Object: "subscription_quantity_preview", Subscription: qc.SubscriptionID, ItemID: qc.ItemID,
		OldQuantity: qc.OldQuantity, Quantity: qc.NewQuantity, ProrationBehavior: string(qc.Behavior),
		ProrationDate: qc.ProrationDate.Unix(), Currency: qc.Currency, Lines: make([]ProrationLineObject, 0, len(qc.Lines)),
		ProrationAmount: qc.Proration, AmountDue: qc.AmountDue, PendingProration: qc.PendingAfter,
		ExpiresAt: p.ExpiresAt.Unix(), Created: p.Created.Unix(), Livemode: p.Live,
	}
	for _, l := range qc.Lines {
		o.Lines = append(o.Lines, ProrationLineObject{Description: l.Description, Quantity: l.Quantity, UnitAmount: l.UnitAmount,
			Amount: l.Amount, PeriodStart: l.From.Unix(), PeriodEnd: l.To.Unix()})
	}
	return o
}

// PreviewQuantity computes what a quantity change would do now and stores
// it as a binding preview (sqp_…, for QuantityPreviewTTL): a change made
// with it bills exactly its amounts, or is refused if the subscription
// changed meanwhile. Codes: subscription_not_found, validation_error.
func (s *Service) PreviewQuantity(ctx context.Context, sc Scope, subscriptionID string, in QuantityInput) (QuantityPreview, error) {
	if in.Preview != nil {
		return QuantityPreview{}, Invalid("preview", "is accepted by the change, not by its preview")
	}
	req, err := in.Request()
	if err != nil {
		return QuantityPreview{}, err
	}
	sub, err := s.store.Subscription(ctx, sc, subscriptionID)
	if err != nil {
		return QuantityPreview{}, err
	}
	now := s.clock.Now(ctx, sc)
	qc, err := sub.PreviewQuantity(req, now)
	if err != nil {
		return QuantityPreview{}, err
	}
	p := QuantityPreview{ID: NewID("sqp_"), Live: sc.Live, Change: qc, ExpiresAt: now.Add(QuantityPreviewTTL), Created: now}
	return p, s.store.CreateQuantityPreview(ctx, sc, p)
}

// ChangeQuantity changes an item's quantity with its proration behaviour,
// with customer.subscription.updated: create_prorations records the
// proration lines as pending items for the next renewal (the
// subscription's pending_proration_amount); always_invoice charges the
// pending items and the proration at once when their sum is positive, as
// a proration charge keyed by this change (one charge per change, made by
// the worker through ChargeSubscription), a credit staying pending; none
// changes the quantity alone. With a preview, the preview's change is
// applied as it was computed, once.
// Codes: subscription_not_found, validation_error.
func (s *Service) ChangeQuantity(ctx context.Context, sc Scope, subscriptionID string, in QuantityInput) (Subscription, error) {
	req, err := in.Request()
	if err != nil {
		return Subscription{}, err
	}
	previewID := ""
	if in.Preview != nil {
		previewID = *in.Preview
	}
	now := s.clock.Now(ctx, sc)
	return s.store.ChangeQuantity(ctx, sc, subscriptionID, previewID, now,
		func(sub *Subscription, changeID string, preview *QuantityChange) (QuantityChange, *SubscriptionCharge, Effects, error) {
			var qc QuantityChange
			if preview != nil {
				if !in.agrees(*preview) {
					return qc, nil, Effects{}, Invalid("preview", "was made for another change than the one asked")
				}
				qc = *preview
				if err := sub.ApplyQuantityChange(qc); err != nil {
					return qc, nil, Effects{}, err
				}
			} else if qc, err = sub.ChangeQuantity(req, now); err != nil {
				return qc, nil, Effects{}, err
			}
			eff := Effects{Events: subscriptionEvents(*sub, false, now)}
			if b, ok := s.billingOf(*sub); ok {
				// The processor prorates and invoices: the change is made
				// there first (keyed by this change's id), and here only
				// the quantity changes; its invoice comes back as an event.
				// A processor error writes nothing.
				err := s.callInTx("subscription quantity", func() error {
					return b.ChangeQuantity(ctx, account(sc), processor.QuantityChange{
						Key: changeID, SubscriptionID: sub.ID, ItemID: qc.ItemID, Quantity: int64(qc.NewQuantity),
						ProrationBehavior: string(qc.Behavior), ProrationDate: qc.ProrationDate,
					})
				})
				if err != nil {
					return qc, nil, Effects{}, err
				}
				sub.PendingProration, qc.Lines = qc.PendingBefore, nil
				eff.Events = subscriptionEvents(*sub, false, now)
				return qc, nil, eff, nil
			}
			if qc.AmountDue <= 0 {
				return qc, nil, eff, nil
			}
			ch := &SubscriptionCharge{
				ID: NewID("subch_"), SubscriptionID: sub.ID, Kind: ChargeProration, ChangeID: &changeID,
				Amount: qc.AmountDue, Currency: qc.Currency, Status: ChargePending, NextAttemptAt: &now, Created: now,
			}
			eff.Jobs = []Job{{Kind: JobSubscriptionCharge, ID: ch.ID, MerchantID: sc.MerchantID, Live: sc.Live}}
			return qc, ch, eff, nil
		})
}
