package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

// IdempotencyRecord is a stored Idempotency-Key. Status is 0 while the first
// request with the key is still in flight.
type IdempotencyRecord struct {
	RequestHash []byte         `db:"request_hash"`
	Status      sql.NullInt32  `db:"status"`
	Response    []byte         `db:"response"`
	RequestID   sql.NullString `db:"request_id"`
	Owned       bool           `db:"owned"`
}

// BeginIdempotent claims key for a request. When the key is new, or its
// owner has held it in flight longer than staleAfter (a crashed process),
// the caller owns it (Owned true) and must Complete or Release it. Otherwise
// the existing record is returned for the caller to compare and replay.
func (s *Store) BeginIdempotent(ctx context.Context, sc payments.Scope, key string, hash []byte, now time.Time, ttl, staleAfter time.Duration) (IdempotencyRecord, error) {
	// The conditional DO UPDATE takes over only a stale in-flight claim of
	// the same request, or an expired record; otherwise no row is returned.
	const q = `INSERT INTO idempotency_keys AS k (merchant_id, livemode, key, request_hash, locked_at, expires_at)
	VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (merchant_id, livemode, key) DO UPDATE SET request_hash = EXCLUDED.request_hash,
		status = NULL, response = NULL, request_id = NULL, locked_at = EXCLUDED.locked_at, expires_at = EXCLUDED.expires_at
		WHERE (k.status IS NULL AND k.locked_at < $7 AND k.request_hash = EXCLUDED.request_hash)
			OR k.expires_at < $5 -- expired but not pruned yet: a new key
	RETURNING request_hash, status, response, request_id, true AS owned`
	var r IdempotencyRecord
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, key, hash, now, now.Add(ttl), now.Add(-staleAfter))
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("claim idempotency key: %w", err)
	}
	return s.IdempotencyRecord(ctx, sc, key)
}

// IdempotencyRecord reads a key's record; a missing one (released, or pruned)
// comes back with Owned false and an empty hash.
func (s *Store) IdempotencyRecord(ctx context.Context, sc payments.Scope, key string) (IdempotencyRecord, error) {
	const q = `SELECT request_hash, status, response, request_id, false AS owned FROM idempotency_keys
	WHERE merchant_id = $1 AND livemode = $2 AND key = $3`
	var r IdempotencyRecord
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, key)
	if errors.Is(err, sql.ErrNoRows) {
		return IdempotencyRecord{}, nil
	}
	if err != nil {
		return r, fmt.Errorf("select idempotency key: %w", err)
	}
	return r, nil
}

// CompleteIdempotent stores the response of the owning request.
func (s *Store) CompleteIdempotent(ctx context.Context, sc payments.Scope, key string, status int, body []byte, requestID string) error {
	const q = `UPDATE idempotency_keys SET status = $4, response = $5, request_id = $6
	WHERE merchant_id = $1 AND livemode = $2 AND key = $3`
	if _, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, key, status, body, requestID); err != nil {
		return fmt.Errorf("store idempotent response: %w", err)
	}
	return nil
}

// ReleaseIdempotent forgets a key whose request failed on the server side, so
// that a retry with the same key runs again.
func (s *Store) ReleaseIdempotent(ctx context.Context, sc payments.Scope, key string) error {
	const q = `DELETE FROM idempotency_keys WHERE merchant_id = $1 AND livemode = $2 AND key = $3 AND status IS NULL`
	if _, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, key); err != nil {
		return fmt.Errorf("release idempotency key: %w", err)
	}
	return nil
}

// PruneIdempotency deletes expired keys.
func (s *Store) PruneIdempotency(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.q.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE expires_at < $1`, now)
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return res.RowsAffected()
}
