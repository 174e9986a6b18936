package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

// CreateQuantityPreview stores a preview of a quantity change: the change
// itself as jsonb, so that the change made with it applies exactly it.
func (s *Store) CreateQuantityPreview(ctx context.Context, sc payments.Scope, p payments.QuantityPreview) error {
	const q = `INSERT INTO subscription_quantity_previews (merchant_id, livemode, id, subscription_id, change, expires_at, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)`
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, p.ID, p.Change.SubscriptionID, jsonb(p.Change), p.ExpiresAt, p.Created)
	if err != nil && !writtenBefore(err, "subscription_quantity_previews_pkey") { // rerun.go
		return fmt.Errorf("insert quantity preview: %w", err)
	}
	return nil
}

// ChangeQuantity locks the subscription (and the preview), runs fn and
// writes the change (see payments.QuantityStore).
func (s *Store) ChangeQuantity(ctx context.Context, sc payments.Scope, subscriptionID, previewID string, now time.Time,
	fn func(*payments.Subscription, string, *payments.QuantityChange) (payments.QuantityChange, *payments.SubscriptionCharge, payments.Effects, error)) (payments.Subscription, error) {
	var sub payments.Subscription
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if sub, err = subscription(ctx, tx, sc, subscriptionID, " FOR UPDATE OF s"); err != nil {
			return err
		}
		changeID := previewID
		var preview *payments.QuantityChange
		if previewID != "" {
			var r struct {
				Change    []byte       `db:"change"`
				ExpiresAt time.Time    `db:"expires_at"`
				UsedAt    sql.NullTime `db:"used_at"`
			}
			const q = `SELECT change, expires_at, used_at FROM subscription_quantity_previews
			WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND subscription_id = $4 FOR UPDATE`
			err := tx.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, previewID, subscriptionID)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return payments.Invalid("preview", "is not a preview of this subscription: '%s'", previewID)
			case err != nil:
				return fmt.Errorf("lock quantity preview: %w", err)
			case r.UsedAt.Valid:
				return payments.Invalid("preview", "was used already: preview the change again")
			case !now.Before(r.ExpiresAt):
				return payments.Invalid("preview", "has expired: preview the change again")
			}
			preview = new(payments.QuantityChange)
			if err := json.Unmarshal(r.Change, preview); err != nil {
				return fmt.Errorf("decode quantity preview %s: %w", previewID, err)
			}
		} else {
			changeID = payments.NewID("sqp_")
		}
		qc, ch, eff, err := fn(&sub, changeID, preview)
		if err != nil {
			return err
		}
		// Every change made is a row (used at once), previewed or not: its
		// proration items and charge name it.
		const record = `INSERT INTO subscription_quantity_previews (merchant_id, livemode, id, subscription_id, change, expires_at, used_at, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $6, $6)
		ON CONFLICT (id) DO UPDATE SET used_at = EXCLUDED.used_at`
		if _, err := tx.ExecContext(ctx, record, sc.MerchantID, sc.Live, changeID, sub.ID, jsonb(qc), now); err != nil {
			return fmt.Errorf("record quantity change: %w", err)
		}
		if qc.Behavior != payments.ProrationNone {
			const qi = `INSERT INTO subscription_proration_items (merchant_id, livemode, id, subscription_id, change_id, item_id,
				description, quantity, unit_amount, amount, currency, period_from, period_to, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`
			for _, l := range qc.Lines {
				if _, err := tx.ExecContext(ctx, qi, sc.MerchantID, sc.Live, payments.NewID("prli_"), sub.ID, changeID, qc.ItemID,
					l.Description, l.Quantity, l.UnitAmount, l.Amount, qc.Currency, l.From, l.To, now); err != nil {
					return fmt.Errorf("insert proration item: %w", err)
				}
			}
		}
		if ch != nil {
			inserted, err := insertSubscriptionCharge(ctx, tx, sc, *ch)
			if err != nil {
				return err
			}
			if !inserted {
				return fmt.Errorf("proration charge of change %s exists already", changeID) // the change row is new or was unused: never
			}
			if err := billProrationItems(ctx, tx, sc, sub.ID, ch.ID); err != nil {
				return err
			}
		}
		if err := saveSubscription(ctx, tx, sc, sub); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return sub, err
}
