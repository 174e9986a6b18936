package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

// A subscription product is a products row with subscription true and its
// recurring default price (see migrations/0008_subscription_products.sql).
const subProductCols = `p.id, p.livemode, p.name, p.description, p.active, p.trial_period_days, p.metadata, p.created_at,
	pr.id AS price_id, pr.amount, pr.currency, pr.recurring_interval, pr.recurring_interval_count`

const subProductFrom = ` FROM products p JOIN prices pr ON pr.id = p.default_price_id `

type subProductRow struct {
	ID            string         `db:"id"`
	Live          bool           `db:"livemode"`
	Name          string         `db:"name"`
	Description   sql.NullString `db:"description"`
	Active        bool           `db:"active"`
	TrialDays     sql.NullInt64  `db:"trial_period_days"`
	Metadata      []byte         `db:"metadata"`
	CreatedAt     time.Time      `db:"created_at"`
	PriceID       string         `db:"price_id"`
	Amount        int64          `db:"amount"`
	Currency      string         `db:"currency"`
	Interval      sql.NullString `db:"recurring_interval"`
	IntervalCount sql.NullInt64  `db:"recurring_interval_count"`
}

// dests are r's fields in subProductCols' order (see productRow.dests).
func (r *subProductRow) dests() []any {
	return []any{&r.ID, &r.Live, &r.Name, &r.Description, &r.Active, &r.TrialDays, &r.Metadata, &r.CreatedAt,
		&r.PriceID, &r.Amount, &r.Currency, &r.Interval, &r.IntervalCount}
}

func (r subProductRow) product() (payments.SubscriptionProduct, error) {
	iv, err := payments.NewInterval(r.Interval.String, int(r.IntervalCount.Int64))
	if err != nil {
		return payments.SubscriptionProduct{}, fmt.Errorf("interval of price %s: %w", r.PriceID, err)
	}
	p := payments.SubscriptionProduct{
		ID: r.ID, Live: r.Live, Name: r.Name, Description: strPtr(r.Description), Active: r.Active,
		TrialPeriodDays: int(r.TrialDays.Int64), Created: r.CreatedAt,
		Price: payments.RecurringPrice{ID: r.PriceID, ProductID: r.ID, Amount: r.Amount, Currency: r.Currency, Interval: iv},
	}
	if err := unmarshalJSONB(r.Metadata, &p.Metadata); err != nil {
		return p, fmt.Errorf("decode metadata of %s: %w", r.ID, err)
	}
	return p, nil
}

// CreateSubscriptionProduct inserts the product and its recurring price in
// one statement, as CreateProduct does.
func (s *Store) CreateSubscriptionProduct(ctx context.Context, sc payments.Scope, p payments.SubscriptionProduct) error {
	const q = `WITH prod AS (
		INSERT INTO products (merchant_id, livemode, id, name, description, active, metadata,
			subscription, trial_period_days, default_price_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, true, $8, $9, $10, $10)
	)
	INSERT INTO prices (merchant_id, livemode, id, product_id, amount, currency,
		recurring_interval, recurring_interval_count, created_at)
	VALUES ($1, $2, $9, $3, $11, $12, $13, $14, $10)`
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, p.ID, p.Name, p.Description, p.Active,
		jsonb(p.Metadata), p.TrialPeriodDays, p.Price.ID, p.Created, p.Price.Amount, p.Price.Currency,
		p.Price.Interval.Name, p.Price.Interval.Count)
	// Either key may be the one reported: the statement writes both.
	if err != nil && !writtenBefore(err, "products_pkey", "prices_pkey") { // rerun.go
		return fmt.Errorf("insert subscription product: %w", err)
	}
	return nil
}

// SubscriptionProduct returns one subscription product of the scope,
// archived included; a one-time product's id is not found.
func (s *Store) SubscriptionProduct(ctx context.Context, sc payments.Scope, id string) (payments.SubscriptionProduct, error) {
	const q = `SELECT ` + subProductCols + subProductFrom +
		`WHERE p.merchant_id = $1 AND p.livemode = $2 AND p.id = $3 AND p.subscription`
	return s.subProduct(ctx, q, sc, id, payments.NotFound(payments.ProductNotFound, id))
}

// RecurringPriceForSale returns the active subscription product whose active
// price is priceID.
func (s *Store) RecurringPriceForSale(ctx context.Context, sc payments.Scope, priceID string) (payments.SubscriptionProduct, error) {
	const q = `SELECT ` + subProductCols + ` FROM prices pr JOIN products p ON p.id = pr.product_id
	WHERE pr.merchant_id = $1 AND pr.livemode = $2 AND pr.id = $3 AND pr.active
		AND p.subscription AND p.active AND pr.recurring_interval IS NOT NULL`
	return s.subProduct(ctx, q, sc, priceID,
		payments.Errorf(payments.ProductNotFound, "No such recurring price, or its product is archived: '%s'", priceID))
}

func (s *Store) subProduct(ctx context.Context, q string, sc payments.Scope, id string, notFound error) (payments.SubscriptionProduct, error) {
	var r subProductRow
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.SubscriptionProduct{}, notFound
	}
	if err != nil {
		return payments.SubscriptionProduct{}, fmt.Errorf("select subscription product: %w", err)
	}
	return r.product()
}

// SubscriptionProducts returns a page of the scope's subscription products,
// newest first, through the partial index products_subscription_page. The
// cursor must be one of them: a one-time product's id is not a known id of
// this list.
func (s *Store) SubscriptionProducts(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.SubscriptionProduct], error) {
	const first = `SELECT ` + subProductCols + subProductFrom + `WHERE p.merchant_id = $1 AND p.livemode = $2
		AND p.subscription ORDER BY p.created_at DESC, p.id DESC`
	const after = `SELECT ` + subProductCols + subProductFrom + `WHERE p.merchant_id = $1 AND p.livemode = $2
		AND p.subscription AND (p.created_at, p.id) < ($3, $4) ORDER BY p.created_at DESC, p.id DESC`
	const cur = `SELECT created_at, id FROM products
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND subscription`
	var rows []subProductRow
	if lp.StartingAfter == "" {
		if err := selectPage(ctx, &s.q, &rows, first, lp.Limit, sc.MerchantID, sc.Live); err != nil {
			return payments.Page[payments.SubscriptionProduct]{}, fmt.Errorf("select subscription products: %w", err)
		}
	} else {
		c, err := s.loadCursor(ctx, cur, sc, lp.StartingAfter)
		if err != nil {
			return payments.Page[payments.SubscriptionProduct]{}, err
		}
		if err := selectPage(ctx, &s.q, &rows, after, lp.Limit, sc.MerchantID, sc.Live, c.CreatedAt, c.ID); err != nil {
			return payments.Page[payments.SubscriptionProduct]{}, fmt.Errorf("select subscription products: %w", err)
		}
	}
	return pageOf(rows, lp.Limit, subProductRow.product)
}
