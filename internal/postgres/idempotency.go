package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
)

// An idempotent POST runs in one transaction, the request's: the key is
// claimed in it (BeginIdempotent), the handler's store calls join it
// (inTx as a savepoint, single statements through s.q), the response is
// written under the key in it (SaveIdempotent) and it commits once
// (EndRequest). A process killed at any instant therefore leaves either
// nothing — PostgreSQL rolls back the transaction of a dropped connection,
// and the retry runs afresh — or the change together with its stored
// response, which the retry replays. No claim is ever committed without its
// response, so no claim can go stale and nothing waits for one to.

// legacyClaimStale is how old a committed claim without a response must be
// before a request takes it over. Only versions before the request
// transaction committed such claims (they stored the response after the
// change's commit); one of them still in flight during a rolling deploy is
// waited for, one that died is taken over after this long, as they did.
const legacyClaimStale = 30 * time.Second

// BeginIdempotent opens the request's transaction and claims key in it for
// the request hashed hash. When the key is new (or expired), the claim is
// the caller's: ctx carries the transaction, in which every store method
// called with it runs, and the caller must SaveIdempotent and EndRequest
// (or EndRequest(false) alone). When the key is already stored, its record
// comes back and no transaction stays open.
//
// A request racing an in-flight one with the same key blocks on the key's
// advisory lock (see claim) until that one commits (then it gets its record) or rolls
// back (then the claim is its own). It waits at most wait, then gets
// payments.ErrKeyInFlight.
func (s *Store) BeginIdempotent(ctx context.Context, sc payments.Scope, key string, hash []byte, now time.Time, ttl, wait time.Duration) (context.Context, *payments.StoredResponse, error) {
	if err := s.acquireRequestSlot(ctx); err != nil {
		return ctx, nil, err
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		s.releaseRequestSlot()
		return ctx, nil, fmt.Errorf("begin: %w", err)
	}
	rt := &requestTx{tx: tx}
	rctx := context.WithValue(ctx, requestTxKey{}, rt)
	rec, err := s.claim(rctx, rt, sc, key, hash, now, ttl, wait)
	if err != nil || rec != nil {
		s.EndRequest(rctx, false) //nolint:errcheck // a rollback
		return ctx, rec, err
	}
	return rctx, nil, nil
}

// claim claims key in the request's transaction through idempotency_claim
// (migrations/0016_partitions.sql), one statement: it waits at most wait
// on the key's advisory lock while another request holds the key (then
// payments.ErrKeyInFlight), and returns either the claim (nil) or the
// key's stored record. The claim's time, its partition, is kept on rt for
// SaveIdempotent.
func (s *Store) claim(ctx context.Context, rt *requestTx, sc payments.Scope, key string, hash []byte, now time.Time, ttl, wait time.Duration) (*payments.StoredResponse, error) {
	const q = `SELECT claimed, request_hash, status, response, request_id
	FROM idempotency_claim($1, $2, $3, $4, $5, $6, $7, $8)`
	var (
		claimed   bool
		reqHash   []byte
		status    sql.NullInt32
		response  []byte
		requestID sql.NullString
	)
	now = now.Truncate(time.Microsecond) // as PostgreSQL keeps it: SaveIdempotent finds the row by it
	// Scanned into variables, not a tagged struct: sqlx maps a struct's
	// columns by reflection on every query. ctx carries rt: s.q runs it in
	// the request's transaction, prepared.
	err := s.q.QueryRowxContext(ctx, q, sc.MerchantID, sc.Live, key, hash, now, now.Add(ttl),
		now.Add(-legacyClaimStale), strconv.FormatInt(wait.Milliseconds(), 10)+"ms").
		Scan(&claimed, &reqHash, &status, &response, &requestID)
	var pqErr *pq.Error
	switch {
	case errors.As(err, &pqErr) && pqErr.Code == "55P03": // lock_not_available
		return nil, payments.ErrKeyInFlight
	case err != nil:
		return nil, fmt.Errorf("claim idempotency key: %w", err)
	case claimed:
		rt.keyCreated = now
		return nil, nil
	case !status.Valid:
		return nil, payments.ErrKeyInFlight // a legacy claim: ask for a retry
	}
	return &payments.StoredResponse{RequestHash: reqHash, Status: int(status.Int32), Body: response, RequestID: requestID.String}, nil
}

// SaveIdempotent writes the response of the request that claimed key, in
// the request's transaction (ctx's, from BeginIdempotent): it commits with
// the change it answers, or not at all.
func (s *Store) SaveIdempotent(ctx context.Context, sc payments.Scope, key string, status int, body []byte, requestID string) error {
	rt := requestTxOf(ctx)
	if rt == nil {
		return errors.New("save idempotent response: no request transaction")
	}
	const q = `UPDATE idempotency_keys SET status = $4, response = $5, request_id = $6
	WHERE merchant_id = $1 AND livemode = $2 AND key = $3 AND created_at = $7`
	// In the request's transaction (ctx's), prepared.
	if _, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, key, status, body, requestID, rt.keyCreated); err != nil {
		return fmt.Errorf("store idempotent response: %w", err)
	}
	return nil
}
