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

const chargeCols = `id, subscription_id, kind, period_start, period_end, change_id, amount, currency, status, attempts,
	next_attempt_at, first_failed_at, decline_code, payment_intent_id, created_at, started_attempt, started_card_id, started_amount`

type chargeRow struct {
	ID              string         `db:"id"`
	SubscriptionID  string         `db:"subscription_id"`
	Kind            string         `db:"kind"`
	PeriodStart     sql.NullTime   `db:"period_start"`
	PeriodEnd       sql.NullTime   `db:"period_end"`
	ChangeID        sql.NullString `db:"change_id"`
	Amount          int64          `db:"amount"`
	Currency        string         `db:"currency"`
	Status          string         `db:"status"`
	Attempts        int            `db:"attempts"`
	NextAttemptAt   sql.NullTime   `db:"next_attempt_at"`
	FirstFailedAt   sql.NullTime   `db:"first_failed_at"`
	DeclineCode     sql.NullString `db:"decline_code"`
	PaymentIntentID sql.NullString `db:"payment_intent_id"`
	CreatedAt       time.Time      `db:"created_at"`
	StartedAttempt  sql.NullInt64  `db:"started_attempt"`
	StartedCardID   sql.NullString `db:"started_card_id"`
	StartedAmount   sql.NullInt64  `db:"started_amount"`
}

func (r chargeRow) charge() payments.SubscriptionCharge {
	ch := payments.SubscriptionCharge{
		ID: r.ID, SubscriptionID: r.SubscriptionID, Kind: r.Kind, PeriodStart: utcPtr(r.PeriodStart), PeriodEnd: utcPtr(r.PeriodEnd),
		ChangeID: strPtr(r.ChangeID), Amount: r.Amount, Currency: r.Currency, Status: r.Status, Attempts: r.Attempts,
		NextAttemptAt: utcPtr(r.NextAttemptAt), FirstFailedAt: utcPtr(r.FirstFailedAt), DeclineCode: strPtr(r.DeclineCode),
		PaymentIntentID: strPtr(r.PaymentIntentID), Created: r.CreatedAt,
	}
	if r.StartedAttempt.Valid {
		ch.Started = &payments.ChargeAttempt{N: int(r.StartedAttempt.Int64), CardID: r.StartedCardID.String, Amount: r.StartedAmount.Int64}
	}
	return ch
}

func utcPtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

// insertSubscriptionCharge inserts a charge unless its period (or its
// quantity change) has one already, and reports whether it did: the
// unique constraints, not the caller, decide that a period is charged once.
func insertSubscriptionCharge(ctx context.Context, tx *txn, sc payments.Scope, ch payments.SubscriptionCharge) (bool, error) {
	const q = `INSERT INTO subscription_charges (merchant_id, livemode, id, subscription_id, kind, period_start, period_end,
		change_id, amount, currency, status, attempts, next_attempt_at, first_failed_at, decline_code, payment_intent_id,
		created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17)
	ON CONFLICT DO NOTHING RETURNING id`
	var id string
	err := tx.GetContext(ctx, &id, q, sc.MerchantID, sc.Live, ch.ID, ch.SubscriptionID, ch.Kind, ch.PeriodStart, ch.PeriodEnd,
		ch.ChangeID, ch.Amount, ch.Currency, ch.Status, ch.Attempts, ch.NextAttemptAt, ch.FirstFailedAt, ch.DeclineCode,
		ch.PaymentIntentID, ch.Created)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert subscription charge: %w", err)
	}
	return true, nil
}

// billProrationItems marks the subscription's unbilled proration items
// billed by charge.
func billProrationItems(ctx context.Context, tx *txn, sc payments.Scope, subscriptionID, chargeID string) error {
	const q = `UPDATE subscription_proration_items SET billed_by = $4
	WHERE merchant_id = $1 AND livemode = $2 AND subscription_id = $3 AND billed_by IS NULL`
	if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, subscriptionID, chargeID); err != nil {
		return fmt.Errorf("bill proration items: %w", err)
	}
	return nil
}

// dueSubscriptionRow is a subscription found by the renewal sweep, with
// its scope and its clock's offset.
type dueSubscriptionRow struct {
	MerchantID string `db:"merchant_id"`
	subscriptionRow
	OffsetUS int64 `db:"offset_us"`
}

// RenewDue runs fn on due subscriptions (see payments.SubscriptionCharges).
// As ExpireSessions: first those due on real time (each then due on its
// own clock too), then, when the batch has room, those due only on a
// moved sandbox clock. A subscription with a charge of its next period
// already (period_start = current_period_end: a renewal waiting for its
// charge, or dunning) is not due again, so a sweep never finds its own
// work twice; a second sweep racing this one skips the locked rows, and
// should it still reach a row this one renewed, the charge's unique
// (subscription_id, period_start) makes its insert a no-op.
//
// With only, just that scope's subscriptions are looked at, and locked ones
// waited for rather than skipped: advance-clock then sees the work a
// concurrent sweep is doing for its scope once it is committed.
func (s *Store) RenewDue(ctx context.Context, now time.Time, limit int, only *payments.Scope, fn func(payments.Scope, *payments.Subscription, time.Time) (*payments.SubscriptionCharge, payments.Effects, error)) (int, error) {
	// renewal_charged_for leaves out, by the index, the subscriptions
	// whose charge was written (saveSubscription sets it after the insert
	// below; migration 0017); NOT EXISTS decides.
	const noCharge = ` AND s.renewal_charged_for IS DISTINCT FROM s.current_period_end AND NOT EXISTS (SELECT 1 FROM subscription_charges ch
		WHERE ch.subscription_id = s.id AND ch.period_start = s.current_period_end)`
	renewals := dueRows{what: "due subscriptions", due: `SELECT s.merchant_id, ` + subscriptionCols + `, coalesce((SELECT c.offset_us FROM sandbox_clocks c
		WHERE c.merchant_id = s.merchant_id AND c.livemode = s.livemode), 0) AS offset_us
	FROM subscriptions s WHERE s.status IN ('active', 'trialing') AND s.processor_subscription_id IS NULL AND s.due_at <= $1` + noCharge + `
	ORDER BY s.due_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED`,
		onMovedClock: `SELECT d.*, c.offset_us FROM sandbox_clocks c CROSS JOIN LATERAL (
		SELECT s.merchant_id, ` + subscriptionCols + ` FROM subscriptions s
		WHERE s.merchant_id = c.merchant_id AND s.livemode = c.livemode AND s.status IN ('active', 'trialing') AND s.processor_subscription_id IS NULL
			AND s.due_at > $1::timestamptz AND s.due_at <= $1::timestamptz + c.offset_us * interval '1 microsecond'` + noCharge + `
		ORDER BY s.due_at LIMIT $2 FOR UPDATE OF s SKIP LOCKED) d
	WHERE c.offset_us > 0 LIMIT $2`}
	const dueInScope = `SELECT s.merchant_id, ` + subscriptionCols + `, o.offset_us FROM subscriptions s,
		(SELECT coalesce((SELECT c.offset_us FROM sandbox_clocks c WHERE c.merchant_id = $3 AND c.livemode = $4), 0) AS offset_us) o
	WHERE s.merchant_id = $3 AND s.livemode = $4 AND s.status IN ('active', 'trialing') AND s.processor_subscription_id IS NULL
		AND s.due_at <= $1::timestamptz + o.offset_us * interval '1 microsecond'` + noCharge + `
	ORDER BY s.due_at LIMIT $2 FOR UPDATE OF s`
	n := 0
	err := s.inTx(ctx, func(tx *txn) error {
		var rows []dueSubscriptionRow
		if only != nil {
			if err := tx.SelectContext(ctx, &rows, dueInScope, now, limit, only.MerchantID, only.Live); err != nil {
				return fmt.Errorf("select the scope's due subscriptions: %w", err)
			}
		} else {
			var err error
			if rows, err = selectDue[dueSubscriptionRow](ctx, tx, renewals, now, limit); err != nil {
				return err
			}
		}
		for _, r := range rows {
			sc := payments.Scope{MerchantID: r.MerchantID, Live: r.Live}
			sub, err := r.subscription()
			if err != nil {
				return err
			}
			ch, eff, err := fn(sc, &sub, onClock(now, r.OffsetUS))
			if err != nil {
				return err
			}
			if ch != nil {
				inserted, err := insertSubscriptionCharge(ctx, tx, sc, *ch)
				if err != nil {
					return err
				}
				if !inserted {
					continue // renewed by a racing sweep: nothing of fn's is written
				}
				if err := billProrationItems(ctx, tx, sc, sub.ID, ch.ID); err != nil {
					return err
				}
			}
			if err := saveSubscription(ctx, tx, sc, sub); err != nil {
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

// SubscriptionCharge reads one of the scope's subscription charges.
func (s *Store) SubscriptionCharge(ctx context.Context, sc payments.Scope, id string) (payments.SubscriptionCharge, error) {
	return subscriptionCharge(ctx, &s.q, sc, id, "")
}

func subscriptionCharge(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, lock string) (payments.SubscriptionCharge, error) {
	query := `SELECT ` + chargeCols + ` FROM subscription_charges WHERE merchant_id = $1 AND livemode = $2 AND id = $3` + lock
	var r chargeRow
	err := sqlx.GetContext(ctx, q, &r, query, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.SubscriptionCharge{}, payments.NotFound(payments.SubscriptionNotFound, id)
	}
	if err != nil {
		return payments.SubscriptionCharge{}, fmt.Errorf("select subscription charge: %w", err)
	}
	return r.charge(), nil
}

// SettleSubscriptionCharge locks the subscription, then its charge (the
// order every path that takes both follows: the sweep and the quantity
// change lock the subscription first too), runs fn and writes its outcome.
func (s *Store) SettleSubscriptionCharge(ctx context.Context, sc payments.Scope, id string, fn func(payments.Plan, *payments.SubscriptionCharge, *payments.Subscription) (*payments.PaymentIntent, payments.Effects, error)) (payments.SubscriptionCharge, error) {
	var ch payments.SubscriptionCharge
	err := s.inTx(ctx, func(tx *txn) error {
		var subID string
		err := tx.GetContext(ctx, &subID, `SELECT subscription_id FROM subscription_charges
			WHERE merchant_id = $1 AND livemode = $2 AND id = $3`, sc.MerchantID, sc.Live, id)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.NotFound(payments.SubscriptionNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("select charge's subscription: %w", err)
		}
		sub, err := subscription(ctx, tx, sc, subID, " FOR UPDATE OF s")
		if err != nil {
			return err
		}
		if ch, err = subscriptionCharge(ctx, tx, sc, id, " FOR UPDATE"); err != nil {
			return err
		}
		var plan string
		if err := tx.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, sc.MerchantID); err != nil {
			return fmt.Errorf("select plan: %w", err)
		}
		pi, eff, err := fn(payments.Plan(plan), &ch, &sub)
		if err != nil {
			return err
		}
		if pi != nil {
			if err := insertIntent(ctx, tx, sc, *pi); err != nil {
				return err
			}
		}
		const q = `UPDATE subscription_charges SET status = $4, attempts = $5, next_attempt_at = $6, first_failed_at = $7,
			decline_code = $8, payment_intent_id = $9, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, ch.ID, ch.Status, ch.Attempts, ch.NextAttemptAt,
			ch.FirstFailedAt, ch.DeclineCode, ch.PaymentIntentID); err != nil {
			return fmt.Errorf("update subscription charge: %w", err)
		}
		if ch.Kind == payments.ChargeProration && ch.Status == payments.ChargeFailed {
			// Its items wait for the next renewal again (fn added their
			// sum back to the subscription's pending amount).
			const qi = `UPDATE subscription_proration_items SET billed_by = NULL
			WHERE merchant_id = $1 AND livemode = $2 AND billed_by = $3`
			if _, err := tx.ExecContext(ctx, qi, sc.MerchantID, sc.Live, ch.ID); err != nil {
				return fmt.Errorf("unbill proration items: %w", err)
			}
		}
		if err := saveSubscription(ctx, tx, sc, sub); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return ch, err
}

// StartSubscriptionCharge records attempt a as started on the pending
// charge, in a statement of its own (committed before the processor call).
// When the attempt is recorded started already, the first record stands:
// the CASEs read the row as it was.
func (s *Store) StartSubscriptionCharge(ctx context.Context, sc payments.Scope, id string, a payments.ChargeAttempt) (payments.ChargeAttempt, bool, error) {
	const q = `UPDATE subscription_charges SET
		started_card_id = CASE WHEN started_attempt = $4 THEN started_card_id ELSE $5 END,
		started_amount = CASE WHEN started_attempt = $4 THEN started_amount ELSE $6 END,
		started_attempt = $4, updated_at = now()
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND status = 'pending' AND attempts = $4 - 1
	RETURNING started_card_id, started_amount`
	started := payments.ChargeAttempt{N: a.N}
	err := s.q.QueryRowxContext(ctx, q, sc.MerchantID, sc.Live, id, a.N, a.CardID, a.Amount).Scan(&started.CardID, &started.Amount)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.ChargeAttempt{}, false, nil
	}
	if err != nil {
		return payments.ChargeAttempt{}, false, fmt.Errorf("start subscription charge: %w", err)
	}
	return started, true, nil
}

// DueSubscriptionCharges returns the scope's pending charges due at now.
func (s *Store) DueSubscriptionCharges(ctx context.Context, sc payments.Scope, now time.Time, limit int) ([]string, error) {
	const q = `SELECT id FROM subscription_charges
	WHERE merchant_id = $1 AND livemode = $2 AND status = 'pending' AND next_attempt_at <= $3
	ORDER BY next_attempt_at, id LIMIT $4`
	var ids []string
	if err := s.q.SelectContext(ctx, &ids, q, sc.MerchantID, sc.Live, now, limit); err != nil {
		return nil, fmt.Errorf("select due subscription charges: %w", err)
	}
	return ids, nil
}

// ReopenSubscriptionCharge makes the open renewal charge of a past_due or
// unpaid subscription due at now, with the subscription's next retry.
func (s *Store) ReopenSubscriptionCharge(ctx context.Context, sc payments.Scope, subscriptionID string, now time.Time) (string, error) {
	var id string
	err := s.inTx(ctx, func(tx *txn) error {
		sub, err := subscription(ctx, tx, sc, subscriptionID, " FOR UPDATE OF s")
		if err != nil {
			return err
		}
		if sub.Status != payments.SubPastDue && sub.Status != payments.SubUnpaid {
			return payments.Errorf(payments.ValidationError, "The subscription is %s: it has no unpaid charge to retry.", sub.Status)
		}
		const q = `UPDATE subscription_charges SET status = 'pending', next_attempt_at = $5, updated_at = now()
		WHERE merchant_id = $1 AND livemode = $2 AND subscription_id = $3 AND kind = 'renewal' AND period_start = $4
			AND status IN ('pending', 'failed')
		RETURNING id`
		err = tx.GetContext(ctx, &id, q, sc.MerchantID, sc.Live, sub.ID, sub.CurrentPeriodEnd, now)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.Errorf(payments.ValidationError, "The subscription has no unpaid charge to retry.")
		}
		if err != nil {
			return fmt.Errorf("reopen subscription charge: %w", err)
		}
		sub.NextRetryAt = &now
		return saveSubscription(ctx, tx, sc, sub)
	})
	return id, err
}

// StrandedSubscriptionCharges returns pending subscription charges whose
// attempt was due before (on their scope's clock): a renewal whose task
// vanished, or a dunning retry whose time came.
func (s *Store) StrandedSubscriptionCharges(ctx context.Context, before time.Time, limit int) ([]payments.Job, error) {
	q := `SELECT id, merchant_id, livemode FROM subscription_charges t
	WHERE status = 'pending' AND ` + onItsClock("next_attempt_at") + ` ORDER BY next_attempt_at LIMIT $2`
	return s.stranded(ctx, q, before, limit)
}
