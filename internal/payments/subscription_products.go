package payments

import (
	"context"
	"time"
)

// MaxTrialPeriodDays bounds trial_period_days (Stripe's limit, two years).
const MaxTrialPeriodDays = 730

// SubscriptionProduct is a product sold by subscription: a product whose one
// price is recurring. It is stored as a product (the same prod_ and price_
// ids), so GET /v1/products shows it, and DELETE /v1/products/{id} archives
// it: then (Active false) it can no longer be sold, while existing
// subscriptions keep their price. Its price never changes (create a new
// subscription product for a new price), so a subscription's price is fixed.
type SubscriptionProduct struct {
	ID              string
	Name            string
	Description     *string
	Active          bool
	TrialPeriodDays int
	Metadata        map[string]string
	Price           RecurringPrice
	Live            bool
	Created         time.Time
}

// SubscriptionProductInput is the body of POST /v1/subscription-products.
type SubscriptionProductInput struct {
	Name            *string       `json:"name"`
	Description     *string       `json:"description"`
	Amount          *int64        `json:"amount"`
	Currency        *string       `json:"currency"`
	Interval        *string       `json:"interval"`
	TrialPeriodDays *int          `json:"trial_period_days"`
	Metadata        MetadataInput `json:"metadata"`
}

// product validates in and builds the product it describes.
// Codes: validation_error, invalid_interval.
func (in *SubscriptionProductInput) product(sc Scope, now time.Time) (SubscriptionProduct, error) {
	if err := checkText("name", in.Name, true); err != nil {
		return SubscriptionProduct{}, err
	}
	if err := checkText("description", in.Description, false); err != nil {
		return SubscriptionProduct{}, err
	}
	if err := checkAmount("amount", in.Amount); err != nil {
		return SubscriptionProduct{}, err
	}
	cur, err := checkCurrency("currency", in.Currency)
	if err != nil {
		return SubscriptionProduct{}, err
	}
	if in.Interval == nil {
		return SubscriptionProduct{}, Invalid("interval", "is required")
	}
	iv, err := ProductInterval(*in.Interval)
	if err != nil {
		return SubscriptionProduct{}, err
	}
	trial := 0
	if in.TrialPeriodDays != nil {
		trial = *in.TrialPeriodDays
		if trial < 0 || trial > MaxTrialPeriodDays {
			return SubscriptionProduct{}, Invalid("trial_period_days", "must be between 0 and %d", MaxTrialPeriodDays)
		}
	}
	if err := checkMetadata(in.Metadata); err != nil {
		return SubscriptionProduct{}, err
	}
	id := NewID("prod_")
	p := SubscriptionProduct{
		ID: id, Name: *in.Name, Active: true, TrialPeriodDays: trial, Metadata: map[string]string{},
		Price: RecurringPrice{ID: NewID("price_"), ProductID: id, Amount: *in.Amount, Currency: cur, Interval: iv},
		Live:  sc.Live, Created: now,
	}
	setOptional(&p.Description, in.Description)
	for k, v := range in.Metadata {
		p.Metadata[k] = v
	}
	return p, nil
}

// CreateSubscriptionProduct validates and screens the input (name and
// description, as for products) and creates the product with its recurring
// price. Codes: validation_error, invalid_interval, prohibited_content.
func (s *Service) CreateSubscriptionProduct(ctx context.Context, sc Scope, in SubscriptionProductInput) (SubscriptionProduct, error) {
	p, err := in.product(sc, s.clock.Now(ctx, sc))
	if err != nil {
		return SubscriptionProduct{}, err
	}
	if err := s.screen(ctx, sc, map[string]*string{"name": in.Name, "description": in.Description}); err != nil {
		return SubscriptionProduct{}, err
	}
	if err := s.store.CreateSubscriptionProduct(ctx, sc, p); err != nil {
		return SubscriptionProduct{}, err
	}
	return p, nil
}

// SubscriptionProducts lists subscription products newest first, archived
// ones included (as GET /v1/products does).
// Codes: validation_error (unknown cursor).
func (s *Service) SubscriptionProducts(ctx context.Context, sc Scope, lp ListParams) (Page[SubscriptionProduct], error) {
	return s.store.SubscriptionProducts(ctx, sc, lp)
}

// refuseRecurringPriceChange stops PUT /v1/products/{id} from giving a
// subscription product a new price: subscriptions hold their price, and a
// one-time default price would silently turn it into a one-time product.
// A product's kind never changes, so reading it outside the update's
// transaction is exact. Codes: validation_error.
func (s *Service) refuseRecurringPriceChange(ctx context.Context, sc Scope, id string) error {
	_, err := s.store.SubscriptionProduct(ctx, sc, id)
	switch ErrorCode(err) {
	case "":
		return Invalid("price", "of a subscription product cannot change: create a new subscription product")
	case ProductNotFound:
		return nil // a one-time product, or none (UpdateProduct says so)
	}
	return err
}

// SubscriptionProductObject is a subscription product as the API returns it
// (decisions.md §2).
type SubscriptionProductObject struct {
	ID              string               `json:"id"`
	Object          string               `json:"object"`
	Name            string               `json:"name"`
	Description     *string              `json:"description"`
	Active          bool                 `json:"active"`
	TrialPeriodDays int                  `json:"trial_period_days"`
	Metadata        map[string]string    `json:"metadata"`
	Price           RecurringPriceObject `json:"price"`
	Livemode        bool                 `json:"livemode"`
	Created         int64                `json:"created"`
}

// Object returns the product's API shape.
func (p SubscriptionProduct) Object() SubscriptionProductObject {
	return SubscriptionProductObject{
		ID: p.ID, Object: "product", Name: p.Name, Description: p.Description, Active: p.Active,
		TrialPeriodDays: p.TrialPeriodDays, Metadata: nonNilMap(p.Metadata), Price: p.Price.Object(),
		Livemode: p.Live, Created: p.Created.Unix(),
	}
}

// SubscriptionStore is the persistence of subscriptions (part of Store).
type SubscriptionStore interface {
	// CreateSubscriptionProduct inserts the product and its recurring price.
	CreateSubscriptionProduct(ctx context.Context, sc Scope, p SubscriptionProduct) error
	// SubscriptionProduct reads one, archived included. Codes: product_not_found
	// (also for a one-time product's id).
	SubscriptionProduct(ctx context.Context, sc Scope, id string) (SubscriptionProduct, error)
	SubscriptionProducts(ctx context.Context, sc Scope, lp ListParams) (Page[SubscriptionProduct], error)
	// RecurringPriceForSale returns the active subscription product whose
	// price is priceID, for a subscription session. Codes: product_not_found
	// (unknown, another scope's, archived, or a one-time price).
	RecurringPriceForSale(ctx context.Context, sc Scope, priceID string) (SubscriptionProduct, error)
}
