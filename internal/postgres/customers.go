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

const customerCols = `id, livemode, email, name, phone, metadata, created_at`

type customerRow struct {
	ID        string         `db:"id"`
	Live      bool           `db:"livemode"`
	Email     sql.NullString `db:"email"`
	Name      sql.NullString `db:"name"`
	Phone     sql.NullString `db:"phone"`
	Metadata  []byte         `db:"metadata"`
	CreatedAt time.Time      `db:"created_at"`
}

// dests are r's fields in customerCols' order (see productRow.dests).
func (r *customerRow) dests() []any {
	return []any{&r.ID, &r.Live, &r.Email, &r.Name, &r.Phone, &r.Metadata, &r.CreatedAt}
}

func (r customerRow) customer() (payments.Customer, error) {
	c := payments.Customer{
		ID: r.ID, Live: r.Live, Email: strPtr(r.Email), Name: strPtr(r.Name), Phone: strPtr(r.Phone), Created: r.CreatedAt,
	}
	if err := unmarshalJSONB(r.Metadata, &c.Metadata); err != nil {
		return c, fmt.Errorf("decode metadata of %s: %w", r.ID, err)
	}
	return c, nil
}

// CreateCustomer inserts a customer.
func (s *Store) CreateCustomer(ctx context.Context, sc payments.Scope, c payments.Customer) error {
	const q = `INSERT INTO customers (merchant_id, livemode, id, email, name, phone, metadata, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, c.ID, c.Email, c.Name, c.Phone, jsonb(c.Metadata), c.Created)
	if err != nil && !writtenBefore(err, "customers_pkey") { // rerun.go
		return fmt.Errorf("insert customer: %w", err)
	}
	return nil
}

// Customer returns a customer of the scope that is not deleted.
func (s *Store) Customer(ctx context.Context, sc payments.Scope, id string) (payments.Customer, error) {
	return s.customer(ctx, &s.q, sc, id, "")
}

func (s *Store) customer(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, lock string) (payments.Customer, error) {
	query := `SELECT ` + customerCols + ` FROM customers
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL` + lock
	var r customerRow
	err := sqlx.GetContext(ctx, q, &r, query, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Customer{}, payments.NotFound(payments.CustomerNotFound, id)
	}
	if err != nil {
		return payments.Customer{}, fmt.Errorf("select customer: %w", err)
	}
	return r.customer()
}

// Customers returns a page of the scope's customers, newest first. A deleted
// customer still marks its place, so a page boundary on it works.
func (s *Store) Customers(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.Customer], error) {
	const first = `SELECT ` + customerCols + ` FROM customers WHERE merchant_id = $1 AND livemode = $2 AND deleted_at IS NULL
		ORDER BY created_at DESC, id DESC`
	const after = `SELECT ` + customerCols + ` FROM customers WHERE merchant_id = $1 AND livemode = $2 AND deleted_at IS NULL
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC`
	return keysetPage(ctx, s, sc, lp, "customers", first, after, customerRow.customer)
}

// UpdateCustomer locks the customer, applies fn and saves the result with
// fn's effects.
func (s *Store) UpdateCustomer(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Customer) (payments.Effects, error)) (payments.Customer, error) {
	var c payments.Customer
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if c, err = s.customer(ctx, tx, sc, id, " FOR UPDATE"); err != nil {
			return err
		}
		eff, err := fn(&c)
		if err != nil {
			return err
		}
		const upd = `UPDATE customers SET email = $4, name = $5, phone = $6, metadata = $7, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, upd, sc.MerchantID, sc.Live, c.ID, c.Email, c.Name, c.Phone, jsonb(c.Metadata)); err != nil {
			return fmt.Errorf("update customer: %w", err)
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return c, err
}

// DeleteCustomer marks a customer deleted. A second run of the statement
// (rerun.go) finds the customer deleted at its own time, and so succeeds.
func (s *Store) DeleteCustomer(ctx context.Context, sc payments.Scope, id string, now time.Time) error {
	const q = `UPDATE customers SET deleted_at = $4
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND (deleted_at IS NULL OR deleted_at = $4)`
	res, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, id, now)
	if err != nil {
		return fmt.Errorf("delete customer: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return payments.NotFound(payments.CustomerNotFound, id)
	}
	return nil
}
