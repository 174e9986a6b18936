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

type endpointRow struct {
	MerchantID          string         `db:"merchant_id"`
	Live                bool           `db:"livemode"`
	ID                  string         `db:"id"`
	URL                 string         `db:"url"`
	Events              []byte         `db:"events"`
	Description         sql.NullString `db:"description"`
	Status              string         `db:"status"`
	SecretSealed        []byte         `db:"secret_sealed"`
	ConsecutiveFailures int            `db:"consecutive_failures"`
	DeletedAt           sql.NullTime   `db:"deleted_at"`
	CreatedAt           time.Time      `db:"created_at"`
	DisabledReason      sql.NullString `db:"disabled_reason"`
	DisabledAt          sql.NullTime   `db:"disabled_at"`
	LastDeliveryAt      sql.NullTime   `db:"last_delivery_at"`
	PreviousExpiresAt   sql.NullTime   `db:"previous_secret_expires_at"`
}

// endpointCols are the columns of endpointRow. The previous secret's expiry
// reads as NULL once past (wall time, as deliveries are signed): the grace
// period is over.
const endpointCols = `merchant_id, livemode, id, url, events, description, status, secret_sealed, consecutive_failures,
	deleted_at, created_at, disabled_reason, disabled_at, last_delivery_at,
	CASE WHEN previous_secret_expires_at > now() THEN previous_secret_expires_at END AS previous_secret_expires_at`

func (r endpointRow) endpoint() (payments.Endpoint, error) {
	e := payments.Endpoint{ID: r.ID, Live: r.Live, URL: r.URL, Description: strPtr(r.Description), Status: r.Status, Created: r.CreatedAt,
		FailureCount: r.ConsecutiveFailures, DisabledReason: strPtr(r.DisabledReason), DisabledAt: timePtr(r.DisabledAt),
		LastDeliveryAt: timePtr(r.LastDeliveryAt), PreviousSecretExpiresAt: timePtr(r.PreviousExpiresAt)}
	if err := json.Unmarshal(r.Events, &e.Events); err != nil {
		return e, fmt.Errorf("decode events of %s: %w", r.ID, err)
	}
	return e, nil
}

// CreateEndpoint inserts an endpoint when the scope has fewer than max.
func (s *Store) CreateEndpoint(ctx context.Context, sc payments.Scope, e payments.Endpoint, sealed []byte, max int) error {
	return s.inTx(ctx, func(tx *txn) error {
		if err := lockMerchant(ctx, tx, sc.MerchantID); err != nil {
			return err
		}
		var n int
		const count = `SELECT count(*) FROM webhook_endpoints WHERE merchant_id = $1 AND livemode = $2 AND deleted_at IS NULL`
		if err := tx.GetContext(ctx, &n, count, sc.MerchantID, sc.Live); err != nil {
			return fmt.Errorf("count endpoints: %w", err)
		}
		if n >= max {
			return payments.Invalid("url", "cannot be added: at most %d webhook endpoints per mode; delete one first", max)
		}
		const q = `INSERT INTO webhook_endpoints (merchant_id, livemode, id, url, events, description, status, secret_sealed, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
		_, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, e.ID, e.URL, jsonb(e.Events), e.Description, e.Status, sealed, e.Created)
		if err != nil {
			return fmt.Errorf("insert endpoint: %w", err)
		}
		return nil
	})
}

// Endpoints lists the scope's endpoints that are not deleted, newest first.
func (s *Store) Endpoints(ctx context.Context, sc payments.Scope) ([]payments.Endpoint, error) {
	q := `SELECT ` + endpointCols + ` FROM webhook_endpoints WHERE merchant_id = $1 AND livemode = $2 AND deleted_at IS NULL
	ORDER BY created_at DESC, id DESC`
	var rows []endpointRow
	if err := s.q.SelectContext(ctx, &rows, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select endpoints: %w", err)
	}
	out := make([]payments.Endpoint, 0, len(rows))
	for _, r := range rows {
		e, err := r.endpoint()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Endpoint returns one of the scope's endpoints that is not deleted;
// endpoint_not_found otherwise.
func (s *Store) Endpoint(ctx context.Context, sc payments.Scope, id string) (payments.Endpoint, error) {
	q := `SELECT ` + endpointCols + ` FROM webhook_endpoints
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL`
	var r endpointRow
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Endpoint{}, endpointNotFound(id)
	}
	if err != nil {
		return payments.Endpoint{}, fmt.Errorf("select endpoint: %w", err)
	}
	return r.endpoint()
}

func endpointNotFound(id string) error {
	return payments.Errorf(payments.EndpointNotFound, "No such webhook endpoint: '%s'", id)
}

// UpdateEndpoint locks the endpoint, runs fn on it and saves what fn may
// change: url, events, description, status with its failure count and
// disabled reason and time. An endpoint that fn disables has its pending
// deliveries failed in the same transaction ("endpoint disabled").
func (s *Store) UpdateEndpoint(ctx context.Context, sc payments.Scope, id string, fn func(*payments.Endpoint) error) (payments.Endpoint, error) {
	var e payments.Endpoint
	err := s.inTx(ctx, func(tx *txn) error {
		q := `SELECT ` + endpointCols + ` FROM webhook_endpoints
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL FOR UPDATE`
		var r endpointRow
		err := tx.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id)
		if errors.Is(err, sql.ErrNoRows) {
			return endpointNotFound(id)
		}
		if err != nil {
			return fmt.Errorf("lock endpoint: %w", err)
		}
		if e, err = r.endpoint(); err != nil {
			return err
		}
		was := e.Status
		if err := fn(&e); err != nil {
			return err
		}
		const upd = `UPDATE webhook_endpoints SET url = $4, events = $5, description = $6, status = $7,
			consecutive_failures = $8, disabled_reason = $9, disabled_at = $10
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, upd, sc.MerchantID, sc.Live, id, e.URL, jsonb(e.Events), e.Description, e.Status,
			e.FailureCount, e.DisabledReason, e.DisabledAt); err != nil {
			return fmt.Errorf("update endpoint: %w", err)
		}
		if was == payments.EndpointEnabled && e.Status == payments.EndpointDisabled {
			return failPending(ctx, tx, sc, id, "endpoint disabled")
		}
		return nil
	})
	return e, err
}

// RotateEndpointSecret replaces the endpoint's sealed secret with sealed and
// keeps the replaced one, which signs deliveries too until grace from now
// (the database's clock, which DeliveryForSend reads it against).
//
// A second run of the statement (rerun.go) finds sealed in place, and
// keeps the replaced secret: swapping again would make sealed its own
// previous one, and deliveries would stop being signed with the replaced
// secret before its grace ended. Sealing is randomised, so no other
// rotation sets these bytes.
func (s *Store) RotateEndpointSecret(ctx context.Context, sc payments.Scope, id string, sealed []byte, grace time.Duration) (payments.Endpoint, error) {
	q := `UPDATE webhook_endpoints SET
		previous_secret_sealed = CASE WHEN secret_sealed = $4 THEN previous_secret_sealed ELSE secret_sealed END,
		previous_secret_expires_at = CASE WHEN secret_sealed = $4 THEN previous_secret_expires_at
			ELSE now() + make_interval(secs => $5) END,
		secret_sealed = $4
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL
	RETURNING ` + endpointCols
	var r endpointRow
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id, sealed, grace.Seconds())
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Endpoint{}, endpointNotFound(id)
	}
	if err != nil {
		return payments.Endpoint{}, fmt.Errorf("rotate endpoint secret: %w", err)
	}
	return r.endpoint()
}

// failPending fails the endpoint's pending deliveries with reason: the
// policy of a disabled or deleted endpoint. A task still queued for one
// finds it no longer pending and does nothing.
func failPending(ctx context.Context, tx *txn, sc payments.Scope, endpointID, reason string) error {
	const q = `UPDATE webhook_deliveries SET status = 'failed', last_error = $4
	WHERE merchant_id = $1 AND livemode = $2 AND endpoint_id = $3 AND status = 'pending'`
	if _, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, endpointID, reason); err != nil {
		return fmt.Errorf("fail pending deliveries: %w", err)
	}
	return nil
}

// DeleteEndpoint marks the endpoint deleted and fails its pending deliveries.
func (s *Store) DeleteEndpoint(ctx context.Context, sc payments.Scope, id string, now time.Time) error {
	return s.inTx(ctx, func(tx *txn) error {
		const q = `UPDATE webhook_endpoints SET deleted_at = $4
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL`
		res, err := tx.ExecContext(ctx, q, sc.MerchantID, sc.Live, id, now)
		if err != nil {
			return fmt.Errorf("delete endpoint: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return endpointNotFound(id)
		}
		return failPending(ctx, tx, sc, id, "endpoint deleted")
	})
}

type deliveryRow struct {
	ID           string    `db:"id"`
	MerchantID   string    `db:"merchant_id"`
	Live         bool      `db:"livemode"`
	Status       string    `db:"status"`
	Attempts     int       `db:"attempts"`
	EventID      string    `db:"event_id"`
	EventType    string    `db:"event_type"`
	EventCreated time.Time `db:"event_created_at"`
	Payload      []byte    `db:"payload"`
	EndpointID   string    `db:"endpoint_id"`
	URL          string    `db:"url"`
	SecretSealed []byte    `db:"secret_sealed"`
	EndpointOK   bool      `db:"endpoint_ok"`
	Previous     []byte    `db:"previous_secret_sealed"`
}

func (r deliveryRow) delivery() payments.Delivery {
	return payments.Delivery{ID: r.ID, MerchantID: r.MerchantID, Live: r.Live, Status: r.Status, Attempts: r.Attempts,
		EventID: r.EventID, EventType: r.EventType, EventCreated: r.EventCreated, Payload: r.Payload, EndpointID: r.EndpointID,
		URL: r.URL, SecretSealed: r.SecretSealed, EndpointOK: r.EndpointOK, PreviousSecretSealed: r.Previous}
}

// deliverySendColumns are a deliveryRow's columns: deliveries d with their
// events e (the payload is built there) and endpoints we.
const deliverySendColumns = `d.id, d.merchant_id, d.livemode, d.status, d.attempts, d.event_created_at, e.id AS event_id, e.type AS event_type,
		e.payload, we.id AS endpoint_id, we.url, we.secret_sealed, (we.status = 'enabled' AND we.deleted_at IS NULL) AS endpoint_ok,
		CASE WHEN we.previous_secret_expires_at > now() THEN we.previous_secret_sealed END AS previous_secret_sealed`

// DeliveryForSend loads a delivery with its event's payload (the exact bytes
// to send and sign) and its endpoint; payments.ErrDeliveryNotFound when the
// row does not exist.
func (s *Store) DeliveryForSend(ctx context.Context, sc payments.Scope, id string) (payments.Delivery, error) {
	const q = `SELECT ` + deliverySendColumns + `
	FROM webhook_deliveries d
	CROSS JOIN LATERAL (SELECT e.id, e.type, ` + eventPayload + ` AS payload FROM events e
		WHERE e.id = d.event_id AND e.created_at = d.event_created_at) e -- its partition
	JOIN webhook_endpoints we ON we.id = d.endpoint_id
	WHERE d.merchant_id = $1 AND d.livemode = $2 AND d.id = $3 AND d.event_created_at >= coalesce($4::timestamptz, '-infinity') AND d.event_created_at < coalesce($5::timestamptz, 'infinity')`
	lo, hi := idSpan(id)
	var r deliveryRow
	err := s.q.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, id, lo, hi)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Delivery{}, payments.ErrDeliveryNotFound
	}
	if err != nil {
		return payments.Delivery{}, fmt.Errorf("select delivery: %w", err)
	}
	return r.delivery(), nil
}

// FirstDeliveries loads an event's deliveries that were written with it
// and are not attempted yet (pending, no attempt), in one statement, each
// as DeliveryForSend returns it: the event's first attempts
// (payments.JobDeliverEvent). A resend (a delivery written later) is not
// one of them: it has its own task.
func (s *Store) FirstDeliveries(ctx context.Context, sc payments.Scope, eventID string) ([]payments.Delivery, error) {
	const q = `WITH e AS MATERIALIZED ( -- the payload is built once
		SELECT e.id, e.type, e.created_at, ` + eventPayload + ` AS payload FROM events e
		WHERE e.merchant_id = $1 AND e.livemode = $2 AND e.id = $3
			AND e.created_at >= coalesce($4::timestamptz, '-infinity') AND e.created_at < coalesce($5::timestamptz, 'infinity')
	)
	SELECT ` + deliverySendColumns + `
	FROM e
	JOIN webhook_deliveries d ON d.merchant_id = $1 AND d.livemode = $2 AND d.event_id = e.id AND d.event_created_at = e.created_at
	JOIN webhook_endpoints we ON we.id = d.endpoint_id
	WHERE d.status = 'pending' AND d.attempts = 0 AND d.created_at = d.event_created_at
		AND d.event_created_at >= coalesce($4::timestamptz, '-infinity') AND d.event_created_at < coalesce($5::timestamptz, 'infinity')
	ORDER BY d.id`
	lo, hi := idSpan(eventID)
	var rows []deliveryRow
	if err := s.q.SelectContext(ctx, &rows, q, sc.MerchantID, sc.Live, eventID, lo, hi); err != nil {
		return nil, fmt.Errorf("select first deliveries: %w", err)
	}
	out := make([]payments.Delivery, len(rows))
	for i, r := range rows {
		out[i] = r.delivery()
	}
	return out, nil
}

// RecordAttempt keeps an attempt (a webhook_attempts row) and stores its
// outcome on the delivery and on its endpoint, in one transaction. A
// success resets the endpoint's run of failures and sets its
// last_delivery_at; a failure lengthens the run and, when disable (the
// domain's rule, payments.DisableReason) gives a reason, disables the
// endpoint and fails its pending deliveries, this one included. It returns
// whether the endpoint is (now) disabled. A delivery cancelled meanwhile
// (endpoint deleted or disabled) keeps its status; its attempt is kept all
// the same.
func (s *Store) RecordAttempt(ctx context.Context, d payments.Delivery, a payments.DeliveryAttempt, disable func(a payments.DeliveryAttempt, consecutiveFailures int) string) (disabled bool, err error) {
	var httpStatus *int
	if a.HTTPStatus != 0 {
		httpStatus = &a.HTTPStatus
	}
	if a.OK() {
		// The common case in one prepared statement and no explicit
		// transaction. The endpoint row is written (and locked) only when
		// it had failures to reset or when the second of last_delivery_at
		// changes (the API shows whole seconds), and a row another
		// statement is writing for the latter is skipped, so that
		// concurrent deliveries to one endpoint do not queue on its row: a
		// busy endpoint's row is written about once a second. greatest()
		// keeps it from going back when an older attempt commits last. The
		// price of not waiting: last_delivery_at may lag by one busy second
		// until the next success, and a success racing a failure of the
		// same endpoint may leave that failure counted (the next success
		// resets it); neither is money, and the order of concurrent
		// attempts is not defined anyway.
		//
		// The statement commits without waiting for its WAL to reach the
		// disk (synchronous_commit off, for its own transaction only: the
		// writes are its CTEs, which always run, and its one row is the
		// setting). A receiver's 2xx is not money: if PostgreSQL crashed
		// before the WAL writer's next flushes (three wal_writer_delay at
		// most, 600 ms by default), the success would be lost and the
		// delivery, still pending, sent again by the relay, which at-least-once delivery already allows
		// (a worker killed after the POST does the same; receivers dedupe
		// on the event id). Waiting for that flush was most of a
		// delivery's time in PostgreSQL under load (LWLock:WALWrite).
		// Failures, which disable endpoints, stay synchronous.
		//
		// (One statement per delivery, not
		// one over an event's: over arrays of ids it was, as a generic
		// plan, a scan of the merchant's pending deliveries, and planned
		// afresh it cost more than the round trips it saved.)
		const ok = `WITH d AS (
			UPDATE webhook_deliveries SET status = 'succeeded', attempts = attempts + 1, last_status = $5,
				last_response_body = $8, last_error = NULL, delivered_at = $6
			WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND event_created_at = $9 AND status = 'pending'
		), a AS (
			INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, response_body, created_at, event_created_at)
			VALUES ($7, $1, $2, $3, $5, $8, $6, $9)
		), fresh AS ( -- the second of last_delivery_at moved on; a row another statement holds is left to it
			SELECT id FROM webhook_endpoints
			WHERE merchant_id = $1 AND livemode = $2 AND id = $4 AND consecutive_failures = 0
				AND (last_delivery_at IS NULL OR date_trunc('second', last_delivery_at) < date_trunc('second', $6::timestamptz))
			FOR NO KEY UPDATE SKIP LOCKED
		), reset AS ( -- a run of failures to end: waited for
			SELECT id FROM webhook_endpoints
			WHERE merchant_id = $1 AND livemode = $2 AND id = $4 AND consecutive_failures <> 0
			FOR NO KEY UPDATE
		), ep AS (
			UPDATE webhook_endpoints we SET consecutive_failures = 0, last_delivery_at = greatest(we.last_delivery_at, $6)
			WHERE we.merchant_id = $1 AND we.livemode = $2 AND we.id = $4
				AND we.id IN (SELECT id FROM fresh UNION ALL SELECT id FROM reset)
		)
		SELECT set_config('synchronous_commit', 'off', true) -- this statement's own transaction; see above`
		_, err := s.q.ExecContext(ctx, ok, d.MerchantID, d.Live, d.ID, d.EndpointID, httpStatus, a.At, a.ID, a.ResponseBody, d.EventCreated)
		if err != nil && !attemptWrittenBefore(err) { // rerun.go
			return false, fmt.Errorf("record delivery: %w", err)
		}
		return false, nil
	}
	err = s.inTx(ctx, func(tx *txn) error {
		// The endpoint first: whether this failure disables it decides the
		// delivery's status.
		var ep struct {
			Failures int  `db:"consecutive_failures"`
			Enabled  bool `db:"enabled"`
		}
		const fail = `UPDATE webhook_endpoints SET consecutive_failures = consecutive_failures + 1
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3 RETURNING consecutive_failures, status = 'enabled' AS enabled`
		if err := tx.GetContext(ctx, &ep, fail, d.MerchantID, d.Live, d.EndpointID); err != nil {
			return fmt.Errorf("count endpoint failure: %w", err)
		}
		disabled = !ep.Enabled
		reason := ""
		if ep.Enabled {
			reason = disable(a, ep.Failures)
		}
		status, lastError := payments.DeliveryPending, a.Error
		if a.Final || reason != "" {
			status = payments.DeliveryFailed
		}
		if reason != "" {
			lastError += "; endpoint disabled (" + reason + ")"
		}
		const upd = `WITH a AS (
			INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, response_body, error, created_at, event_created_at)
			VALUES ($8, $1, $2, $3, $5, $9, $10, $11, $12)
		)
		UPDATE webhook_deliveries SET status = $4, attempts = attempts + 1, last_status = $5,
			last_response_body = $9, last_error = $6, next_attempt_at = $7
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND event_created_at = $12
			AND status = 'pending' -- a delivery cancelled meanwhile (endpoint deleted) stays so`
		if _, err := tx.ExecContext(ctx, upd, d.MerchantID, d.Live, d.ID, status, httpStatus, lastError, a.NextAttempt,
			a.ID, a.ResponseBody, a.Error, a.At, d.EventCreated); err != nil {
			return fmt.Errorf("record attempt: %w", err)
		}
		if reason == "" {
			return nil
		}
		const off = `UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = $4, disabled_at = $5
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
		if _, err := tx.ExecContext(ctx, off, d.MerchantID, d.Live, d.EndpointID, reason, a.At); err != nil {
			return fmt.Errorf("disable endpoint: %w", err)
		}
		disabled = true
		return failPending(ctx, tx, payments.Scope{MerchantID: d.MerchantID, Live: d.Live}, d.EndpointID, "endpoint disabled ("+reason+")")
	})
	return disabled, err
}

// FailDelivery marks a delivery failed without an attempt (endpoint gone).
func (s *Store) FailDelivery(ctx context.Context, d payments.Delivery, reason string) error {
	const q = `UPDATE webhook_deliveries SET status = 'failed', last_error = $4
	WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND event_created_at >= coalesce($5::timestamptz, '-infinity') AND event_created_at < coalesce($6::timestamptz, 'infinity') AND status = 'pending'`
	lo, hi := idSpan(d.ID)
	if _, err := s.q.ExecContext(ctx, q, d.MerchantID, d.Live, d.ID, reason, lo, hi); err != nil {
		return fmt.Errorf("fail delivery: %w", err)
	}
	return nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
