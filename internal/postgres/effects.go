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

// applyEffects writes a change's effects in its transaction: ledger entries,
// processor events, merchant events with their deliveries, the jobs to
// enqueue after commit and, last, the balance the entries and the
// reservation change move.
func applyEffects(ctx context.Context, tx *txn, sc payments.Scope, eff payments.Effects) error {
	moves := map[string]int64{} // currency → change of ledger_total
	for _, e := range eff.Ledger {
		// A payment's credit is written unfolded and moves no balance row
		// now (see foldCredits); the same statement only makes sure the
		// row exists, which ON CONFLICT DO NOTHING does without locking
		// it. Every other entry moves the balance at once, below.
		const unfolded = `WITH e AS (
			INSERT INTO ledger_entries (id, merchant_id, livemode, currency, type, amount, fee, source_id, folded, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, false, $9)
		)
		INSERT INTO balances (merchant_id, livemode, currency) VALUES ($2, $3, $4) ON CONFLICT DO NOTHING`
		const folded = `INSERT INTO ledger_entries (id, merchant_id, livemode, currency, type, amount, fee, source_id, folded, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, true, $9)`
		q := folded
		if e.Type == payments.LedgerPayment {
			q = unfolded
		} else {
			moves[e.Currency] += e.Amount
		}
		if _, err := tx.ExecContext(ctx, q, e.ID, sc.MerchantID, sc.Live, e.Currency, e.Type, e.Amount, e.Fee, e.SourceID, e.Created); err != nil {
			return fmt.Errorf("insert ledger entry %s of %s: %w", e.Type, e.SourceID, err)
		}
	}
	if pe := eff.Applied; pe != nil {
		// A new event (the processor's page reported it) is inserted
		// applied; a stored one is marked. No row back: it was applied
		// already, and the change must not happen twice. An ExternalID
		// received before breaks its unique index the same way.
		const q = `INSERT INTO processor_events (id, merchant_id, livemode, type, payment_intent_id, data, external_id, processed_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8)
		ON CONFLICT (id) DO UPDATE SET processed_at = now()
		WHERE processor_events.processed_at IS NULL
			AND processor_events.merchant_id = EXCLUDED.merchant_id AND processor_events.livemode = EXCLUDED.livemode
		RETURNING id`
		var id string
		err := tx.GetContext(ctx, &id, q, pe.ID, sc.MerchantID, sc.Live, pe.Type, nullIfEmpty(pe.PaymentIntentID), jsonb(pe.Data),
			nullIfEmpty(pe.ExternalID), pe.Created)
		if errors.Is(err, sql.ErrNoRows) || isUniqueViolation(err, "processor_events_external_id_key") {
			return payments.ErrEventApplied
		}
		if err != nil {
			return fmt.Errorf("record processor event applied: %w", err)
		}
	}
	for _, pe := range eff.ProcessorEvents {
		const q = `INSERT INTO processor_events (id, merchant_id, livemode, type, payment_intent_id, data, external_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
		if _, err := tx.ExecContext(ctx, q, pe.ID, sc.MerchantID, sc.Live, pe.Type, nullIfEmpty(pe.PaymentIntentID), jsonb(pe.Data),
			nullIfEmpty(pe.ExternalID), pe.Created); err != nil {
			return fmt.Errorf("insert processor event: %w", err)
		}
		tx.jobs = append(tx.jobs, payments.Job{Kind: payments.JobProcessorEvent, ID: pe.ID, MerchantID: sc.MerchantID, Live: sc.Live})
	}
	tx.jobs = append(tx.jobs, eff.Jobs...)
	if err := insertEvents(ctx, tx, sc, eff.Events); err != nil {
		return err
	}
	if eff.Reserve != 0 {
		if _, ok := moves[eff.ReserveCurrency]; !ok {
			moves[eff.ReserveCurrency] = 0
		}
	}
	for cur, delta := range moves {
		reserve := int64(0)
		if cur == eff.ReserveCurrency {
			reserve = eff.Reserve
		}
		// Last, so the row's lock is held only until commit. The changes go
		// into DO UPDATE as
		// parameters, not through EXCLUDED: PostgreSQL checks the proposed
		// row's CHECKs before it resolves the conflict, and a release (a
		// negative change) there breaks reserved >= 0.
		const q = `INSERT INTO balances (merchant_id, livemode, currency, ledger_total, reserved, updated_at)
		VALUES ($1, $2, $3, $4, GREATEST($5::bigint, 0), now())
		ON CONFLICT (merchant_id, livemode, currency) DO UPDATE SET
			ledger_total = balances.ledger_total + $4::bigint,
			reserved = balances.reserved + $5::bigint, updated_at = now()`
		if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, cur, delta, reserve); err != nil {
			return fmt.Errorf("update balance: %w", err)
		}
	}
	return nil
}

// foldCredits is a CTE, "folded", that marks the scope's unfolded credits
// in currency ($1, $2, $3) folded and yields their sum as "credit", for a
// statement that adds it to the balance's ledger_total in the same breath.
// Two folds never count an entry twice: the second waits on the first's row
// locks and then no longer finds the entries unfolded.
const foldCredits = `folded AS (
		UPDATE ledger_entries SET folded = true
		WHERE merchant_id = $1 AND livemode = $2 AND currency = $3 AND NOT folded
		RETURNING amount
	), credit AS (SELECT coalesce(sum(amount), 0) AS credit FROM folded)`

// The stranded-work queries of tasks.StrandedStore, one per job kind: rows
// whose task may have vanished (Redis lost its data, or a process died
// between commit and enqueue), waiting since before, oldest first, at most
// limit. The relay (tasks.Kinds) sets each job's kind.
//
// before is base time: rows are dated on their scope's clock, so each is
// compared with before plus its scope's sandbox offset (onItsClock). The
// pending sets are work in flight, and without sandbox clocks the added
// bound is before itself: the indexes are used as they were.

// StrandedDeliveries returns pending deliveries overdue since before but
// for an event's first attempts (StrandedEvents finds those).
func (s *Store) StrandedDeliveries(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT id, merchant_id, livemode FROM webhook_deliveries t
	WHERE status = 'pending' AND NOT ` + firstAttempt + ` AND ` + onItsClock("next_attempt_at") + ` ORDER BY next_attempt_at LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}

// StrandedEvents returns the events whose first attempts are overdue since
// before: the ids of the events with deliveries written with them still
// unattempted. Their task (payments.JobDeliverEvent) has the event's id, so
// re-enqueueing one whose task is only late (a backlog) is a no-op instead
// of a second send.
func (s *Store) StrandedEvents(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT event_id AS id, merchant_id, livemode FROM webhook_deliveries t
	WHERE status = 'pending' AND ` + firstAttempt + ` AND ` + onItsClock("next_attempt_at") + `
	GROUP BY event_id, merchant_id, livemode ORDER BY min(next_attempt_at) LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}

// firstAttempt is a delivery (aliased t) not attempted yet that was written
// with its event: its event's task makes the attempt (FirstDeliveries).
const firstAttempt = `(t.attempts = 0 AND t.created_at = t.event_created_at)`

// StrandedRefunds returns refunds pending since before.
func (s *Store) StrandedRefunds(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT id, merchant_id, livemode FROM refunds t
	WHERE status = 'pending' AND ` + onItsClock("created_at") + ` ORDER BY created_at LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}

// StrandedProcessorEvents returns processor events unapplied since before.
func (s *Store) StrandedProcessorEvents(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT id, merchant_id, livemode FROM processor_events t
	WHERE processed_at IS NULL AND ` + onItsClock("created_at") + ` ORDER BY created_at LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}

// StrandedEvidence returns dispute evidence submitted before and not yet
// sent to the processor.
func (s *Store) StrandedEvidence(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT id, merchant_id, livemode FROM disputes t
	WHERE submitted_at IS NOT NULL AND evidence_sent_at IS NULL AND ` + onItsClock("submitted_at") + ` ORDER BY submitted_at LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}

// stranded runs one stranded-work query: (id, merchant_id, livemode) rows.
func (s *Store) stranded(ctx context.Context, q string, before time.Time, limit int) ([]payments.Job, error) {
	var rows []struct {
		ID         string `db:"id"`
		MerchantID string `db:"merchant_id"`
		Live       bool   `db:"livemode"`
	}
	if err := s.q.SelectContext(ctx, &rows, q, before, limit); err != nil {
		return nil, fmt.Errorf("select stranded work: %w", err)
	}
	out := make([]payments.Job, 0, len(rows))
	for _, r := range rows {
		out = append(out, payments.Job{ID: r.ID, MerchantID: r.MerchantID, Live: r.Live})
	}
	return out, nil
}

// onItsClock is the condition "col < $1 on the row's own clock", for a
// table aliased t: $1 (base time) plus the offset of t's scope's sandbox
// clock. Its first half bounds the index scan by the furthest moved clock
// (none: $1 itself), the second is the row's own comparison.
func onItsClock(col string) string {
	return `t.` + col + ` < $1::timestamptz + (SELECT coalesce(max(offset_us), 0) FROM sandbox_clocks) * interval '1 microsecond'
		AND t.` + col + ` < $1::timestamptz + coalesce((SELECT c.offset_us FROM sandbox_clocks c
			WHERE c.merchant_id = t.merchant_id AND c.livemode = t.livemode), 0) * interval '1 microsecond'`
}

// isUniqueViolation reports whether err broke the unique constraint named.
func isUniqueViolation(err error, constraint string) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "23505" && pqErr.Constraint == constraint
}
