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

const sessionCols = `merchant_id, livemode, id, status, payment_status, url, currency, amount_subtotal, amount_total,
	pass_fees_to_customer, line_items, customer_id, customer_email, success_url, cancel_url, collect_shipping_address,
	billing_address_collection, shipping_countries, shipping_options, shipping_details, billing_details, metadata,
	payment_intent_id, subscription_id, expires_at, completed_at, created_at, mode, trial_period_days`

type sessionRow struct {
	MerchantID        string         `db:"merchant_id"`
	Live              bool           `db:"livemode"`
	ID                string         `db:"id"`
	Status            string         `db:"status"`
	PaymentStatus     string         `db:"payment_status"`
	URL               sql.NullString `db:"url"`
	Currency          string         `db:"currency"`
	AmountSubtotal    int64          `db:"amount_subtotal"`
	AmountTotal       int64          `db:"amount_total"`
	PassFees          bool           `db:"pass_fees_to_customer"`
	LineItems         []byte         `db:"line_items"`
	CustomerID        sql.NullString `db:"customer_id"`
	CustomerEmail     sql.NullString `db:"customer_email"`
	SuccessURL        string         `db:"success_url"`
	CancelURL         string         `db:"cancel_url"`
	CollectShipping   bool           `db:"collect_shipping_address"`
	Billing           sql.NullString `db:"billing_address_collection"`
	ShippingCountries []byte         `db:"shipping_countries"`
	ShippingOptions   []byte         `db:"shipping_options"`
	ShippingDetails   []byte         `db:"shipping_details"`
	BillingDetails    []byte         `db:"billing_details"`
	Metadata          []byte         `db:"metadata"`
	PaymentIntentID   sql.NullString `db:"payment_intent_id"`
	SubscriptionID    sql.NullString `db:"subscription_id"`
	ExpiresAt         time.Time      `db:"expires_at"`
	CompletedAt       sql.NullTime   `db:"completed_at"`
	CreatedAt         time.Time      `db:"created_at"`
	Mode              string         `db:"mode"`
	TrialPeriodDays   sql.NullInt64  `db:"trial_period_days"`
	MerchantName      sql.NullString `db:"merchant_name"` // only read for the hosted page
	MerchantPlan      sql.NullString `db:"merchant_plan"`
	OffsetUS          int64          `db:"offset_us"` // only read by the expiry sweep: its scope's sandbox clock
}

func (r sessionRow) scope() payments.Scope {
	return payments.Scope{MerchantID: r.MerchantID, Live: r.Live}
}

func (r sessionRow) session() (payments.CheckoutSession, error) {
	cs := payments.CheckoutSession{
		MerchantID: r.MerchantID, ID: r.ID, Live: r.Live, Status: r.Status, PaymentStatus: r.PaymentStatus, URL: r.URL.String,
		Currency: r.Currency, AmountSubtotal: r.AmountSubtotal, AmountTotal: r.AmountTotal, PassFees: r.PassFees,
		CustomerID: strPtr(r.CustomerID), CustomerEmail: strPtr(r.CustomerEmail), SuccessURL: r.SuccessURL,
		CancelURL: r.CancelURL, CollectShipping: r.CollectShipping, BillingAddressCollection: strPtr(r.Billing),
		PaymentIntentID: strPtr(r.PaymentIntentID), SubscriptionID: strPtr(r.SubscriptionID),
		ExpiresAt: r.ExpiresAt, CompletedAt: timePtr(r.CompletedAt), Created: r.CreatedAt, MerchantName: r.MerchantName.String,
		MerchantPlan: payments.Plan(r.MerchantPlan.String), Mode: r.Mode,
	}
	if r.TrialPeriodDays.Valid {
		d := int(r.TrialPeriodDays.Int64)
		cs.TrialPeriodDays = &d
	}
	for _, f := range []struct {
		raw []byte
		dst any
	}{
		{r.LineItems, &cs.LineItems}, {r.ShippingCountries, &cs.ShippingCountries}, {r.ShippingOptions, &cs.ShippingOptions},
		{r.ShippingDetails, &cs.Shipping}, {r.BillingDetails, &cs.Billing}, {r.Metadata, &cs.Metadata},
	} {
		if f.raw == nil {
			continue
		}
		if err := json.Unmarshal(f.raw, f.dst); err != nil {
			return cs, fmt.Errorf("decode session %s: %w", r.ID, err)
		}
	}
	return cs, nil
}

// nullJSON is a nullable jsonb value: nil stays SQL NULL.
func nullJSON[T any](v *T) any {
	if v == nil {
		return nil
	}
	return jsonb(v)
}

// MerchantPlan returns a merchant's plan.
func (s *Store) MerchantPlan(ctx context.Context, merchantID string) (payments.Plan, error) {
	var plan string
	err := s.q.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, merchantID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", payments.Errorf(payments.ValidationError, "No such merchant: '%s'", merchantID)
	}
	if err != nil {
		return "", fmt.Errorf("select plan: %w", err)
	}
	return payments.Plan(plan), nil
}

// PriceForSale returns an active one-time price of an active product of the
// scope; a recurring price is a validation_error (subscription sessions sell it).
func (s *Store) PriceForSale(ctx context.Context, sc payments.Scope, priceID string) (payments.SaleablePrice, error) {
	const q = `SELECT pr.id, pr.product_id, pr.amount, pr.currency, pr.tax_behavior, pr.created_at, p.name,
		pr.recurring_interval IS NOT NULL AS recurring
	FROM prices pr JOIN products p ON p.id = pr.product_id
	WHERE pr.merchant_id = $1 AND pr.livemode = $2 AND pr.id = $3 AND pr.active AND p.active`
	var r struct {
		Recurring   bool           `db:"recurring"`
		ID          string         `db:"id"`
		ProductID   string         `db:"product_id"`
		Amount      int64          `db:"amount"`
		Currency    string         `db:"currency"`
		TaxBehavior sql.NullString `db:"tax_behavior"`
		CreatedAt   time.Time      `db:"created_at"`
		Name        string         `db:"name"`
	}
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, priceID)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.SaleablePrice{}, payments.Errorf(payments.ProductNotFound, "No such price, or its product is archived: '%s'", priceID)
	}
	if err != nil {
		return payments.SaleablePrice{}, fmt.Errorf("select price: %w", err)
	}
	if r.Recurring {
		return payments.SaleablePrice{}, payments.Invalid("price_id", "'%s' is a recurring price: sell it with a subscription session", priceID)
	}
	return payments.SaleablePrice{
		Price:       payments.Price{ID: r.ID, ProductID: r.ProductID, Amount: r.Amount, Currency: r.Currency, TaxBehavior: strPtr(r.TaxBehavior), Created: r.CreatedAt},
		ProductName: r.Name,
	}, nil
}

// CreateSession inserts a session.
func (s *Store) CreateSession(ctx context.Context, sc payments.Scope, cs payments.CheckoutSession) error {
	const q = `INSERT INTO checkout_sessions (merchant_id, livemode, id, status, payment_status, url, currency,
		amount_subtotal, amount_total, pass_fees_to_customer, line_items, customer_id, customer_email, success_url,
		cancel_url, collect_shipping_address, billing_address_collection, shipping_countries, shipping_options,
		metadata, expires_at, created_at, mode, trial_period_days)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)`
	mode := cs.Mode
	if mode == "" {
		mode = payments.ModePayment
	}
	_, err := s.q.ExecContext(ctx, q, sc.MerchantID, sc.Live, cs.ID, cs.Status, cs.PaymentStatus, cs.URL, cs.Currency,
		cs.AmountSubtotal, cs.AmountTotal, cs.PassFees, jsonb(cs.LineItems), cs.CustomerID, cs.CustomerEmail, cs.SuccessURL,
		cs.CancelURL, cs.CollectShipping, cs.BillingAddressCollection, jsonb(cs.ShippingCountries), jsonb(cs.ShippingOptions),
		jsonb(cs.Metadata), cs.ExpiresAt, cs.Created, mode, cs.TrialPeriodDays)
	if err != nil && !writtenBefore(err, "checkout_sessions_pkey") { // rerun.go
		return fmt.Errorf("insert session: %w", err)
	}
	return nil
}

// Session returns a session of the scope.
func (s *Store) Session(ctx context.Context, sc payments.Scope, id string) (payments.CheckoutSession, error) {
	q := `SELECT ` + sessionCols + ` FROM checkout_sessions WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	var r sessionRow
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.CheckoutSession{}, payments.NotFound(payments.SessionNotFound, id)
	}
	if err != nil {
		return payments.CheckoutSession{}, fmt.Errorf("select session: %w", err)
	}
	return r.session()
}

// SessionByID reads a session by id alone, for the public hosted page.
func (s *Store) SessionByID(ctx context.Context, id string) (payments.CheckoutSession, error) {
	q := `SELECT ` + sessionCols + `, m.merchant_name, m.merchant_plan FROM checkout_sessions s,
		LATERAL (SELECT name AS merchant_name, plan AS merchant_plan FROM merchants WHERE merchants.id = s.merchant_id) m
	WHERE s.id = $1`
	var r sessionRow
	err := s.q.GetContext(ctx, &r, q, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.CheckoutSession{}, payments.NotFound(payments.SessionNotFound, id)
	}
	if err != nil {
		return payments.CheckoutSession{}, fmt.Errorf("select session: %w", err)
	}
	return r.session()
}

func updateSession(ctx context.Context, tx *txn, sc payments.Scope, cs payments.CheckoutSession) error {
	const q = `UPDATE checkout_sessions SET status = $4, payment_status = $5, amount_total = $6, customer_email = $7,
		shipping_details = $8, billing_details = $9, payment_intent_id = $10, completed_at = $11, subscription_id = $12,
		customer_id = $13
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, cs.ID, cs.Status, cs.PaymentStatus, cs.AmountTotal,
		cs.CustomerEmail, nullJSON(cs.Shipping), nullJSON(cs.Billing), cs.PaymentIntentID, cs.CompletedAt, cs.SubscriptionID,
		cs.CustomerID)
	if err != nil {
		return fmt.Errorf("update session: %w", err)
	}
	return nil
}

// PayCheckout runs fn on the locked session and its payment and saves both
// with fn's events in one transaction. The session's row lock serializes
// concurrent submits, so the second sees the first's outcome.
func (s *Store) PayCheckout(ctx context.Context, sessionID string, fn func(payments.Scope, payments.Plan, *payments.CheckoutSession, *payments.PaymentIntent) (payments.Effects, error)) (payments.CheckoutSession, error) {
	var cs payments.CheckoutSession
	err := s.inTx(ctx, func(tx *txn) error {
		q := `SELECT ` + sessionCols + ` FROM checkout_sessions WHERE id = $1 FOR UPDATE`
		var r sessionRow
		err := tx.GetContext(ctx, &r, q, sessionID)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.NotFound(payments.SessionNotFound, sessionID)
		}
		if err != nil {
			return fmt.Errorf("lock session: %w", err)
		}
		sc := r.scope()
		if cs, err = r.session(); err != nil {
			return err
		}
		var plan string
		if err := tx.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, sc.MerchantID); err != nil {
			return fmt.Errorf("select plan: %w", err)
		}
		var pi payments.PaymentIntent
		if cs.PaymentIntentID != nil {
			if pi, err = intent(ctx, tx, sc, *cs.PaymentIntentID, " FOR UPDATE"); err != nil {
				return err
			}
		}
		isNew := pi.ID == ""
		eff, err := fn(sc, payments.Plan(plan), &cs, &pi)
		if err != nil {
			return err
		}
		if isNew {
			err = insertIntent(ctx, tx, sc, pi)
		} else {
			err = updateIntent(ctx, tx, sc, pi)
		}
		if err != nil {
			return err
		}
		if err := updateSession(ctx, tx, sc, cs); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
	return cs, err
}

// ExpireSessions runs fn on open sessions whose expiry has come on their
// scope's clock, with that clock's time, and saves them with fn's events;
// SKIP LOCKED lets a sweep pass over a session a customer is paying now.
//
// now is the clock's base. A scope's time is base plus its sandbox offset,
// never less (offsets only grow), so a session due at base time is due
// whatever its clock: the first query finds those on the
// checkout_sessions_expiry index, as before sandbox clocks existed. The
// second visits only the scopes whose clock was moved, each for the sessions
// due between base time and its own time; its cost grows with those scopes'
// open sessions (sandbox merchants testing expiry), not with the table. One
// query comparing every row with its own clock (expires_at <= $1 + offset)
// could not bound its index scan and would read every open session of
// every merchant on each minute's sweep.
func (s *Store) ExpireSessions(ctx context.Context, now time.Time, limit int, fn func(*payments.CheckoutSession, time.Time) (payments.Effects, error)) (int, error) {
	expired := dueRows{what: "expired sessions", due: `SELECT ` + sessionCols + `, coalesce((SELECT c.offset_us FROM sandbox_clocks c
		WHERE c.merchant_id = checkout_sessions.merchant_id AND c.livemode = checkout_sessions.livemode), 0) AS offset_us
	FROM checkout_sessions WHERE status = 'open' AND expires_at <= $1
	ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
		onMovedClock: `SELECT s.*, c.offset_us FROM sandbox_clocks c CROSS JOIN LATERAL (
		SELECT ` + sessionCols + ` FROM checkout_sessions
		WHERE merchant_id = c.merchant_id AND livemode = c.livemode AND status = 'open'
			AND expires_at > $1::timestamptz AND expires_at <= $1::timestamptz + c.offset_us * interval '1 microsecond'
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) s
	WHERE c.offset_us > 0 LIMIT $2`}
	n := 0
	err := s.inTx(ctx, func(tx *txn) error {
		rows, err := selectDue[sessionRow](ctx, tx, expired, now, limit)
		if err != nil {
			return err
		}
		for _, r := range rows {
			cs, err := r.session()
			if err != nil {
				return err
			}
			eff, err := fn(&cs, onClock(now, r.OffsetUS))
			if err != nil {
				return err
			}
			if err := updateSession(ctx, tx, r.scope(), cs); err != nil {
				return err
			}
			if err := applyEffects(ctx, tx, r.scope(), eff); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
