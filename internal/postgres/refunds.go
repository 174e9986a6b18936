package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

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

// lockBalance folds the scope's credits in currency into its balance and
// returns it, locked; found is false when the scope has never held that
// currency.
func lockBalance(ctx context.Context, tx *txn, sc payments.Scope, currency string) (b payments.Balance, found bool, err error) {
	const q = `WITH ` + foldCredits + `
	UPDATE balances SET ledger_total = ledger_total + (SELECT credit FROM credit), updated_at = now()
	WHERE merchant_id = $1 AND livemode = $2 AND currency = $3
	RETURNING ledger_total, reserved`
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

// CreateRefund resolves ref to a succeeded payment of the scope, locks it,
// runs fn, and inserts the refund fn fills in, with its reservations
// (insertRefund) and fn's effects.
// Lock order, as on every path that takes both: the payment, then the
// balance.
func (s *Store) CreateRefund(ctx context.Context, sc payments.Scope, ref payments.PaymentRef, fn func(payments.PaymentIntent, *payments.Refund) (payments.Effects, error)) (payments.Refund, error) {
	var r payments.Refund
	err := s.inTx(ctx, func(tx *txn) error {
		if ref.IdempotencyKey != "" {
			var row refundRow
			// Within the key's lifetime only: after it the key is new again.
			err := tx.GetContext(ctx, &row, `SELECT `+refundCols+` FROM refunds
				WHERE merchant_id = $1 AND livemode = $2 AND idempotency_key = $3 AND created_at > $4
				ORDER BY created_at DESC LIMIT 1`,
				sc.MerchantID, sc.Live, ref.IdempotencyKey, ref.KeySince)
			if err == nil {
				r = row.refund() // made by this key's first request
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("select refund by idempotency key: %w", err)
			}
		}
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
		eff, err := fn(pi, &r)
		if err != nil {
			return err
		}
		if err := insertRefund(ctx, tx, sc, r, ref.IdempotencyKey); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return r, err
}

// insertRefund inserts a pending refund, adds its amount to the payment's
// pending refunds and reserves it from the balance, after folding in the
// payments' credits, if the available amount (ledger_total - reserved)
// covers it, in one statement:
// the payment's lock (a hot payment serializes its refunds) and the
// balance's (shared by all the merchant's refunds) are held from here to
// commit only, and two refunds can never both take the last of a balance.
// The amount check reads the balance through cur, which locks the row
// and so sees its latest committed version: were the check written on
// balances' own columns in b's WHERE, a refund whose snapshot predates a
// concurrent refund's commit would test the old ledger_total (without the
// credits that refund folded, which this one then no longer finds) and be
// refused although the money is there; a WHERE that fails on the snapshot
// version is never re-checked on the newer one. cur's condition on credit
// only orders the locks: the credits (ledger entries) first, then the
// balance row, as before, so two refunds cannot deadlock.
// A succeeded payment always created its balance row, so a missing one
// means the ledger cannot vouch for the refund: balance_verification_failed,
// as is a failure to read it. On a refusal the caller's transaction rolls
// the refund and the payment back.
func insertRefund(ctx context.Context, tx *txn, sc payments.Scope, r payments.Refund, idemKey string) error {
	const q = `WITH ` + foldCredits + `, cur AS (
		SELECT ledger_total, reserved FROM balances
		WHERE merchant_id = $1 AND livemode = $2 AND currency = $3 AND (SELECT credit FROM credit) IS NOT NULL
		FOR UPDATE
	), b AS (
		UPDATE balances SET ledger_total = ledger_total + (SELECT credit FROM credit), reserved = reserved + $6,
			updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND currency = $3
			AND (SELECT ledger_total + (SELECT credit FROM credit) - reserved FROM cur) >= $6
		RETURNING 1
	), p AS (
		UPDATE payment_intents SET amount_refund_pending = amount_refund_pending + $6, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND id = $4 AND EXISTS (SELECT 1 FROM b)
		RETURNING 1
	), r AS (
		INSERT INTO refunds (merchant_id, livemode, id, payment_intent_id, session_id, amount, currency, reason,
			status, idempotency_key, created_at, updated_at)
		SELECT $1, $2, $7, $4, $5, $6, $3, $8, $9, $11, $10, $10 WHERE EXISTS (SELECT 1 FROM b)
		RETURNING 1
	)
	SELECT EXISTS (SELECT 1 FROM b) AND EXISTS (SELECT 1 FROM p) AND EXISTS (SELECT 1 FROM r) AS reserved,
		EXISTS (SELECT 1 FROM balances WHERE merchant_id = $1 AND livemode = $2 AND currency = $3) AS found`
	var res struct {
		Reserved bool `db:"reserved"`
		Found    bool `db:"found"`
	}
	err := tx.GetContext(ctx, &res, q, sc.MerchantID, sc.Live, r.Currency, r.PaymentIntentID, r.SessionID, r.Amount,
		r.ID, r.Reason, r.Status, r.Created, nullIfEmpty(idemKey))
	var pqErr *pq.Error
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err() // the client left; not a verdict on the balance
	case errors.As(err, &pqErr) && pqErr.Code.Class() == "23":
		// An integrity violation is a bug above, not an unreadable balance:
		// let it be the 500 it is.
		return fmt.Errorf("insert refund: %w", err)
	case err != nil:
		return payments.ErrBalanceUnverified(fmt.Errorf("insert refund: %w", err))
	case res.Reserved:
		return nil
	case !res.Found:
		return payments.ErrBalanceUnverified(fmt.Errorf("no %s balance for %s", r.Currency, sc.MerchantID))
	}
	return payments.ErrInsufficientBalance(r.Amount, r.Currency)
}

// Refund reads one of the scope's refunds.
func (s *Store) Refund(ctx context.Context, sc payments.Scope, id string) (payments.Refund, error) {
	var row refundRow
	err := s.q.GetContext(ctx, &row, `SELECT `+refundCols+` FROM refunds WHERE merchant_id = $1 AND livemode = $2 AND id = $3`,
		sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Refund{}, payments.NotFoundOf("refund", id)
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
		const q = `SELECT payment_intent_id FROM refunds WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
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
	if err != nil {
		return payments.Refund{}, err // fn's changes did not happen
	}
	return r, nil
}

// Payout locks the balance of currency, or the scope's only balance when
// currency is empty, runs fn and writes its effects.
func (s *Store) Payout(ctx context.Context, sc payments.Scope, currency string, fn func(payments.Balance) (payments.Effects, error)) (payments.Money, error) {
	var out payments.Money
	err := s.inTx(ctx, func(tx *txn) error {
		if currency == "" {
			var curs []string
			if err := tx.SelectContext(ctx, &curs, `SELECT currency FROM balances WHERE merchant_id = $1 AND livemode = $2 ORDER BY currency`,
				sc.MerchantID, sc.Live); err != nil {
				return fmt.Errorf("select balances: %w", err)
			}
			switch len(curs) {
			case 0:
				out = payments.Money{Currency: "usd"} // nothing to pay out
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
		eff, err := fn(bal)
		if err != nil {
			return err
		}
		for _, e := range eff.Ledger {
			out.Amount -= e.Amount // what leaves the balance
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return out, err
}

// Balances returns the scope's balances, by currency, credits not yet
// folded in included.
func (s *Store) Balances(ctx context.Context, sc payments.Scope) ([]payments.Balance, error) {
	var rows []struct {
		Currency    string `db:"currency"`
		LedgerTotal int64  `db:"ledger_total"`
		Reserved    int64  `db:"reserved"`
	}
	// What is not folded in yet counts: it is the payments' credits.
	const q = `SELECT b.currency, b.ledger_total + coalesce(sum(l.amount), 0) AS ledger_total, b.reserved
	FROM balances b LEFT JOIN ledger_entries l ON l.merchant_id = b.merchant_id AND l.livemode = b.livemode
		AND l.currency = b.currency AND NOT l.folded
	WHERE b.merchant_id = $1 AND b.livemode = $2
	GROUP BY b.currency, b.ledger_total, b.reserved ORDER BY b.currency`
	if err := s.q.SelectContext(ctx, &rows, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select balances: %w", err)
	}
	out := make([]payments.Balance, len(rows))
	for i, r := range rows {
		out[i] = payments.Balance{Currency: r.Currency, LedgerTotal: r.LedgerTotal, Reserved: r.Reserved}
	}
	return out, nil
}
