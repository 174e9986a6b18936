package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"paysvc/internal/payments"
)

// subscriptionCols reads a subscription with its items, aggregated in the
// same statement (one round trip for a read and for a page alike), in the
// order they were added.
const subscriptionCols = `s.id, s.livemode, s.customer_id, s.status, s.currency, s.anchor, s.current_period_start,
	s.current_period_end, s.cancel_at_period_end, s.canceled_at, s.ended_at, s.trial_end, s.pending_proration,
	s.pass_fees_to_customer, s.metadata, s.card_id, s.session_id, s.next_retry_at, s.created_at,
	s.processor_subscription_id, s.processor_synced_at,
	coalesce(s.renewal_charged_for = s.current_period_end, false) AS next_period_charged,
	(SELECT coalesce(json_agg(json_build_object('id', i.id, 'price_id', i.price_id, 'product_id', i.product_id,
		'name', i.name, 'amount', i.amount, 'currency', i.currency, 'interval', i.interval,
		'interval_count', i.interval_count, 'quantity', i.quantity) ORDER BY i.created_at, i.id), '[]')
	 FROM subscription_items i WHERE i.subscription_id = s.id) AS items`

type subscriptionRow struct {
	ID                 string         `db:"id"`
	Live               bool           `db:"livemode"`
	CustomerID         string         `db:"customer_id"`
	Status             string         `db:"status"`
	Currency           string         `db:"currency"`
	Anchor             time.Time      `db:"anchor"`
	CurrentPeriodStart time.Time      `db:"current_period_start"`
	CurrentPeriodEnd   time.Time      `db:"current_period_end"`
	CancelAtPeriodEnd  bool           `db:"cancel_at_period_end"`
	CanceledAt         sql.NullTime   `db:"canceled_at"`
	EndedAt            sql.NullTime   `db:"ended_at"`
	TrialEnd           sql.NullTime   `db:"trial_end"`
	PendingProration   int64          `db:"pending_proration"`
	PassFees           bool           `db:"pass_fees_to_customer"`
	Metadata           []byte         `db:"metadata"`
	CardID             sql.NullString `db:"card_id"`
	SessionID          sql.NullString `db:"session_id"`
	NextRetryAt        sql.NullTime   `db:"next_retry_at"`
	CreatedAt          time.Time      `db:"created_at"`
	ProcessorID        sql.NullString `db:"processor_subscription_id"`
	ProcessorSyncedAt  sql.NullTime   `db:"processor_synced_at"`
	NextPeriodCharged  bool           `db:"next_period_charged"`
	Items              []byte         `db:"items"`
}

type subscriptionItemJSON struct {
	ID            string  `json:"id"`
	PriceID       string  `json:"price_id"`
	ProductID     *string `json:"product_id"`
	Name          string  `json:"name"`
	Amount        int64   `json:"amount"`
	Currency      string  `json:"currency"`
	Interval      string  `json:"interval"`
	IntervalCount int     `json:"interval_count"`
	Quantity      int     `json:"quantity"`
}

// dests are r's fields in subscriptionCols' order (see productRow.dests).
func (r *subscriptionRow) dests() []any {
	return []any{&r.ID, &r.Live, &r.CustomerID, &r.Status, &r.Currency, &r.Anchor, &r.CurrentPeriodStart,
		&r.CurrentPeriodEnd, &r.CancelAtPeriodEnd, &r.CanceledAt, &r.EndedAt, &r.TrialEnd, &r.PendingProration,
		&r.PassFees, &r.Metadata, &r.CardID, &r.SessionID, &r.NextRetryAt, &r.CreatedAt,
		&r.ProcessorID, &r.ProcessorSyncedAt, &r.NextPeriodCharged, &r.Items}
}

func (r subscriptionRow) subscription() (payments.Subscription, error) {
	sub := payments.Subscription{
		ID: r.ID, Live: r.Live, CustomerID: r.CustomerID, Status: r.Status, Currency: r.Currency,
		Anchor: r.Anchor.UTC(), CurrentPeriodStart: r.CurrentPeriodStart.UTC(), CurrentPeriodEnd: r.CurrentPeriodEnd.UTC(),
		CancelAtPeriodEnd: r.CancelAtPeriodEnd, CanceledAt: timePtr(r.CanceledAt), EndedAt: timePtr(r.EndedAt),
		TrialEnd: timePtr(r.TrialEnd), PendingProration: r.PendingProration, PassFees: r.PassFees, NextPeriodCharged: r.NextPeriodCharged,
		CardID: strPtr(r.CardID), SessionID: strPtr(r.SessionID), NextRetryAt: timePtr(r.NextRetryAt), Created: r.CreatedAt,
		ProcessorID: r.ProcessorID.String, ProcessorSyncedAt: timePtr(r.ProcessorSyncedAt),
	}
	if err := unmarshalJSONB(r.Metadata, &sub.Metadata); err != nil {
		return sub, fmt.Errorf("decode metadata of %s: %w", r.ID, err)
	}
	var items []subscriptionItemJSON
	if err := json.Unmarshal(r.Items, &items); err != nil {
		return sub, fmt.Errorf("decode items of %s: %w", r.ID, err)
	}
	for _, it := range items {
		iv, err := payments.NewInterval(it.Interval, it.IntervalCount)
		if err != nil {
			return sub, fmt.Errorf("interval of item %s: %w", it.ID, err)
		}
		price := payments.RecurringPrice{ID: it.PriceID, Amount: it.Amount, Currency: it.Currency, Interval: iv}
		if it.ProductID != nil {
			price.ProductID = *it.ProductID
		}
		sub.Items = append(sub.Items, payments.SubscriptionItem{ID: it.ID, Name: it.Name, Price: price, Quantity: it.Quantity})
	}
	return sub, nil
}

// CreateSubscription inserts the subscription, its items and eff in one
// transaction.
func (s *Store) CreateSubscription(ctx context.Context, sc payments.Scope, sub payments.Subscription, eff payments.Effects) error {
	return s.inTx(ctx, func(tx *txn) error {
		if err := insertSubscription(ctx, tx, sc, sub); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
}

// insertSubscription inserts a subscription and its items in tx.
func insertSubscription(ctx context.Context, tx sqlx.ExecerContext, sc payments.Scope, sub payments.Subscription) error {
	const q = `INSERT INTO subscriptions (merchant_id, livemode, id, customer_id, status, currency, anchor,
		current_period_start, current_period_end, cancel_at_period_end, canceled_at, ended_at, trial_end,
		pending_proration, pass_fees_to_customer, metadata, card_id, session_id, next_retry_at, created_at, updated_at,
		processor_subscription_id, processor_synced_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $20, $21, $22)`
	_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, sub.ID, sub.CustomerID, sub.Status, sub.Currency, sub.Anchor,
		sub.CurrentPeriodStart, sub.CurrentPeriodEnd, sub.CancelAtPeriodEnd, sub.CanceledAt, sub.EndedAt, sub.TrialEnd,
		sub.PendingProration, sub.PassFees, jsonb(nonNil(sub.Metadata)), sub.CardID, sub.SessionID, sub.NextRetryAt, sub.Created,
		nullIfEmpty(sub.ProcessorID), sub.ProcessorSyncedAt)
	if err != nil {
		return fmt.Errorf("insert subscription: %w", err)
	}
	const qi = `INSERT INTO subscription_items (merchant_id, livemode, id, subscription_id, price_id, product_id, name,
		amount, currency, interval, interval_count, quantity, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	for _, it := range sub.Items {
		_, err := tx.ExecContext(ctx, qi, sc.MerchantID, sc.Live, it.ID, sub.ID, it.Price.ID, nullIfEmpty(it.Price.ProductID),
			it.Name, it.Price.Amount, it.Price.Currency, it.Price.Interval.Name, it.Price.Interval.Count, it.Quantity, sub.Created)
		if err != nil {
			return fmt.Errorf("insert subscription item: %w", err)
		}
	}
	return nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// Subscription reads one of the scope's subscriptions with its items.
func (s *Store) Subscription(ctx context.Context, sc payments.Scope, id string) (payments.Subscription, error) {
	return subscription(ctx, &s.q, sc, id, "")
}

func subscription(ctx context.Context, q sqlx.QueryerContext, sc payments.Scope, id, lock string) (payments.Subscription, error) {
	// FOR UPDATE OF s: the items' aggregate is read, not locked; the
	// subscription's lock guards them (they change only under it).
	query := `SELECT ` + subscriptionCols + ` FROM subscriptions s
	WHERE s.merchant_id = $1 AND s.livemode = $2 AND s.id = $3` + lock
	var r subscriptionRow
	err := sqlx.GetContext(ctx, q, &r, query, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Subscription{}, payments.NotFound(payments.SubscriptionNotFound, id)
	}
	if err != nil {
		return payments.Subscription{}, fmt.Errorf("select subscription: %w", err)
	}
	return r.subscription()
}

// Subscriptions returns a page of the scope's subscriptions, newest first,
// filtered by status and customer. Each combination of filters is its own
// statement text (see subscriptionFilter), planned for its own keyset index
// (subscriptions_page, _status_page, _customer_page). The cursor must itself
// pass the filters: an id from another list is not a known id of this one.
func (s *Store) Subscriptions(ctx context.Context, sc payments.Scope, f payments.SubscriptionFilter) (payments.Page[payments.Subscription], error) {
	cond, args := subscriptionFilter(f, []any{sc.MerchantID, sc.Live})
	from := ` FROM subscriptions s WHERE s.merchant_id = $1 AND s.livemode = $2` + cond
	var rows []subscriptionRow
	if f.StartingAfter == "" {
		q := `SELECT ` + subscriptionCols + from + ` ORDER BY s.created_at DESC, s.id DESC`
		if err := selectPage(ctx, &s.q, &rows, q, f.Limit, args...); err != nil {
			return payments.Page[payments.Subscription]{}, fmt.Errorf("select subscriptions: %w", err)
		}
	} else {
		var c cursor
		cur := `SELECT s.created_at, s.id` + from + ` AND s.id = ` + param(len(args)+1)
		err := s.q.GetContext(ctx, &c, cur, append(args, f.StartingAfter)...)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.Page[payments.Subscription]{}, payments.Invalid("starting_after", "is not a known id of this list: '%s'", f.StartingAfter)
		}
		if err != nil {
			return payments.Page[payments.Subscription]{}, fmt.Errorf("select cursor: %w", err)
		}
		n := len(args)
		q := `SELECT ` + subscriptionCols + from + ` AND (s.created_at, s.id) < (` + param(n+1) + `, ` + param(n+2) + `)
			ORDER BY s.created_at DESC, s.id DESC`
		if err := selectPage(ctx, &s.q, &rows, q, f.Limit, append(args, c.CreatedAt, c.ID)...); err != nil {
			return payments.Page[payments.Subscription]{}, fmt.Errorf("select subscriptions: %w", err)
		}
	}
	return pageOf(rows, f.Limit, subscriptionRow.subscription)
}

// subscriptionFilter is the list's conditions beyond merchant and mode, and
// args with their values appended. There are four statement texts, one per
// combination of filters, rather than one with "($3 IS NULL OR status =
// $3)": a prepared statement's generic plan cannot know which filters are
// set, and scans the merchant's whole index for a rare status or a customer.
func subscriptionFilter(f payments.SubscriptionFilter, args []any) (string, []any) {
	cond := ""
	if f.Status != "" {
		args = append(args, f.Status)
		cond += ` AND s.status = ` + param(len(args))
	}
	if f.CustomerID != "" {
		args = append(args, f.CustomerID)
		cond += ` AND s.customer_id = ` + param(len(args))
	}
	return cond, args
}

func param(n int) string { return "$" + strconv.Itoa(n) }

// UpdateSubscription locks the subscription, runs fn and saves what fn may
// change (items' quantities included) with fn's effects.
func (s *Store) UpdateSubscription(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Subscription) (payments.Effects, error)) (payments.Subscription, error) {
	var sub payments.Subscription
	err := s.inTx(ctx, func(tx *txn) error {
		var err error
		if sub, err = subscription(ctx, tx, sc, id, " FOR UPDATE OF s"); err != nil {
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

// saveSubscription writes a locked subscription back, with its items'
// quantities (the only thing of an item that changes).
func saveSubscription(ctx context.Context, tx *txn, sc payments.Scope, sub payments.Subscription) error {
	// renewal_charged_for is derived here, in every save, from the charges:
	// the period end when the renewal charge of the period after it exists
	// (the sweep inserts it before it saves), else null (migration 0017).
	const q = `UPDATE subscriptions SET status = $4, anchor = $5, current_period_start = $6, current_period_end = $7,
		cancel_at_period_end = $8, canceled_at = $9, ended_at = $10, trial_end = $11, pending_proration = $12,
		card_id = $13, next_retry_at = $14, metadata = $15, processor_synced_at = $16, updated_at = now(),
		renewal_charged_for = CASE WHEN EXISTS (SELECT 1 FROM subscription_charges ch
			WHERE ch.subscription_id = $3 AND ch.period_start = $7) THEN $7::timestamptz END
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, sub.ID, sub.Status, sub.Anchor, sub.CurrentPeriodStart,
		sub.CurrentPeriodEnd, sub.CancelAtPeriodEnd, sub.CanceledAt, sub.EndedAt, sub.TrialEnd, sub.PendingProration,
		sub.CardID, sub.NextRetryAt, jsonb(nonNil(sub.Metadata)), sub.ProcessorSyncedAt)
	if err != nil {
		return fmt.Errorf("update subscription: %w", err)
	}
	ids, qty := make([]string, 0, len(sub.Items)), make([]int64, 0, len(sub.Items))
	for _, it := range sub.Items {
		ids, qty = append(ids, it.ID), append(qty, int64(it.Quantity))
	}
	const qi = `UPDATE subscription_items i SET quantity = v.quantity
	FROM unnest($4::text[], $5::int[]) AS v(id, quantity)
	WHERE i.merchant_id = $1 AND i.livemode = $2 AND i.subscription_id = $3 AND i.id = v.id AND i.quantity <> v.quantity`
	if _, err := tx.ExecContext(ctx, qi, sc.MerchantID, sc.Live, sub.ID, pq.Array(ids), pq.Array(qty)); err != nil {
		return fmt.Errorf("update subscription items: %w", err)
	}
	return nil
}

// PaySubscriptionCheckout locks the session, runs fn, and inserts what fn
// returns in the order their references need (customer, card,
// subscription, payment, charge), then saves the session and fn's effects,
// all in one transaction: the subscription exists exactly when its session
// is complete and its events are written.
func (s *Store) PaySubscriptionCheckout(ctx context.Context, sessionID string, fn func(payments.Scope, payments.Plan, *payments.CheckoutSession) (payments.SubscriptionCheckout, payments.Effects, error)) error {
	return s.inTx(ctx, func(tx *txn) error {
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
		cs, err := r.session()
		if err != nil {
			return err
		}
		var plan string
		if err := tx.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, sc.MerchantID); err != nil {
			return fmt.Errorf("select plan: %w", err)
		}
		out, eff, err := fn(sc, payments.Plan(plan), &cs)
		if err != nil {
			return err
		}
		if c := out.NewCustomer; c != nil {
			const q = `INSERT INTO customers (merchant_id, livemode, id, email, name, phone, metadata, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)`
			if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, c.ID, c.Email, c.Name, c.Phone, jsonb(nonNil(c.Metadata)), c.Created); err != nil {
				return fmt.Errorf("insert customer: %w", err)
			}
		}
		if c := out.Card; c != nil && out.Subscription != nil {
			if err := insertCard(ctx, tx, sc, *c, out.Subscription.Created); err != nil {
				return err
			}
		}
		if out.Subscription != nil {
			if err := insertSubscription(ctx, tx, sc, *out.Subscription); err != nil {
				return err
			}
		}
		if out.Payment != nil {
			if err := insertIntent(ctx, tx, sc, *out.Payment); err != nil {
				return err
			}
		}
		if out.Charge != nil {
			if err := insertCharge(ctx, tx, sc, *out.Charge); err != nil {
				return err
			}
		}
		if err := updateSession(ctx, tx, sc, cs); err != nil {
			return err
		}
		return applyEffects(ctx, tx, sc, eff)
	})
}

// insertCard saves a sandbox card: its reference, brand, last4, expiry and
// behaviour, never the number.
func insertCard(ctx context.Context, tx sqlx.ExecerContext, sc payments.Scope, c payments.SavedCard, now time.Time) error {
	const q = `INSERT INTO sandbox_cards (merchant_id, livemode, id, customer_id, brand, last4, exp_month, exp_year, behavior, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
	if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, c.ID, c.CustomerID, c.Brand, c.Last4, c.ExpMonth, c.ExpYear,
		c.Behavior, now); err != nil {
		return fmt.Errorf("insert card: %w", err)
	}
	return nil
}

// insertCharge inserts a subscription's charge. A second charge of the same
// period breaks subscription_charges_subscription_id_period_start_key.
func insertCharge(ctx context.Context, tx sqlx.ExecerContext, sc payments.Scope, ch payments.SubscriptionCharge) error {
	const q = `INSERT INTO subscription_charges (merchant_id, livemode, id, subscription_id, kind, period_start, period_end,
		change_id, amount, currency, status, attempts, next_attempt_at, first_failed_at, decline_code, payment_intent_id,
		created_at, updated_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17)`
	if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, ch.ID, ch.SubscriptionID, ch.Kind, ch.PeriodStart, ch.PeriodEnd,
		ch.ChangeID, ch.Amount, ch.Currency, ch.Status, ch.Attempts, ch.NextAttemptAt, ch.FirstFailedAt, ch.DeclineCode,
		ch.PaymentIntentID, ch.Created); err != nil {
		return fmt.Errorf("insert subscription charge: %w", err)
	}
	return nil
}

// SyncProcessorSubscription locks the scope's subscription that the
// processor knows as processorID, runs fn, and writes, in one transaction,
// the payment fn returns (a renewal invoice Stripe collected), the
// subscription and fn's effects. Codes: subscription_not_found (no
// subscription of ours has that processor id yet), and fn's.
func (s *Store) SyncProcessorSubscription(ctx context.Context, sc payments.Scope, processorID string,
	fn func(payments.Plan, *payments.Subscription) (*payments.PaymentIntent, payments.Effects, error)) (payments.Subscription, error) {
	var sub payments.Subscription
	err := s.inTx(ctx, func(tx *txn) error {
		query := `SELECT ` + subscriptionCols + ` FROM subscriptions s
		WHERE s.merchant_id = $1 AND s.livemode = $2 AND s.processor_subscription_id = $3 FOR UPDATE OF s`
		var r subscriptionRow
		err := tx.GetContext(ctx, &r, query, sc.MerchantID, sc.Live, processorID)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.NotFound(payments.SubscriptionNotFound, processorID)
		}
		if err != nil {
			return fmt.Errorf("select subscription by processor id: %w", err)
		}
		if sub, err = r.subscription(); err != nil {
			return err
		}
		var plan string
		if err := tx.GetContext(ctx, &plan, `SELECT plan FROM merchants WHERE id = $1`, sc.MerchantID); err != nil {
			return fmt.Errorf("select plan: %w", err)
		}
		pi, eff, err := fn(payments.Plan(plan), &sub)
		if err != nil {
			return err
		}
		if pi != nil {
			if err := insertIntent(ctx, tx, sc, *pi); err != nil {
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
