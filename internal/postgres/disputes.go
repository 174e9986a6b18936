package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
)

const disputeCols = `merchant_id, livemode, id, payment_intent_id, amount, currency, reason, status, evidence,
	evidence_due_by, submitted_at, evidence_sent_at, closed_at, created_at`

type disputeRow struct {
	MerchantID      string       `db:"merchant_id"`
	Live            bool         `db:"livemode"`
	ID              string       `db:"id"`
	PaymentIntentID string       `db:"payment_intent_id"`
	Amount          int64        `db:"amount"`
	Currency        string       `db:"currency"`
	Reason          string       `db:"reason"`
	Status          string       `db:"status"`
	Evidence        []byte       `db:"evidence"`
	EvidenceDueBy   sql.NullTime `db:"evidence_due_by"`
	SubmittedAt     sql.NullTime `db:"submitted_at"`
	EvidenceSentAt  sql.NullTime `db:"evidence_sent_at"`
	ClosedAt        sql.NullTime `db:"closed_at"`
	CreatedAt       time.Time    `db:"created_at"`
	OffsetUS        int64        `db:"offset_us"` // only read by the overdue sweep: its scope's sandbox clock
}

func (r disputeRow) dispute() (payments.Dispute, error) {
	d := payments.Dispute{
		ID: r.ID, Live: r.Live, PaymentIntentID: r.PaymentIntentID, Amount: r.Amount, Currency: r.Currency,
		Reason: r.Reason, Status: r.Status, EvidenceDueBy: timePtr(r.EvidenceDueBy), SubmittedAt: timePtr(r.SubmittedAt),
		EvidenceSentAt: timePtr(r.EvidenceSentAt), ClosedAt: timePtr(r.ClosedAt), Created: r.CreatedAt,
	}
	if err := json.Unmarshal(r.Evidence, &d.Evidence); err != nil {
		return d, fmt.Errorf("decode evidence of %s: %w", r.ID, err)
	}
	return d, nil
}

func dispute(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, lock string) (payments.Dispute, error) {
	var r disputeRow
	err := sqlx.GetContext(ctx, q, &r, `SELECT `+disputeCols+` FROM disputes WHERE merchant_id = $1 AND livemode = $2 AND id = $3`+lock,
		sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Dispute{}, payments.NotFoundOf("dispute", id)
	}
	if err != nil {
		return payments.Dispute{}, fmt.Errorf("select dispute: %w", err)
	}
	return r.dispute()
}

func saveDispute(ctx context.Context, tx *txn, sc payments.Scope, d payments.Dispute) error {
	const q = `UPDATE disputes SET status = $4, evidence = $5, submitted_at = $6, closed_at = $7
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, d.ID, d.Status, jsonb(nonNilMap(d.Evidence)), d.SubmittedAt, d.ClosedAt); err != nil {
		return fmt.Errorf("update dispute: %w", err)
	}
	return nil
}

// Dispute reads one of the scope's disputes.
func (s *Store) Dispute(ctx context.Context, sc payments.Scope, id string) (payments.Dispute, error) {
	return dispute(ctx, &s.q, sc, id, "")
}

// Disputes returns a page of the scope's disputes, newest first.
func (s *Store) Disputes(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.Dispute], error) {
	const first = `SELECT ` + disputeCols + ` FROM disputes WHERE merchant_id = $1 AND livemode = $2
		ORDER BY created_at DESC, id DESC`
	const after = `SELECT ` + disputeCols + ` FROM disputes WHERE merchant_id = $1 AND livemode = $2
		AND (created_at, id) < ($3, $4) ORDER BY created_at DESC, id DESC`
	return keysetPage(ctx, s, sc, lp, "disputes", first, after, disputeRow.dispute)
}

// UpdateDispute locks a dispute, runs fn and saves it with fn's effects.
func (s *Store) UpdateDispute(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Dispute) (payments.Effects, error)) (payments.Dispute, error) {
	var d payments.Dispute
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if d, err = dispute(ctx, tx, sc, id, " FOR UPDATE"); err != nil {
			return err
		}
		eff, err := fn(&d)
		if err != nil {
			return err
		}
		if err := saveDispute(ctx, tx, sc, d); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return d, err
}

// RecordEvidenceSent locks the dispute, marks its evidence as sent to the
// processor, runs fn (which applies the processor's decision) and saves it
// with fn's effects.
func (s *Store) RecordEvidenceSent(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Dispute) (payments.Effects, error)) (payments.Dispute, error) {
	var d payments.Dispute
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if d, err = dispute(ctx, tx, sc, id, " FOR UPDATE"); err != nil {
			return err
		}
		eff, err := fn(&d)
		if err != nil {
			return err
		}
		if err := saveDispute(ctx, tx, sc, d); err != nil {
			return err
		}
		const q = `UPDATE disputes SET evidence_sent_at = coalesce(evidence_sent_at, now())
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, id); err != nil {
			return fmt.Errorf("mark evidence sent: %w", err)
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return d, err
}

// ProcessorEvent reads a stored processor event and whether it was
// applied. An event that is not the scope's (or does not exist) reads as
// applied: there is nothing to do.
func (s *Store) ProcessorEvent(ctx context.Context, sc payments.Scope, id string) (payments.ProcessorEvent, bool, error) {
	var r struct {
		ID         string         `db:"id"`
		ExternalID sql.NullString `db:"external_id"`
		Type       string         `db:"type"`
		PaymentID  sql.NullString `db:"payment_intent_id"`
		Data       []byte         `db:"data"`
		Applied    bool           `db:"applied"`
		CreatedAt  time.Time      `db:"created_at"`
	}
	const q = `SELECT id, external_id, type, payment_intent_id, data, processed_at IS NOT NULL AS applied, created_at
	FROM processor_events WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.ProcessorEvent{}, true, nil
	}
	if err != nil {
		return payments.ProcessorEvent{}, false, fmt.Errorf("select processor event: %w", err)
	}
	ev := payments.ProcessorEvent{ID: r.ID, ExternalID: r.ExternalID.String, Type: r.Type, PaymentIntentID: r.PaymentID.String, Created: r.CreatedAt}
	if err := json.Unmarshal(r.Data, &ev.Data); err != nil {
		return ev, false, fmt.Errorf("decode processor event %s: %w", id, err)
	}
	return ev, r.Applied, nil
}

// OpenDispute locks the payment, runs fn, inserts the dispute fn opens,
// saves the payment and writes fn's effects (which mark the processor event
// applied), in one transaction.
func (s *Store) OpenDispute(ctx context.Context, sc payments.Scope, paymentID string, fn func(*payments.PaymentIntent) (*payments.Dispute, payments.Effects)) error {
	return s.inTx(ctx, func(tx *txn) error {
		pi, err := intent(ctx, tx, sc, paymentID, " FOR UPDATE")
		if err != nil {
			return err
		}
		d, eff := fn(&pi)
		if d != nil {
			const ins = `INSERT INTO disputes (merchant_id, livemode, id, payment_intent_id, amount, currency, reason, status,
				evidence, evidence_due_by, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '{}', $9, $10)`
			if _, err := tx.ExecContext(ctx, ins, sc.MerchantID, sc.Live, d.ID, d.PaymentIntentID, d.Amount, d.Currency,
				d.Reason, d.Status, d.EvidenceDueBy, d.Created); err != nil {
				return fmt.Errorf("insert dispute: %w", err)
			}
			if err := updateIntent(ctx, tx, sc, pi); err != nil {
				return err
			}
		}
		return applyEffects(ctx, tx, sc, eff)
	})
}

// MarkProcessorEvent marks a stored processor event applied.
func (s *Store) MarkProcessorEvent(ctx context.Context, sc payments.Scope, ev payments.ProcessorEvent) error {
	return s.inTx(ctx, func(tx *txn) error {
		return applyEffects(ctx, tx, sc, payments.Effects{Applied: &ev})
	})
}

// CloseOverdueDisputes runs fn on disputes still needing a response whose
// evidence was due before their scope's time (now, the clock's base, plus
// the scope's sandbox offset), with that time, and saves them with fn's
// effects. SKIP LOCKED passes over a dispute whose evidence a merchant is
// posting right now. Two queries for the index's sake, as ExpireSessions:
// disputes overdue at base time, then those overdue only on a moved clock.
func (s *Store) CloseOverdueDisputes(ctx context.Context, now time.Time, limit int, fn func(*payments.Dispute, time.Time) (payments.Effects, error)) (int, error) {
	overdue := dueRows{what: "overdue disputes", due: `SELECT ` + disputeCols + `, coalesce((SELECT c.offset_us FROM sandbox_clocks c
		WHERE c.merchant_id = disputes.merchant_id AND c.livemode = disputes.livemode), 0) AS offset_us
	FROM disputes WHERE status = 'needs_response' AND evidence_due_by < $1
	ORDER BY evidence_due_by LIMIT $2 FOR UPDATE SKIP LOCKED`,
		onMovedClock: `SELECT d.*, c.offset_us FROM sandbox_clocks c CROSS JOIN LATERAL (
		SELECT ` + disputeCols + ` FROM disputes
		WHERE merchant_id = c.merchant_id AND livemode = c.livemode AND status = 'needs_response'
			AND evidence_due_by >= $1::timestamptz AND evidence_due_by < $1::timestamptz + c.offset_us * interval '1 microsecond'
		ORDER BY evidence_due_by LIMIT $2 FOR UPDATE SKIP LOCKED) d
	WHERE c.offset_us > 0 LIMIT $2`}
	n := 0
	err := s.inTx(ctx, func(tx *txn) error {
		rows, err := selectDue[disputeRow](ctx, tx, overdue, now, limit)
		if err != nil {
			return err
		}
		for _, r := range rows {
			d, err := r.dispute()
			if err != nil {
				return err
			}
			sc := payments.Scope{MerchantID: r.MerchantID, Live: r.Live}
			eff, err := fn(&d, onClock(now, r.OffsetUS))
			if err != nil {
				return err
			}
			if err := saveDispute(ctx, tx, sc, d); err != nil {
				return err
			}
			if err := applyEffects(ctx, tx, sc, eff); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// ReceiveProcessorEvent stores an inbound processor event, unapplied, with
// its job; an ExternalID stored before makes it a no-op (false).
func (s *Store) ReceiveProcessorEvent(ctx context.Context, sc payments.Scope, ev payments.ProcessorEvent) (bool, error) {
	stored := false
	err := s.inTx(ctx, func(tx *txn) error {
		const q = `INSERT INTO processor_events (id, merchant_id, livemode, type, payment_intent_id, data, external_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (external_id) DO NOTHING
		RETURNING id`
		var id string
		err := tx.GetContext(ctx, &id, q, ev.ID, sc.MerchantID, sc.Live, ev.Type, nullIfEmpty(ev.PaymentIntentID), jsonb(ev.Data),
			ev.ExternalID, ev.Created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // received before
		}
		if err != nil {
			return fmt.Errorf("insert received processor event: %w", err)
		}
		stored = true
		tx.jobs = append(tx.jobs, payments.Job{Kind: payments.JobProcessorEvent, ID: ev.ID, MerchantID: sc.MerchantID, Live: sc.Live})
		return nil
	})
	return stored, err
}
