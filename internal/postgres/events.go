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

// insertEvents writes events in the caller's transaction (the outbox), each
// with one delivery per enabled endpoint of the scope subscribed to its type,
// in one statement per event. After commit, one task per event makes the
// first attempt of each of its deliveries (payments.JobDeliverEvent).
func insertEvents(ctx context.Context, tx *txn, sc payments.Scope, events []payments.Event) error {
	const q = `WITH e AS (
		INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING id, type, created_at
	)
	INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, created_at, event_created_at)
	SELECT 'whd_' || lpad(to_hex(floor(extract(epoch FROM e.created_at) * 1000)::bigint), 12, '0') -- a timed id (payments.IDTime)
			|| replace(gen_random_uuid()::text, '-', ''),
		we.merchant_id, we.livemode, e.id, we.id, 'pending', e.created_at, e.created_at, e.created_at
	FROM e, webhook_endpoints we
	WHERE we.merchant_id = $2 AND we.livemode = $3 AND we.status = 'enabled' AND we.deleted_at IS NULL
		AND (we.events ? '*' OR we.events ? e.type)
	RETURNING id`
	for _, e := range events {
		data, err := json.Marshal(e.Data)
		if err != nil {
			return fmt.Errorf("marshal event %s: %w", e.Type, err)
		}
		var ids []string
		if err := tx.SelectContext(ctx, &ids, q, e.ID, sc.MerchantID, sc.Live, e.Type, string(data), e.Created); err != nil {
			return fmt.Errorf("insert event %s: %w", e.Type, err)
		}
		if len(ids) > 0 { // one task makes the first attempt of each
			tx.jobs = append(tx.jobs, payments.Job{Kind: payments.JobDeliverEvent, ID: e.ID, MerchantID: sc.MerchantID, Live: sc.Live})
		}
	}
	return nil
}

// eventPayload is the SQL of an event's payload (the events row aliased e):
// the exact body a delivery sends and signs (DeliveryForSend) and the object
// GET /v1/events returns (Event, EventPage). One expression, so the two
// cannot drift.
const eventPayload = `json_build_object('id', e.id, 'type', e.type, 'created', extract(epoch from e.created_at)::bigint,
		'livemode', e.livemode, 'data', e.data)::text`

// StoredEvent is an event as delivered (payments.StoredEvent).
type StoredEvent = payments.StoredEvent

// Events returns the scope's events in the order they were written.
func (s *Store) Events(ctx context.Context, sc payments.Scope) ([]StoredEvent, error) {
	const q = `SELECT e.id, e.type, ` + eventPayload + ` AS payload
	FROM events e WHERE e.merchant_id = $1 AND e.livemode = $2 ORDER BY e.seq`
	var out []StoredEvent
	if err := s.q.SelectContext(ctx, &out, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select events: %w", err)
	}
	return out, nil
}

// Event returns one of the scope's events; endpoint_not_found (see
// payments.Service.Event) when the scope has no such event.
func (s *Store) Event(ctx context.Context, sc payments.Scope, id string) (StoredEvent, error) {
	const q = `SELECT e.id, e.type, ` + eventPayload + ` AS payload
	FROM events e WHERE e.merchant_id = $1 AND e.livemode = $2 AND e.id = $3 AND e.created_at >= coalesce($4::timestamptz, '-infinity') AND e.created_at < coalesce($5::timestamptz, 'infinity')`
	lo, hi := idSpan(id)
	var out StoredEvent
	err := s.q.GetContext(ctx, &out, q, sc.MerchantID, sc.Live, id, lo, hi)
	if errors.Is(err, sql.ErrNoRows) {
		return StoredEvent{}, payments.Errorf(payments.EndpointNotFound, "No such event: '%s'", id)
	}
	if err != nil {
		return StoredEvent{}, fmt.Errorf("select event: %w", err)
	}
	return out, nil
}

// EventPage returns a page of the scope's events, newest first, on the
// events_page index: keyset after the starting_after row ($7, $8), created
// bounds as index conditions. The payload rounds created_at to whole
// seconds, so created[gte] S keeps created_at >= S - 0.5 s and created[lte]
// S keeps created_at < S + 0.5 s: exactly the events whose created is in
// range. The type filter: type = $3, or ($4) starts_with(type, $3) — the
// prefix is a literal, no LIKE pattern to escape; $3 = ” with $4 matches
// every type.
func (s *Store) EventPage(ctx context.Context, sc payments.Scope, f payments.EventFilter) (payments.Page[StoredEvent], error) {
	const cols = `SELECT e.id, e.type, ` + eventPayload + ` AS payload FROM events e
	WHERE e.merchant_id = $1 AND e.livemode = $2 AND (e.type = $3 OR ($4 AND starts_with(e.type, $3)))
		AND e.created_at >= coalesce($5::timestamptz, '-infinity') AND e.created_at < coalesce($6::timestamptz, 'infinity')`
	const first = cols + ` ORDER BY e.created_at DESC, e.id DESC LIMIT $7`
	const after = cols + ` AND (e.created_at, e.id) < ($7, $8) ORDER BY e.created_at DESC, e.id DESC LIMIT $9`
	var gte, lte *time.Time
	if f.CreatedGTE != nil {
		t := time.Unix(*f.CreatedGTE, 0).Add(-500 * time.Millisecond)
		gte = &t
	}
	if f.CreatedLTE != nil {
		t := time.Unix(*f.CreatedLTE, 0).Add(500 * time.Millisecond)
		lte = &t
	}
	args := []any{sc.MerchantID, sc.Live, f.Type, f.Prefix, gte, lte}
	q := first
	if f.StartingAfter != "" {
		lo, hi := idSpan(f.StartingAfter)
		c, err := s.loadCursor(ctx, `SELECT created_at, id FROM events WHERE merchant_id = $1 AND livemode = $2 AND id = $3
			AND created_at >= coalesce($4::timestamptz, '-infinity') AND created_at < coalesce($5::timestamptz, 'infinity')`, sc, f.StartingAfter, lo, hi)
		if err != nil {
			return payments.Page[StoredEvent]{}, err
		}
		q = after
		args = append(args, c.CreatedAt, c.ID)
	}
	var rows []StoredEvent
	if err := s.q.SelectContext(ctx, &rows, q, append(args, f.Limit+1)...); err != nil {
		return payments.Page[StoredEvent]{}, fmt.Errorf("select events: %w", err)
	}
	return page(rows, f.Limit), nil
}
