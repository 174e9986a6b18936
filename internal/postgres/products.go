package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
)

// productCols selects a product with its default price (p and dp).
const productCols = `p.id, p.livemode, p.name, p.description, p.active, p.images, p.url, p.metadata,
	p.shippable, p.unit_label, p.statement_descriptor, p.tax_code, p.created_at,
	dp.id AS price_id, dp.amount AS price_amount, dp.currency AS price_currency,
	dp.tax_behavior AS price_tax_behavior, dp.created_at AS price_created_at`

const productFrom = ` FROM products p LEFT JOIN prices dp ON dp.id = p.default_price_id `

type productRow struct {
	ID                  string         `db:"id"`
	Live                bool           `db:"livemode"`
	Name                string         `db:"name"`
	Description         sql.NullString `db:"description"`
	Active              bool           `db:"active"`
	Images              []byte         `db:"images"`
	URL                 sql.NullString `db:"url"`
	Metadata            []byte         `db:"metadata"`
	Shippable           sql.NullBool   `db:"shippable"`
	UnitLabel           sql.NullString `db:"unit_label"`
	StatementDescriptor sql.NullString `db:"statement_descriptor"`
	TaxCode             sql.NullString `db:"tax_code"`
	CreatedAt           time.Time      `db:"created_at"`
	PriceID             sql.NullString `db:"price_id"`
	PriceAmount         sql.NullInt64  `db:"price_amount"`
	PriceCurrency       sql.NullString `db:"price_currency"`
	PriceTaxBehavior    sql.NullString `db:"price_tax_behavior"`
	PriceCreatedAt      sql.NullTime   `db:"price_created_at"`
}

// dests are r's fields in productCols' order, to scan a row into without
// sqlx mapping the columns to the struct's fields again on every query
// (reflection that was a visible part of a list page).
func (r *productRow) dests() []any {
	return []any{&r.ID, &r.Live, &r.Name, &r.Description, &r.Active, &r.Images, &r.URL, &r.Metadata,
		&r.Shippable, &r.UnitLabel, &r.StatementDescriptor, &r.TaxCode, &r.CreatedAt,
		&r.PriceID, &r.PriceAmount, &r.PriceCurrency, &r.PriceTaxBehavior, &r.PriceCreatedAt}
}

func (r productRow) product() (payments.Product, error) {
	p := payments.Product{
		ID: r.ID, Live: r.Live, Name: r.Name, Description: strPtr(r.Description), Active: r.Active,
		URL: strPtr(r.URL), Shippable: boolPtr(r.Shippable), UnitLabel: strPtr(r.UnitLabel),
		StatementDescriptor: strPtr(r.StatementDescriptor), TaxCode: strPtr(r.TaxCode), Created: r.CreatedAt,
	}
	if err := unmarshalJSONB(r.Images, &p.Images); err != nil {
		return p, fmt.Errorf("decode images of %s: %w", r.ID, err)
	}
	if err := unmarshalJSONB(r.Metadata, &p.Metadata); err != nil {
		return p, fmt.Errorf("decode metadata of %s: %w", r.ID, err)
	}
	if r.PriceID.Valid {
		p.DefaultPrice = &payments.Price{
			ID: r.PriceID.String, ProductID: r.ID, Amount: r.PriceAmount.Int64, Currency: r.PriceCurrency.String,
			TaxBehavior: strPtr(r.PriceTaxBehavior), Created: r.PriceCreatedAt.Time,
		}
	}
	return p, nil
}

// CreateProduct inserts a product and its default price. Outside a request's
// transaction it does so with the creations queued beside it (see
// productwrites.go).
func (s *Store) CreateProduct(ctx context.Context, sc payments.Scope, p payments.Product) error {
	if requestTxOf(ctx) != nil {
		return s.insertProduct(ctx, sc, p)
	}
	_, err := s.productCreates.Do(ctx, productCreate{sc, p})
	return err
}

// insertProduct inserts a product and its default price in one statement:
// one round trip, atomic without an explicit transaction.
func (s *Store) insertProduct(ctx context.Context, sc payments.Scope, p payments.Product) error {
	var priceID, currency, taxBehavior any
	var amount any
	if dp := p.DefaultPrice; dp != nil {
		priceID, amount, currency, taxBehavior = dp.ID, dp.Amount, dp.Currency, dp.TaxBehavior
	}
	const q = `WITH prod AS (
		INSERT INTO products (merchant_id, livemode, id, name, description, active, images, url, metadata,
			shippable, unit_label, statement_descriptor, tax_code, default_price_id, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15)
	)
	INSERT INTO prices (merchant_id, livemode, id, product_id, amount, currency, tax_behavior, created_at)
	SELECT $1, $2, $14, $3, $16, $17, $18, $15 WHERE $14::text IS NOT NULL`
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, p.ID, p.Name, p.Description, p.Active,
		jsonb(p.Images), p.URL, jsonb(p.Metadata), p.Shippable, p.UnitLabel, p.StatementDescriptor, p.TaxCode,
		priceID, p.Created, amount, currency, taxBehavior)
	if err != nil {
		return fmt.Errorf("insert product: %w", err)
	}
	return nil
}

// Product returns one product of the scope. Outside a request's transaction
// it reads it with the reads queued beside it (see productreads.go).
func (s *Store) Product(ctx context.Context, sc payments.Scope, id string) (payments.Product, error) {
	if requestTxOf(ctx) != nil {
		return s.product(ctx, &s.q, sc, id, productByID)
	}
	return s.productReads.Do(ctx, productKey{sc, id})
}

// productByID and productForUpdate are constants, so that the prepared
// statement's cache key is not built again on every read.
const (
	productByID      = `SELECT ` + productCols + productFrom + `WHERE p.merchant_id = $1 AND p.livemode = $2 AND p.id = $3`
	productForUpdate = productByID + ` FOR UPDATE OF p`
)

func (s *Store) product(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, query string) (payments.Product, error) {
	var r productRow
	err := q.QueryRowxContext(ctx, query, sc.MerchantID, sc.Live, id).Scan(r.dests()...)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Product{}, payments.NotFound(payments.ProductNotFound, id)
	}
	if err != nil {
		return payments.Product{}, fmt.Errorf("select product: %w", err)
	}
	return r.product()
}

// Products returns a page of the scope's products, newest first. Outside a
// request's transaction it reads it with the pages queued beside it (see
// productreads.go).
func (s *Store) Products(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.Product], error) {
	if requestTxOf(ctx) != nil {
		return s.productsPage(ctx, pageKey{sc, lp})
	}
	return s.productPages.Do(ctx, pageKey{sc, lp})
}

// productsPage reads one page of products by itself.
func (s *Store) productsPage(ctx context.Context, k pageKey) (payments.Page[payments.Product], error) {
	const first = `SELECT ` + productCols + productFrom + `WHERE p.merchant_id = $1 AND p.livemode = $2
		ORDER BY p.created_at DESC, p.id DESC`
	const after = `SELECT ` + productCols + productFrom + `WHERE p.merchant_id = $1 AND p.livemode = $2
		AND (p.created_at, p.id) < ($3, $4) ORDER BY p.created_at DESC, p.id DESC`
	return keysetPage(ctx, s, k.sc, k.lp, "products", first, after, productRow.product)
}

// UpdateProduct locks the product, applies fn and saves the result with
// fn's effects.
func (s *Store) UpdateProduct(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Product) (payments.Effects, error)) (payments.Product, error) {
	var p payments.Product
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if p, err = s.product(ctx, tx, sc, id, productForUpdate); err != nil {
			return err
		}
		oldPrice := ""
		if p.DefaultPrice != nil {
			oldPrice = p.DefaultPrice.ID
		}
		eff, err := fn(&p)
		if err != nil {
			return err
		}
		if dp := p.DefaultPrice; dp != nil && dp.ID != oldPrice {
			const ins = `INSERT INTO prices (merchant_id, livemode, id, product_id, amount, currency, tax_behavior, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
			if _, err := tx.ExecContext(ctx, ins, sc.MerchantID, sc.Live, dp.ID, p.ID, dp.Amount, dp.Currency, dp.TaxBehavior, dp.Created); err != nil {
				return fmt.Errorf("insert price: %w", err)
			}
		}
		var priceID *string
		if p.DefaultPrice != nil {
			priceID = &p.DefaultPrice.ID
		}
		const upd = `UPDATE products SET name = $4, description = $5, active = $6, images = $7, url = $8,
			metadata = $9, shippable = $10, unit_label = $11, statement_descriptor = $12, tax_code = $13,
			default_price_id = $14, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		_, err = tx.ExecContext(ctx, upd, sc.MerchantID, sc.Live, p.ID, p.Name, p.Description, p.Active,
			jsonb(p.Images), p.URL, jsonb(p.Metadata), p.Shippable, p.UnitLabel, p.StatementDescriptor, p.TaxCode, priceID)
		if err != nil {
			return fmt.Errorf("update product: %w", err)
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return p, err
}
