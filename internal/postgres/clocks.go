package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

// ClockOffset returns how far the scope's sandbox clock is ahead of real
// time: zero for a clock never moved.
func (s *Store) ClockOffset(ctx context.Context, sc payments.Scope) (time.Duration, error) {
	const q = `SELECT offset_us FROM sandbox_clocks WHERE merchant_id = $1 AND livemode = $2`
	var us int64
	err := s.q.GetContext(ctx, &us, q, sc.MerchantID, sc.Live)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("select sandbox clock: %w", err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// AdvanceClock moves the scope's sandbox clock forward by by (a clock never
// goes back: by must be positive) and returns its new offset from real
// time. Processes see the move within their clock cache's TTL (1 s); the
// next sweeps compare the scope's rows against the moved clock.
func (s *Store) AdvanceClock(ctx context.Context, sc payments.Scope, by time.Duration) (time.Duration, error) {
	if by <= 0 {
		return 0, payments.Invalid("by", "must be positive")
	}
	const q = `INSERT INTO sandbox_clocks (merchant_id, livemode, offset_us) VALUES ($1, $2, $3)
	ON CONFLICT (merchant_id, livemode) DO UPDATE
	SET offset_us = sandbox_clocks.offset_us + EXCLUDED.offset_us, updated_at = now()
	RETURNING offset_us`
	// In a transaction: alone, a lost reply would run the statement again
	// and move the clock twice (rerun.go); in one, it is an error.
	var us int64
	err := s.inTx(ctx, func(tx *txn) error {
		if err := tx.GetContext(ctx, &us, q, sc.MerchantID, sc.Live, by.Microseconds()); err != nil {
			return fmt.Errorf("advance sandbox clock: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(us) * time.Microsecond, nil
}

// ClockTally counts the scope's rows that advance-clock reports on, in
// one statement (one snapshot). Each count reads the scope's rows through
// its page index; renewal charges through the scope's subscriptions, as
// subscription_charges has no index by scope. A sandbox scope's history
// is small; this runs twice per advance-clock, never on a request.
func (s *Store) ClockTally(ctx context.Context, sc payments.Scope) (payments.ClockTally, error) {
	const q = `SELECT
		(SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1 AND livemode = $2 AND status = 'expired'),
		(SELECT count(*) FROM disputes WHERE merchant_id = $1 AND livemode = $2 AND status = 'lost'),
		r.renewals, r.attempts,
		(SELECT count(*) FROM subscriptions WHERE merchant_id = $1 AND livemode = $2 AND status = 'canceled')
	FROM (SELECT count(*) FILTER (WHERE ch.status = 'succeeded') AS renewals, coalesce(sum(ch.attempts), 0) AS attempts
		FROM subscriptions sub JOIN subscription_charges ch ON ch.subscription_id = sub.id
		WHERE sub.merchant_id = $1 AND sub.livemode = $2 AND ch.kind = 'renewal') r`
	var t payments.ClockTally
	err := s.q.QueryRowxContext(ctx, q, sc.MerchantID, sc.Live).
		Scan(&t.ExpiredSessions, &t.LostDisputes, &t.Renewals, &t.RenewalAttempts, &t.EndedSubscriptions)
	if err != nil {
		return t, fmt.Errorf("tally the scope for advance-clock: %w", err)
	}
	return t, nil
}

// dueRows are a sweep's two statements (ExpireSessions says why two): due
// finds the rows due at base time $1, onMovedClock those due only on a
// scope's moved sandbox clock; both take the batch's room as $2 and read
// each row's offset_us. what names the rows in errors.
type dueRows struct {
	what, due, onMovedClock string
}

// selectDue reads up to limit rows of q in the sweep's transaction: those
// due at base time first, then, when the batch has room, those due only on
// a moved clock.
func selectDue[R any](ctx context.Context, tx *txn, q dueRows, now time.Time, limit int) ([]R, error) {
	var rows []R
	if err := tx.SelectContext(ctx, &rows, q.due, now, limit); err != nil {
		return nil, fmt.Errorf("select %s: %w", q.what, err)
	}
	if len(rows) < limit {
		var more []R
		if err := tx.SelectContext(ctx, &more, q.onMovedClock, now, limit-len(rows)); err != nil {
			return nil, fmt.Errorf("select %s on sandbox clocks: %w", q.what, err)
		}
		rows = append(rows, more...)
	}
	return rows, nil
}

// onClock is base time now on a scope's clock offsetUS ahead of it.
func onClock(now time.Time, offsetUS int64) time.Time {
	return now.Add(time.Duration(offsetUS) * time.Microsecond)
}
