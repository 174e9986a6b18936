package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

type merchantRow struct {
	ID            string         `db:"id"`
	Name          string         `db:"name"`
	Email         sql.NullString `db:"email"`
	Plan          string         `db:"plan"`
	SuspendedAt   sql.NullTime   `db:"suspended_at"`
	UnsuspendedAt sql.NullTime   `db:"unsuspended_at"`
	CreatedAt     time.Time      `db:"created_at"`
}

func (r merchantRow) merchant() payments.Merchant {
	return payments.Merchant{
		ID: r.ID, Name: r.Name, Email: strPtr(r.Email), Plan: payments.Plan(r.Plan),
		SuspendedAt: timePtr(r.SuspendedAt), UnsuspendedAt: timePtr(r.UnsuspendedAt), Created: r.CreatedAt,
	}
}

// errNoMerchant is what the CLI sees for an unknown merchant id.
func errNoMerchant(id string) error {
	return payments.Invalid("merchant", "%q does not exist", id)
}

// CreateMerchant inserts a merchant.
func (s *Store) CreateMerchant(ctx context.Context, m payments.Merchant) error {
	const q = `INSERT INTO merchants (id, name, email, plan, created_at) VALUES ($1, $2, $3, $4, $5)`
	_, err := s.q.ExecContext(ctx, q, m.ID, m.Name, m.Email, m.Plan, m.Created)
	if err != nil && !writtenBefore(err, "merchants_pkey") { // rerun.go
		return fmt.Errorf("insert merchant: %w", err)
	}
	return nil
}

// Merchant returns a merchant by id.
func (s *Store) Merchant(ctx context.Context, id string) (payments.Merchant, error) {
	const q = `SELECT id, name, email, plan, suspended_at, unsuspended_at, created_at FROM merchants WHERE id = $1`
	var r merchantRow
	err := s.q.GetContext(ctx, &r, q, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Merchant{}, errNoMerchant(id)
	}
	if err != nil {
		return payments.Merchant{}, fmt.Errorf("select merchant: %w", err)
	}
	return r.merchant(), nil
}

// UnsuspendMerchant clears a suspension.
func (s *Store) UnsuspendMerchant(ctx context.Context, id string, now time.Time) (payments.Merchant, error) {
	const q = `UPDATE merchants SET suspended_at = NULL, unsuspended_at = $2 WHERE id = $1
	RETURNING id, name, email, plan, suspended_at, unsuspended_at, created_at`
	var r merchantRow
	err := s.q.GetContext(ctx, &r, q, id, now)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Merchant{}, errNoMerchant(id)
	}
	if err != nil {
		return payments.Merchant{}, fmt.Errorf("unsuspend merchant: %w", err)
	}
	return r.merchant(), nil
}

// lockMerchant takes the merchant's row lock: it serializes key creation and
// violation counting per merchant so that concurrent requests cannot both
// slip under a limit. NO KEY UPDATE, because it need not block the foreign
// key checks of rows that reference the merchant: inside an idempotent
// request the lock lasts until the request commits, and the sandbox's
// account upsert, on a connection of its own, must not wait for it.
func lockMerchant(ctx context.Context, tx *txn, id string) error {
	var got string
	err := tx.GetContext(ctx, &got, `SELECT id FROM merchants WHERE id = $1 FOR NO KEY UPDATE`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoMerchant(id)
	}
	if err != nil {
		return fmt.Errorf("lock merchant: %w", err)
	}
	return nil
}

// CreateKey inserts a key when check accepts the merchant's current counts.
func (s *Store) CreateKey(ctx context.Context, k payments.APIKey, hash []byte, check func(payments.KeyCounts) error) error {
	return s.inTx(ctx, func(tx *txn) error {
		if err := lockMerchant(ctx, tx, k.MerchantID); err != nil {
			return err
		}
		const count = `SELECT
			count(*) FILTER (WHERE created_at > $2::timestamptz - interval '10 minutes') AS last10,
			count(*) FILTER (WHERE created_at > $2::timestamptz - interval '1 hour') AS last_hour,
			count(*) FILTER (WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)) AS active
		FROM api_keys WHERE merchant_id = $1`
		var c struct {
			Last10   int `db:"last10"`
			LastHour int `db:"last_hour"`
			Active   int `db:"active"`
		}
		if err := tx.GetContext(ctx, &c, count, k.MerchantID, k.Created); err != nil {
			return fmt.Errorf("count keys: %w", err)
		}
		if err := check(payments.KeyCounts{Last10Min: c.Last10, LastHour: c.LastHour, Active: c.Active}); err != nil {
			return err
		}
		const ins = `INSERT INTO api_keys (id, merchant_id, livemode, key_hash, hint, expires_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`
		if _, err := tx.ExecContext(ctx, ins, k.ID, k.MerchantID, k.Live, hash, k.Hint, k.ExpiresAt, k.Created); err != nil {
			return fmt.Errorf("insert key: %w", err)
		}
		return nil
	})
}

type keyRow struct {
	ID          string       `db:"id"`
	MerchantID  string       `db:"merchant_id"`
	Live        bool         `db:"livemode"`
	Hint        string       `db:"hint"`
	ExpiresAt   sql.NullTime `db:"expires_at"`
	RevokedAt   sql.NullTime `db:"revoked_at"`
	CreatedAt   time.Time    `db:"created_at"`
	SuspendedAt sql.NullTime `db:"suspended_at"`
	OffsetUS    int64        `db:"offset_us"` // KeyByHash only: the scope's sandbox clock
	LastUsedAt  sql.NullTime `db:"last_used_at"`
}

func (r keyRow) key() payments.APIKey {
	return payments.APIKey{
		ID: r.ID, MerchantID: r.MerchantID, Live: r.Live, Hint: r.Hint,
		ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt), Created: r.CreatedAt,
		LastUsedAt: timePtr(r.LastUsedAt),
	}
}

// RevokeKey marks a key revoked (once; revoking again keeps the first time).
func (s *Store) RevokeKey(ctx context.Context, id string, now time.Time) (payments.APIKey, error) {
	const q = `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1
	RETURNING id, merchant_id, livemode, hint, expires_at, revoked_at, created_at`
	var r keyRow
	err := s.q.GetContext(ctx, &r, q, id, now)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.APIKey{}, payments.Invalid("id", "%q is not a known key", id)
	}
	if err != nil {
		return payments.APIKey{}, fmt.Errorf("revoke key: %w", err)
	}
	return r.key(), nil
}

// KeyByHash finds a key, its merchant's suspension and its scope's sandbox
// clock offset (in the same round trip: authentication is on every
// request); unknown → unauthorized.
func (s *Store) KeyByHash(ctx context.Context, hash []byte) (payments.KeyAuth, error) {
	const q = `SELECT k.id, k.merchant_id, k.livemode, k.hint, k.expires_at, k.revoked_at, k.created_at, k.last_used_at, m.suspended_at,
		coalesce(c.offset_us, 0) AS offset_us
	FROM api_keys k JOIN merchants m ON m.id = k.merchant_id
	LEFT JOIN sandbox_clocks c ON c.merchant_id = k.merchant_id AND c.livemode = k.livemode
	WHERE k.key_hash = $1`
	var r keyRow
	err := s.q.GetContext(ctx, &r, q, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.KeyAuth{}, payments.ErrUnauthorized()
	}
	if err != nil {
		return payments.KeyAuth{}, fmt.Errorf("select key: %w", err)
	}
	return payments.KeyAuth{Key: r.key(), MerchantSuspendedAt: timePtr(r.SuspendedAt), ClockOffset: time.Duration(r.OffsetUS) * time.Microsecond}, nil
}

// RecordViolation stores a violation and suspends the merchant at threshold.
func (s *Store) RecordViolation(ctx context.Context, sc payments.Scope, field string, now, since time.Time, threshold int) (bool, error) {
	var suspended bool
	err := s.inTx(ctx, func(tx *txn) error {
		if err := lockMerchant(ctx, tx, sc.MerchantID); err != nil {
			return err
		}
		const ins = `INSERT INTO content_violations (merchant_id, livemode, field, created_at) VALUES ($1, $2, $3, $4)`
		if _, err := tx.ExecContext(ctx, ins, sc.MerchantID, sc.Live, field, now); err != nil {
			return fmt.Errorf("insert violation: %w", err)
		}
		// Violations count across both modes: suspension is of the merchant.
		const count = `SELECT count(*) FROM content_violations v JOIN merchants m ON m.id = v.merchant_id
		WHERE v.merchant_id = $1 AND v.created_at > $2 AND (m.unsuspended_at IS NULL OR v.created_at > m.unsuspended_at)`
		var n int
		if err := tx.GetContext(ctx, &n, count, sc.MerchantID, since); err != nil {
			return fmt.Errorf("count violations: %w", err)
		}
		if n < threshold {
			return nil
		}
		suspended = true
		const upd = `UPDATE merchants SET suspended_at = COALESCE(suspended_at, $2) WHERE id = $1`
		if _, err := tx.ExecContext(ctx, upd, sc.MerchantID, now); err != nil {
			return fmt.Errorf("suspend merchant: %w", err)
		}
		return nil
	})
	return suspended, err
}

// PruneViolations deletes violations older than before.
func (s *Store) PruneViolations(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.q.ExecContext(ctx, `DELETE FROM content_violations WHERE created_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("prune violations: %w", err)
	}
	return res.RowsAffected()
}
