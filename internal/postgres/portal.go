package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/payments"
)

// CreatePortalSession inserts a portal session.
func (s *Store) CreatePortalSession(ctx context.Context, sc payments.Scope, ps payments.PortalSession) error {
	const q = `INSERT INTO portal_sessions (merchant_id, livemode, id, subscription_id, customer_id, return_url, expires_at, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, ps.ID, ps.SubscriptionID, ps.CustomerID, ps.ReturnURL,
		ps.ExpiresAt, ps.Created)
	if err != nil && !writtenBefore(err, "portal_sessions_pkey") { // rerun.go
		return fmt.Errorf("insert portal session: %w", err)
	}
	return nil
}

// PortalSessionByID reads a portal session by id alone, for the public
// portal page, which has no API key: the caller verifies the URL's
// signature over what this returns before showing anything.
func (s *Store) PortalSessionByID(ctx context.Context, id string) (payments.PortalSession, error) {
	const q = `SELECT p.id, p.merchant_id, p.livemode, p.subscription_id, p.customer_id, p.return_url, p.expires_at,
		p.created_at, m.name AS merchant_name
	FROM portal_sessions p JOIN merchants m ON m.id = p.merchant_id WHERE p.id = $1`
	var r struct {
		ID             string    `db:"id"`
		MerchantID     string    `db:"merchant_id"`
		Live           bool      `db:"livemode"`
		SubscriptionID string    `db:"subscription_id"`
		CustomerID     string    `db:"customer_id"`
		ReturnURL      string    `db:"return_url"`
		ExpiresAt      time.Time `db:"expires_at"`
		CreatedAt      time.Time `db:"created_at"`
		MerchantName   string    `db:"merchant_name"`
	}
	err := s.q.GetContext(ctx, &r, q, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.PortalSession{}, payments.ErrPortalNotFound
	}
	if err != nil {
		return payments.PortalSession{}, fmt.Errorf("select portal session: %w", err)
	}
	return payments.PortalSession{
		ID: r.ID, Scope: payments.Scope{MerchantID: r.MerchantID, Live: r.Live}, SubscriptionID: r.SubscriptionID,
		CustomerID: r.CustomerID, ReturnURL: r.ReturnURL, ExpiresAt: r.ExpiresAt.UTC(), Created: r.CreatedAt.UTC(),
		MerchantName: r.MerchantName,
	}, nil
}

// PortalCard reads what the portal shows of one of the scope's saved
// sandbox cards.
func (s *Store) PortalCard(ctx context.Context, sc payments.Scope, cardID string) (payments.SavedCard, error) {
	const q = `SELECT id, customer_id, brand, last4, exp_month, exp_year, behavior FROM sandbox_cards
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	var r struct {
		ID         string `db:"id"`
		CustomerID string `db:"customer_id"`
		Brand      string `db:"brand"`
		Last4      string `db:"last4"`
		ExpMonth   int    `db:"exp_month"`
		ExpYear    int    `db:"exp_year"`
		Behavior   string `db:"behavior"`
	}
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, cardID)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.SavedCard{}, payments.NotFoundOf("card", cardID)
	}
	if err != nil {
		return payments.SavedCard{}, fmt.Errorf("select card: %w", err)
	}
	return payments.SavedCard{ID: r.ID, CustomerID: r.CustomerID, Brand: r.Brand, Last4: r.Last4,
		ExpMonth: r.ExpMonth, ExpYear: r.ExpYear, Behavior: r.Behavior}, nil
}

// ReplaceSubscriptionCard saves card for the subscription's customer and
// runs fn on the locked subscription (which points it at the card), saving
// both with fn's effects in one transaction.
func (s *Store) ReplaceSubscriptionCard(ctx context.Context, sc payments.Scope, id string, card payments.SavedCard, fn func(*payments.Subscription) (payments.Effects, error)) (payments.Subscription, error) {
	var sub payments.Subscription
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if sub, err = subscription(ctx, tx, sc, id, " FOR UPDATE OF s"); err != nil {
			return err
		}
		card.CustomerID = sub.CustomerID
		if err := insertCard(ctx, tx, sc, card, time.Now()); err != nil {
			return err
		}
		eff, err := fn(&sub)
		if err != nil {
			return err
		}
		if err := saveSubscription(ctx, tx, sc, sub); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return sub, err
}
