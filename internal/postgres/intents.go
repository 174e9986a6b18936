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

const intentCols = `merchant_id, livemode, id, amount, amount_received, currency, status, fee_amount, customer_id,
	customer_name, customer_email, description, metadata, session_id, client_secret_hash, source, device,
	card_last4, last_decline_code, succeeded_at, created_at, amount_refunded, amount_refund_pending, dispute_id, subscription_id`

type intentRow struct {
	MerchantID       string         `db:"merchant_id"`
	Live             bool           `db:"livemode"`
	ID               string         `db:"id"`
	Amount           int64          `db:"amount"`
	AmountReceived   int64          `db:"amount_received"`
	Currency         string         `db:"currency"`
	Status           string         `db:"status"`
	Fee              int64          `db:"fee_amount"`
	CustomerID       sql.NullString `db:"customer_id"`
	CustomerName     sql.NullString `db:"customer_name"`
	CustomerEmail    sql.NullString `db:"customer_email"`
	Description      sql.NullString `db:"description"`
	Metadata         []byte         `db:"metadata"`
	SessionID        sql.NullString `db:"session_id"`
	ClientSecretHash []byte         `db:"client_secret_hash"`
	Source           sql.NullString `db:"source"`
	Device           sql.NullString `db:"device"`
	CardLast4        sql.NullString `db:"card_last4"`
	LastDeclineCode  sql.NullString `db:"last_decline_code"`
	SucceededAt      sql.NullTime   `db:"succeeded_at"`
	CreatedAt        time.Time      `db:"created_at"`
	AmountRefunded   int64          `db:"amount_refunded"`
	RefundPending    int64          `db:"amount_refund_pending"`
	DisputeID        sql.NullString `db:"dispute_id"`
	SubscriptionID   sql.NullString `db:"subscription_id"`
}

// dests are r's fields in intentCols' order (see productRow.dests).
func (r *intentRow) dests() []any {
	return []any{&r.MerchantID, &r.Live, &r.ID, &r.Amount, &r.AmountReceived, &r.Currency, &r.Status, &r.Fee,
		&r.CustomerID, &r.CustomerName, &r.CustomerEmail, &r.Description, &r.Metadata, &r.SessionID,
		&r.ClientSecretHash, &r.Source, &r.Device, &r.CardLast4, &r.LastDeclineCode, &r.SucceededAt,
		&r.CreatedAt, &r.AmountRefunded, &r.RefundPending, &r.DisputeID, &r.SubscriptionID}
}

func (r intentRow) intent() (payments.PaymentIntent, error) {
	pi := payments.PaymentIntent{
		ID: r.ID, Live: r.Live, Amount: r.Amount, AmountReceived: r.AmountReceived, Currency: r.Currency,
		Status: r.Status, Fee: r.Fee, CustomerID: strPtr(r.CustomerID), CustomerName: strPtr(r.CustomerName),
		CustomerEmail: strPtr(r.CustomerEmail), Description: strPtr(r.Description), SessionID: strPtr(r.SessionID),
		ClientSecretHash: r.ClientSecretHash, Source: strPtr(r.Source), Device: strPtr(r.Device),
		CardLast4: strPtr(r.CardLast4), LastDeclineCode: strPtr(r.LastDeclineCode),
		SucceededAt: timePtr(r.SucceededAt), Created: r.CreatedAt,
		AmountRefunded: r.AmountRefunded, AmountRefundPending: r.RefundPending, DisputeID: strPtr(r.DisputeID),
		SubscriptionID: strPtr(r.SubscriptionID),
	}
	if err := unmarshalJSONB(r.Metadata, &pi.Metadata); err != nil {
		return pi, fmt.Errorf("decode metadata of %s: %w", r.ID, err)
	}
	return pi, nil
}

func intent(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, lock string) (payments.PaymentIntent, error) {
	query := `SELECT ` + intentCols + ` FROM payment_intents WHERE merchant_id = $1 AND livemode = $2 AND id = $3` + lock
	var r intentRow
	err := sqlx.GetContext(ctx, q, &r, query, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.PaymentIntent{}, payments.NotFound(payments.PaymentNotFound, id)
	}
	if err != nil {
		return payments.PaymentIntent{}, fmt.Errorf("select payment: %w", err)
	}
	return r.intent()
}

func insertIntent(ctx context.Context, tx sqlx.ExecerContext, sc payments.Scope, pi payments.PaymentIntent) error {
	const q = `INSERT INTO payment_intents (merchant_id, livemode, id, amount, amount_received, currency, status,
		fee_amount, customer_id, customer_name, customer_email, description, metadata, session_id, client_secret_hash,
		source, device, card_last4, last_decline_code, succeeded_at, created_at, updated_at, subscription_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $21, $22)`
	_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, pi.ID, pi.Amount, pi.AmountReceived, pi.Currency, pi.Status,
		pi.Fee, pi.CustomerID, pi.CustomerName, pi.CustomerEmail, pi.Description, jsonb(nonNilMap(pi.Metadata)), pi.SessionID,
		pi.ClientSecretHash, pi.Source, pi.Device, pi.CardLast4, pi.LastDeclineCode, pi.SucceededAt, pi.Created, pi.SubscriptionID)
	if err != nil {
		return fmt.Errorf("insert payment: %w", err)
	}
	return nil
}

func updateIntent(ctx context.Context, tx sqlx.ExecerContext, sc payments.Scope, pi payments.PaymentIntent) error {
	const q = `UPDATE payment_intents SET amount = $4, amount_received = $5, status = $6, fee_amount = $7,
		customer_name = $8, customer_email = $9, card_last4 = $10, last_decline_code = $11, succeeded_at = $12,
		amount_refunded = $13, amount_refund_pending = $14, dispute_id = $15, updated_at = now()
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, pi.ID, pi.Amount, pi.AmountReceived, pi.Status, pi.Fee,
		pi.CustomerName, pi.CustomerEmail, pi.CardLast4, pi.LastDeclineCode, pi.SucceededAt,
		pi.AmountRefunded, pi.AmountRefundPending, pi.DisputeID)
	if err != nil {
		return fmt.Errorf("update payment: %w", err)
	}
	return nil
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// CreateIntent inserts an embedded payment intent.
func (s *Store) CreateIntent(ctx context.Context, sc payments.Scope, pi payments.PaymentIntent) error {
	return insertIntent(ctx, &s.q, sc, pi)
}

// IntentByID reads a payment by id alone with its scope, for the sandbox's
// confirm endpoint, which authenticates with the client secret instead.
func (s *Store) IntentByID(ctx context.Context, id string) (payments.Scope, payments.PaymentIntent, error) {
	var r intentRow
	err := s.q.GetContext(ctx, &r, `SELECT `+intentCols+` FROM payment_intents WHERE id = $1`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Scope{}, payments.PaymentIntent{}, payments.NotFound(payments.PaymentNotFound, id)
	}
	if err != nil {
		return payments.Scope{}, payments.PaymentIntent{}, fmt.Errorf("select payment: %w", err)
	}
	pi, err := r.intent()
	return payments.Scope{MerchantID: r.MerchantID, Live: r.Live}, pi, err
}

// UpdateIntentByID locks a payment found by id, runs fn and saves it with
// fn's events in one transaction.
func (s *Store) UpdateIntentByID(ctx context.Context, id string, fn func(payments.Scope, payments.Plan, *payments.PaymentIntent) (payments.Effects, error)) (payments.PaymentIntent, error) {
	var pi payments.PaymentIntent
	err := s.inTx(ctx, func(tx *txn) error {
		var r intentRow
		err := tx.GetContext(ctx, &r, `SELECT `+intentCols+` FROM payment_intents WHERE id = $1 FOR UPDATE`, id)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.NotFound(payments.PaymentNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("lock payment: %w", err)
		}
		sc := payments.Scope{MerchantID: r.MerchantID, Live: r.Live}
		if pi, err = r.intent(); err != nil {
			return err
		}
		var plan string
		if err := tx.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, sc.MerchantID); err != nil {
			return fmt.Errorf("select plan: %w", err)
		}
		eff, err := fn(sc, payments.Plan(plan), &pi)
		if err != nil {
			return err
		}
		if err := updateIntent(ctx, tx, sc, pi); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return pi, err
}

// Payments returns a page of the scope's payments, newest first.
func (s *Store) Payments(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.PaymentIntent], error) {
	const first = `SELECT ` + intentCols + ` FROM payment_intents WHERE merchant_id = $1 AND livemode = $2
		ORDER BY created_at DESC, id DESC`
	const after = `SELECT ` + intentCols + ` FROM payment_intents WHERE merchant_id = $1 AND livemode = $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC`
	return keysetPage(ctx, s, sc, lp, "payment_intents", first, after, intentRow.intent)
}
