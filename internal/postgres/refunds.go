package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

const refundCols = `merchant_id, livemode, id, payment_intent_id, session_id, amount, currency, reason, status,
	failure_reason, created_at`

type refundRow struct {
	MerchantID      string         `db:"merchant_id"`
	Live            bool           `db:"livemode"`
	ID              string         `db:"id"`
	PaymentIntentID string         `db:"payment_intent_id"`
	SessionID       sql.NullString `db:"session_id"`
	Amount          int64          `db:"amount"`
	Currency        string         `db:"currency"`
	Reason          sql.NullString `db:"reason"`
	Status          string         `db:"status"`
	FailureReason   sql.NullString `db:"failure_reason"`
	CreatedAt       time.Time      `db:"created_at"`
}

func (r refundRow) refund() payments.Refund {
	return payments.Refund{
		ID: r.ID, Live: r.Live, PaymentIntentID: r.PaymentIntentID, SessionID: strPtr(r.SessionID), Amount: r.Amount,
		Currency: r.Currency, Reason: strPtr(r.Reason), Status: r.Status, FailureReason: strPtr(r.FailureReason),
		Created: r.CreatedAt,
	}
}

// lockBalance locks the scope's balance in currency; found is false when
// the scope has never held that currency.
func lockBalance(ctx context.Context, tx *txn, sc payments.Scope, currency string) (b payments.Balance, found bool, err error) {
	const q = `SELECT ledger_total, reserved FROM balances
	WHERE merchant_id = $1 AND livemode = $2 AND currency = $3 FOR UPDATE`
	b.Currency = currency
	err = tx.QueryRowxContext(ctx, q, sc.MerchantID, sc.Live, currency).Scan(&b.LedgerTotal, &b.Reserved)
	if errors.Is(err, sql.ErrNoRows) {
		return b, false, nil
	}
	if err != nil {
		return b, false, fmt.Errorf("lock balance: %w", err)
	}
	return b, true, nil
}

// reserve holds amount of the scope's balance in currency for a pending
// refund if the available amount (ledger_total - reserved) covers it, in
// one conditional update: the balance row, shared by all the merchant's
// refunds, is locked only from here to commit, and two refunds can never
// both take the last of it. A succeeded payment always created its balance
// row, so a missing one means the ledger cannot vouch for the refund:
// balance_verification_failed, as is a failure to read it.
func reserve(ctx context.Context, tx *txn, sc payments.Scope, currency string, amount int64) error {
	const q = `WITH upd AS (
		UPDATE balances SET reserved = reserved + $4, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND currency = $3 AND ledger_total - reserved >= $4
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM upd) AS reserved,
		EXISTS (SELECT 1 FROM balances WHERE merchant_id = $1 AND livemode = $2 AND currency = $3) AS found`
	var r struct {
		Reserved bool `db:"reserved"`
		Found    bool `db:"found"`
	}
	err := tx.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, currency, amount)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err() // the client left; not a verdict on the balance
	case err != nil:
		return payments.ErrBalanceUnverified(fmt.Errorf("reserve balance: %w", err))
	case r.Reserved:
		return nil
	case !r.Found:
		return payments.ErrBalanceUnverified(fmt.Errorf("no %s balance for %s", currency, sc.MerchantID))
	}
	return payments.ErrInsufficientBalance(amount, currency)
}

// CreateRefund resolves ref to a succeeded payment of the scope, locks it,
// runs fn, inserts the refund and reserves its amount from the balance
// last, so the balance row is held for the shortest time. Lock order, as on
// every path that takes both: the payment, then the balance.
func (s *Store) CreateRefund(ctx context.Context, sc payments.Scope, ref payments.PaymentRef, fn func(payments.PaymentIntent) (payments.Refund, []payments.Job, error)) (payments.Refund, error) {
	var r payments.Refund
	err := s.inTx(ctx, func(tx *txn) error {
		piID := ref.PaymentIntentID
		if ref.SessionID != "" {
			const q = `SELECT payment_intent_id FROM checkout_sessions
			WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND payment_status = 'paid'`
			var id sql.NullString
			err := tx.GetContext(ctx, &id, q, sc.MerchantID, sc.Live, ref.SessionID)
			if errors.Is(err, sql.ErrNoRows) || (err == nil && !id.Valid) {
				return payments.NotFound(payments.PaymentNotFound, ref.SessionID)
			}
			if err != nil {
				return fmt.Errorf("select session payment: %w", err)
			}
			piID = id.String
		}
		pi, err := intent(ctx, tx, sc, piID, " FOR UPDATE")
		if err != nil {
			return err
		}
		if pi.Status != payments.IntentSucceeded {
			return payments.NotFound(payments.PaymentNotFound, piID) // nothing was paid
		}
		var jobs []payments.Job
		if r, jobs, err = fn(pi); err != nil {
			return err
		}
		pi.AmountRefundPending += r.Amount
		if err := updateIntent(ctx, tx, sc, pi); err != nil {
			return err
		}
		const q = `INSERT INTO refunds (merchant_id, livemode, id, payment_intent_id, session_id, amount, currency, reason,
			status, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`
		if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, r.ID, r.PaymentIntentID, r.SessionID, r.Amount,
			r.Currency, r.Reason, r.Status, r.Created); err != nil {
			return fmt.Errorf("insert refund: %w", err)
		}
		if err := reserve(ctx, tx, sc, r.Currency, r.Amount); err != nil {
			return err
		}
		tx.jobs = append(tx.jobs, jobs...)
		return nil
	})
	return r, err
}

// Refund reads one of the scope's refunds.
func (s *Store) Refund(ctx context.Context, sc payments.Scope, id string) (payments.Refund, error) {
	var row refundRow
	err := s.q.GetContext(ctx, &row, `SELECT `+refundCols+` FROM refunds WHERE merchant_id = $1 AND livemode = $2 AND id = $3`,
		sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Refund{}, &payments.Error{Code: payments.PaymentNotFound, Msg: fmt.Sprintf("No such refund: '%s'", id)}
	}
	if err != nil {
		return payments.Refund{}, fmt.Errorf("select refund: %w", err)
	}
	return row.refund(), nil
}

// FinishRefund locks the refund's payment and then the refund, runs fn and
// saves both with fn's effects in one transaction.
func (s *Store) FinishRefund(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Refund, *payments.PaymentIntent) (payments.Effects, error)) (payments.Refund, error) {
	var r payments.Refund
	err := s.inTx(ctx, func(tx *txn) error {
		// The payment first, as CreateRefund and disputes lock it first.
		const q = `SELECT p.id FROM payment_intents p JOIN refunds r ON r.payment_intent_id = p.id
		WHERE r.merchant_id = $1 AND r.livemode = $2 AND r.id = $3`
		var piID string
		if err := tx.GetContext(ctx, &piID, q, sc.MerchantID, sc.Live, id); err != nil {
			return fmt.Errorf("select refund's payment %s: %w", id, err)
		}
		pi, err := intent(ctx, tx, sc, piID, " FOR UPDATE")
		if err != nil {
			return err
		}
		var row refundRow
		err = tx.GetContext(ctx, &row, `SELECT `+refundCols+` FROM refunds WHERE merchant_id = $1 AND livemode = $2 AND id = $3 FOR UPDATE`,
			sc.MerchantID, sc.Live, id)
		if err != nil {
			return fmt.Errorf("lock refund: %w", err)
		}
		r = row.refund()
		before := r.Status
		eff, err := fn(&r, &pi)
		if err != nil || r.Status == before {
			return err
		}
		const upd = `UPDATE refunds SET status = $4, failure_reason = $5, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, upd, sc.MerchantID, sc.Live, r.ID, r.Status, r.FailureReason); err != nil {
			return fmt.Errorf("update refund: %w", err)
		}
		if err := updateIntent(ctx, tx, sc, pi); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return r, err
}

// Payout locks the balance of currency, or the scope's only balance when
// currency is empty, runs fn and writes its effects.
func (s *Store) Payout(ctx context.Context, sc payments.Scope, currency string, fn func(payments.Balance) (payments.Effects, int64)) (payments.Payout, error) {
	var out payments.Payout
	err := s.inTx(ctx, func(tx *txn) error {
		if currency == "" {
			var curs []string
			if err := tx.SelectContext(ctx, &curs, `SELECT currency FROM balances WHERE merchant_id = $1 AND livemode = $2 ORDER BY currency`,
				sc.MerchantID, sc.Live); err != nil {
				return fmt.Errorf("select balances: %w", err)
			}
			switch len(curs) {
			case 0:
				out = payments.Payout{Currency: "usd"} // nothing to pay out
				return nil
			case 1:
				currency = curs[0]
			default:
				return payments.Invalid("currency", "is required: the balance holds %d currencies %v", len(curs), curs)
			}
		}
		out.Currency = currency
		bal, found, err := lockBalance(ctx, tx, sc, currency)
		if err != nil || !found {
			return err // not found: nothing to pay out
		}
		eff, amount := fn(bal)
		out.Amount = amount
		return applyEffects(ctx, tx, sc, eff)
	})
	return out, err
}

// Balances returns the scope's balances, by currency.
func (s *Store) Balances(ctx context.Context, sc payments.Scope) ([]payments.Balance, error) {
	var rows []struct {
		Currency    string `db:"currency"`
		LedgerTotal int64  `db:"ledger_total"`
		Reserved    int64  `db:"reserved"`
	}
	const q = `SELECT currency, ledger_total, reserved FROM balances WHERE merchant_id = $1 AND livemode = $2 ORDER BY currency`
	if err := s.q.SelectContext(ctx, &rows, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select balances: %w", err)
	}
	out := make([]payments.Balance, len(rows))
	for i, r := range rows {
		out[i] = payments.Balance{Currency: r.Currency, LedgerTotal: r.LedgerTotal, Reserved: r.Reserved}
	}
	return out, nil
}
