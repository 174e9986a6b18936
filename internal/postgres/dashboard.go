package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

type userRow struct {
	ID           string    `db:"id"`
	MerchantID   string    `db:"merchant_id"`
	Email        string    `db:"email"`
	Role         string    `db:"role"`
	PasswordHash []byte    `db:"password_hash"`
	CreatedAt    time.Time `db:"created_at"`
}

func (r userRow) user() payments.User {
	return payments.User{ID: r.ID, MerchantID: r.MerchantID, Email: r.Email, Role: payments.Role(r.Role), Created: r.CreatedAt}
}

// CreateUser inserts a dashboard user of an existing merchant.
func (s *Store) CreateUser(ctx context.Context, u payments.User, passwordHash []byte) error {
	const q = `INSERT INTO dashboard_users (id, merchant_id, email, role, password_hash, created_at)
	SELECT $1, m.id, $3, $4, $5, $6 FROM merchants m WHERE m.id = $2`
	res, err := s.q.ExecContext(ctx, q, u.ID, u.MerchantID, u.Email, u.Role, string(passwordHash), u.Created)
	// The id's key is met before the email's: PostgreSQL checks a row's
	// indexes in the order they were made.
	if writtenBefore(err, "dashboard_users_pkey") { // rerun.go
		return nil
	}
	if isUniqueViolation(err, "dashboard_users_email_key") {
		return payments.Invalid("email", "is already a dashboard user's")
	}
	if err != nil {
		return fmt.Errorf("insert dashboard user: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNoMerchant(u.MerchantID)
	}
	return nil
}

// UserByEmail returns a user and its password hash.
func (s *Store) UserByEmail(ctx context.Context, email string) (payments.User, []byte, error) {
	const q = `SELECT id, merchant_id, email, role, password_hash, created_at FROM dashboard_users WHERE email = $1`
	var r userRow
	err := s.q.GetContext(ctx, &r, q, email)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.User{}, nil, payments.ErrBadCredentials
	}
	if err != nil {
		return payments.User{}, nil, fmt.Errorf("select dashboard user: %w", err)
	}
	return r.user(), r.PasswordHash, nil
}

// CreateDashboardSession stores a session under its token's hash and, in
// the same statement, deletes the user's expired ones (so the table holds
// live sessions and a bounded tail, with no sweep of its own).
func (s *Store) CreateDashboardSession(ctx context.Context, tokenHash []byte, ds payments.DashboardSession, now time.Time) error {
	const q = `WITH gone AS (DELETE FROM dashboard_sessions WHERE user_id = $2 AND expires_at <= $4)
	INSERT INTO dashboard_sessions (token_hash, user_id, csrf_token, created_at, expires_at) VALUES ($1, $2, $3, $4, $5)`
	_, err := s.q.ExecContext(ctx, q, tokenHash, ds.User.ID, ds.CSRFToken, now, ds.ExpiresAt)
	if err != nil && !writtenBefore(err, "dashboard_sessions_pkey") { // rerun.go: the token is random
		return fmt.Errorf("insert dashboard session: %w", err)
	}
	return nil
}

// DashboardSession returns the unexpired session of a token hash with its user.
func (s *Store) DashboardSession(ctx context.Context, tokenHash []byte, now time.Time) (payments.DashboardSession, error) {
	const q = `SELECT u.id, u.merchant_id, u.email, u.role, u.created_at, s.csrf_token, s.expires_at
	FROM dashboard_sessions s JOIN dashboard_users u ON u.id = s.user_id
	WHERE s.token_hash = $1 AND s.expires_at > $2`
	var r struct {
		userRow
		CSRFToken string    `db:"csrf_token"`
		ExpiresAt time.Time `db:"expires_at"`
	}
	err := s.q.GetContext(ctx, &r, q, tokenHash, now)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.DashboardSession{}, payments.ErrNoSession
	}
	if err != nil {
		return payments.DashboardSession{}, fmt.Errorf("select dashboard session: %w", err)
	}
	return payments.DashboardSession{User: r.user(), CSRFToken: r.CSRFToken, ExpiresAt: r.ExpiresAt}, nil
}

// DeleteDashboardSession ends a session (signing out twice is no error).
func (s *Store) DeleteDashboardSession(ctx context.Context, tokenHash []byte) error {
	if _, err := s.q.ExecContext(ctx, `DELETE FROM dashboard_sessions WHERE token_hash = $1`, tokenHash); err != nil {
		return fmt.Errorf("delete dashboard session: %w", err)
	}
	return nil
}

const keyCols = `id, merchant_id, livemode, hint, expires_at, revoked_at, created_at, last_used_at`

// Keys returns the merchant's keys of one mode, newest first (at most a
// few dozen: 25 active, and creation is rate limited).
func (s *Store) Keys(ctx context.Context, merchantID string, live bool) ([]payments.APIKey, error) {
	const q = `SELECT ` + keyCols + ` FROM api_keys WHERE merchant_id = $1 AND livemode = $2
	ORDER BY created_at DESC, id DESC LIMIT 500`
	var rows []keyRow
	if err := s.q.SelectContext(ctx, &rows, q, merchantID, live); err != nil {
		return nil, fmt.Errorf("select keys: %w", err)
	}
	out := make([]payments.APIKey, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.key())
	}
	return out, nil
}

// RevokeMerchantKey revokes one of the merchant's keys (once; again keeps
// the first time).
func (s *Store) RevokeMerchantKey(ctx context.Context, merchantID, id string, now time.Time) (payments.APIKey, error) {
	const q = `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $3) WHERE merchant_id = $1 AND id = $2
	RETURNING ` + keyCols
	var r keyRow
	err := s.q.GetContext(ctx, &r, q, merchantID, id, now)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.APIKey{}, payments.Invalid("id", "%q is not one of your keys", id)
	}
	if err != nil {
		return payments.APIKey{}, fmt.Errorf("revoke key: %w", err)
	}
	return r.key(), nil
}

// TouchKey sets a key's last use, never backwards.
func (s *Store) TouchKey(ctx context.Context, id string, now time.Time) error {
	const q = `UPDATE api_keys SET last_used_at = $2 WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < $2)`
	if _, err := s.q.ExecContext(ctx, q, id, now); err != nil {
		return fmt.Errorf("touch key: %w", err)
	}
	return nil
}

// Payment reads one of the scope's payments.
func (s *Store) Payment(ctx context.Context, sc payments.Scope, id string) (payments.PaymentIntent, error) {
	return intent(ctx, &s.q, sc, id, "")
}

// Refunds returns a page of the scope's refunds, newest first.
func (s *Store) Refunds(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.Refund], error) {
	const first = `SELECT ` + refundCols + ` FROM refunds WHERE merchant_id = $1 AND livemode = $2
		ORDER BY created_at DESC, id DESC`
	const after = `SELECT ` + refundCols + ` FROM refunds WHERE merchant_id = $1 AND livemode = $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC`
	return keysetPage(ctx, s, sc, lp, "refunds", first, after, func(r refundRow) (payments.Refund, error) { return r.refund(), nil })
}

// PaymentRefunds returns the refunds of one of the scope's payments.
func (s *Store) PaymentRefunds(ctx context.Context, sc payments.Scope, paymentID string) ([]payments.Refund, error) {
	const q = `SELECT ` + refundCols + ` FROM refunds WHERE merchant_id = $1 AND livemode = $2 AND payment_intent_id = $3
	ORDER BY created_at DESC, id DESC LIMIT 200`
	var rows []refundRow
	if err := s.q.SelectContext(ctx, &rows, q, sc.MerchantID, sc.Live, paymentID); err != nil {
		return nil, fmt.Errorf("select refunds of %s: %w", paymentID, err)
	}
	out := make([]payments.Refund, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.refund())
	}
	return out, nil
}

// ObjectEvents returns the scope's newest events whose object is id, or
// whose object belongs to the payment id, on the events_object and
// events_payment indexes.
func (s *Store) ObjectEvents(ctx context.Context, sc payments.Scope, id string, limit int) ([]payments.StoredEvent, error) {
	const q = `SELECT e.id, e.type, ` + eventPayload + ` AS payload FROM (
		(SELECT * FROM events WHERE merchant_id = $1 AND livemode = $2 AND data ->> 'id' = $3
			ORDER BY created_at DESC LIMIT $4)
		UNION
		(SELECT * FROM events WHERE merchant_id = $1 AND livemode = $2 AND data ? 'payment_intent' AND data ->> 'payment_intent' = $3
			ORDER BY created_at DESC LIMIT $4)
	) e ORDER BY e.created_at DESC, e.seq DESC LIMIT $4`
	var out []payments.StoredEvent
	if err := s.q.SelectContext(ctx, &out, q, sc.MerchantID, sc.Live, id, limit); err != nil {
		return nil, fmt.Errorf("select events of %s: %w", id, err)
	}
	return out, nil
}

// DailyVolume sums the gross amount (the ledger's net amount plus the fee
// it kept) of the scope's payments per UTC day and currency since since,
// on ledger_entries_scope.
func (s *Store) DailyVolume(ctx context.Context, sc payments.Scope, since time.Time) ([]payments.DayVolume, error) {
	const q = `SELECT date_trunc('day', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS day, currency,
		sum(amount + fee)::bigint AS amount, count(*) AS count
	FROM ledger_entries WHERE merchant_id = $1 AND livemode = $2 AND type = 'payment' AND created_at >= $3
	GROUP BY 1, 2 ORDER BY 2, 1`
	var out []payments.DayVolume
	if err := s.q.SelectContext(ctx, &out, q, sc.MerchantID, sc.Live, since); err != nil {
		return nil, fmt.Errorf("select daily volume: %w", err)
	}
	return out, nil
}
