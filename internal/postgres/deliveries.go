package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
)

// deliveryLogRow is a delivery as the delivery log shows it.
type deliveryLogRow struct {
	ID               string         `db:"id"`
	Live             bool           `db:"livemode"`
	EndpointID       string         `db:"endpoint_id"`
	EventID          string         `db:"event_id"`
	EventType        sql.NullString `db:"event_type"`
	Status           string         `db:"status"`
	Attempts         int            `db:"attempts"`
	LastStatus       sql.NullInt64  `db:"last_status"`
	LastResponseBody sql.NullString `db:"last_response_body"`
	LastError        sql.NullString `db:"last_error"`
	NextAttemptAt    time.Time      `db:"next_attempt_at"`
	CreatedAt        time.Time      `db:"created_at"`
	DeliveredAt      sql.NullTime   `db:"delivered_at"`
}

func (r deliveryLogRow) record() payments.DeliveryRecord {
	d := payments.DeliveryRecord{ID: r.ID, Live: r.Live, EndpointID: r.EndpointID, EventID: r.EventID, EventType: r.EventType.String,
		Status: r.Status, Attempts: r.Attempts, LastResponseBody: strPtr(r.LastResponseBody), LastError: strPtr(r.LastError),
		NextAttemptAt: r.NextAttemptAt, Created: r.CreatedAt, DeliveredAt: timePtr(r.DeliveredAt)}
	if r.LastStatus.Valid {
		st := int(r.LastStatus.Int64)
		d.LastHTTPStatus = &st
	}
	return d
}

// legacy reports whether the row was written without the delivery log's
// own columns (migration 0020): by a version before it, or by one still
// running beside this one during an upgrade. Every delivery written since
// has its event's type, and every attempt recorded since writes its
// response with it (empty when there was none).
func (r deliveryLogRow) legacy() bool {
	return !r.EventType.Valid || (r.Attempts > 0 && !r.LastResponseBody.Valid)
}

// deliveryLogCols is the delivery log's select list, of webhook_deliveries
// (aliased d) alone.
const deliveryLogCols = `SELECT d.id, d.livemode, d.endpoint_id, d.event_id, d.event_type, d.status, d.attempts,
	d.last_status, d.last_response_body, d.last_error, d.next_attempt_at, d.created_at, d.delivered_at`

// liveEndpoint checks that the scope has the endpoint, not deleted.
func (s *Store) liveEndpoint(ctx context.Context, sc payments.Scope, id string) error {
	const q = `SELECT true FROM webhook_endpoints WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL`
	var ok bool
	err := s.q.GetContext(ctx, &ok, q, sc.MerchantID, sc.Live, id)
	if errors.Is(err, sql.ErrNoRows) {
		return endpointNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("select endpoint: %w", err)
	}
	return nil
}

// deliveryPageKey names one statement of EndpointDeliveries.
type deliveryPageKey struct {
	status string // one of payments' delivery statuses, "" for all
	after  bool   // the page after a cursor
	rows   int    // its LIMIT (pageRows)
}

// deliveryPages holds EndpointDeliveries' statements, made once each
// (three statuses or none, a cursor or not, five sizes).
var deliveryPages statementTexts[deliveryPageKey]

// deliveryPageQuery is the statement of a page of an endpoint's deliveries,
// newest first: $1, $2 the scope, $3 the endpoint, ($4, $5) the cursor's
// (created_at, id). As eventPageQuery, each variant is a statement of its
// own, the status a literal and the LIMIT a constant, so that the generic
// plan is kept, and so that the planner sees from the column's statistics
// that failed and pending deliveries are few and reads them from their
// partial indexes (webhook_deliveries_failed, webhook_deliveries_pending):
// on webhook_deliveries_endpoint a page of an endpoint's failures read
// every one of its deliveries.
//
// It reads webhook_deliveries alone (migration 0020). Joined to the events
// and the attempts, each row of the page was costed at the lookups of
// seven partitions of each: for an endpoint the planner estimated at one
// row per partition, fewer than the page, a custom plan then looked
// cheaper than the generic one, so every call was planned again (2.4 ms)
// and the plan sorted all of the endpoint's deliveries.
func deliveryPageQuery(k deliveryPageKey) string {
	return deliveryPages.get(k, func() string { return buildDeliveryPageQuery(k) })
}

func buildDeliveryPageQuery(k deliveryPageKey) string {
	// The endpoint must be live: its deliveries stay when it is deleted.
	// Checked here, so a page is one round trip; an empty page cannot tell
	// a missing endpoint from one without deliveries, and EndpointDeliveries
	// asks which then.
	q := deliveryLogCols + ` FROM webhook_deliveries d WHERE d.merchant_id = $1 AND d.livemode = $2 AND d.endpoint_id = $3
	AND EXISTS (SELECT FROM webhook_endpoints w WHERE w.merchant_id = $1 AND w.livemode = $2 AND w.id = $3 AND w.deleted_at IS NULL)`
	if k.status != "" {
		q += ` AND d.status = ` + pq.QuoteLiteral(k.status)
	}
	if k.after {
		q += ` AND (d.created_at, d.id) < ($4, $5)`
	}
	return q + ` ORDER BY d.created_at DESC, d.id DESC LIMIT ` + strconv.Itoa(k.rows)
}

// EndpointDeliveries returns a page of an endpoint's deliveries, newest
// first (deliveryPageQuery); status "" is every status. starting_after
// must be a delivery of that endpoint. The endpoint is looked up on its own
// only when the cursor or the page comes back empty, to tell which error
// (or empty page) that is.
func (s *Store) EndpointDeliveries(ctx context.Context, sc payments.Scope, endpointID string, f payments.DeliveryFilter) (payments.Page[payments.DeliveryRecord], error) {
	k := deliveryPageKey{status: f.Status, rows: pageSize(f.Limit)}
	args := []any{sc.MerchantID, sc.Live, endpointID}
	if f.StartingAfter != "" {
		const cq = `SELECT created_at, id FROM webhook_deliveries WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND endpoint_id = $4
			AND event_created_at >= coalesce($5::timestamptz, '-infinity') AND event_created_at < coalesce($6::timestamptz, 'infinity')`
		lo, hi := idSpan(f.StartingAfter)
		var c cursor
		err := s.q.GetContext(ctx, &c, cq, sc.MerchantID, sc.Live, f.StartingAfter, endpointID, lo, hi)
		if errors.Is(err, sql.ErrNoRows) {
			// An unknown endpoint is endpoint_not_found, not an unknown cursor.
			if err := s.liveEndpoint(ctx, sc, endpointID); err != nil {
				return payments.Page[payments.DeliveryRecord]{}, err
			}
			return payments.Page[payments.DeliveryRecord]{}, payments.Invalid("starting_after", "is not a known delivery of %s: '%s'", endpointID, f.StartingAfter)
		}
		if err != nil {
			return payments.Page[payments.DeliveryRecord]{}, fmt.Errorf("select cursor: %w", err)
		}
		k.after = true
		args = append(args, c.CreatedAt, c.ID)
	}
	var rows []deliveryLogRow
	if err := scanRows(ctx, &s.q, &rows, f.Limit+1, deliveryPageQuery(k), args...); err != nil {
		return payments.Page[payments.DeliveryRecord]{}, fmt.Errorf("select deliveries: %w", err)
	}
	if len(rows) == 0 { // no deliveries, or no such endpoint (deliveryPageQuery)
		if err := s.liveEndpoint(ctx, sc, endpointID); err != nil {
			return payments.Page[payments.DeliveryRecord]{}, err
		}
	}
	if err := s.legacyDeliveries(ctx, sc, rows); err != nil {
		return payments.Page[payments.DeliveryRecord]{}, err
	}
	out := make([]payments.DeliveryRecord, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.record())
	}
	return page(out, f.Limit), nil
}

// legacyDeliveries fills in the legacy rows among rows
// (deliveryLogRow.legacy) as the delivery log read every row before
// migration 0020: the type from the event, the response from the last
// attempt (on webhook_attempts' (scope, delivery_id, created_at) index),
// each in its delivery's partition. One statement for them all, and none
// when there are none.
func (s *Store) legacyDeliveries(ctx context.Context, sc payments.Scope, rows []deliveryLogRow) error {
	var ids []string
	for _, r := range rows {
		if r.legacy() {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	const q = `SELECT d.id, e.type, la.response_body FROM webhook_deliveries d
	JOIN events e ON e.id = d.event_id AND e.created_at = d.event_created_at -- its partition
	LEFT JOIN LATERAL (SELECT a.response_body FROM webhook_attempts a
		WHERE a.merchant_id = d.merchant_id AND a.livemode = d.livemode AND a.delivery_id = d.id
			AND a.event_created_at = d.event_created_at
		ORDER BY a.created_at DESC LIMIT 1) la ON true
	WHERE d.merchant_id = $1 AND d.livemode = $2 AND d.id = ANY($3)`
	var found []struct {
		ID           string         `db:"id"`
		Type         string         `db:"type"`
		ResponseBody sql.NullString `db:"response_body"`
	}
	if err := s.q.SelectContext(ctx, &found, q, sc.MerchantID, sc.Live, pq.Array(ids)); err != nil {
		return fmt.Errorf("select legacy deliveries: %w", err)
	}
	for _, f := range found {
		for i := range rows {
			if rows[i].ID == f.ID {
				rows[i].EventType = sql.NullString{String: f.Type, Valid: true}
				rows[i].LastResponseBody = f.ResponseBody
			}
		}
	}
	return nil
}

// EndpointDelivery returns one delivery of an endpoint with every attempt,
// oldest first; endpoint_not_found for an unknown endpoint or delivery.
func (s *Store) EndpointDelivery(ctx context.Context, sc payments.Scope, endpointID, deliveryID string) (payments.DeliveryRecord, error) {
	if err := s.liveEndpoint(ctx, sc, endpointID); err != nil {
		return payments.DeliveryRecord{}, err
	}
	const q = deliveryLogCols + ` FROM webhook_deliveries d
	WHERE d.merchant_id = $1 AND d.livemode = $2 AND d.endpoint_id = $3 AND d.id = $4 AND d.event_created_at >= coalesce($5::timestamptz, '-infinity') AND d.event_created_at < coalesce($6::timestamptz, 'infinity')`
	lo, hi := idSpan(deliveryID)
	rows := make([]deliveryLogRow, 1)
	err := s.q.GetContext(ctx, &rows[0], q, sc.MerchantID, sc.Live, endpointID, deliveryID, lo, hi)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.DeliveryRecord{}, payments.Errorf(payments.EndpointNotFound, "No such delivery: '%s'", deliveryID)
	}
	if err != nil {
		return payments.DeliveryRecord{}, fmt.Errorf("select delivery: %w", err)
	}
	if err := s.legacyDeliveries(ctx, sc, rows); err != nil {
		return payments.DeliveryRecord{}, err
	}
	r := rows[0]
	var attempts []struct {
		At           time.Time      `db:"created_at"`
		HTTPStatus   sql.NullInt64  `db:"http_status"`
		ResponseBody string         `db:"response_body"`
		Error        sql.NullString `db:"error"`
	}
	const aq = `SELECT created_at, http_status, response_body, error FROM webhook_attempts
	WHERE merchant_id = $1 AND livemode = $2 AND delivery_id = $3 AND event_created_at >= coalesce($4::timestamptz, '-infinity') AND event_created_at < coalesce($5::timestamptz, 'infinity') ORDER BY created_at, id`
	if err := s.q.SelectContext(ctx, &attempts, aq, sc.MerchantID, sc.Live, deliveryID, lo, hi); err != nil {
		return payments.DeliveryRecord{}, fmt.Errorf("select attempts: %w", err)
	}
	d := r.record()
	d.Log = make([]payments.AttemptRecord, 0, len(attempts))
	for _, a := range attempts {
		rec := payments.AttemptRecord{At: a.At, ResponseBody: a.ResponseBody, Error: strPtr(a.Error)}
		if a.HTTPStatus.Valid {
			st := int(a.HTTPStatus.Int64)
			rec.HTTPStatus = &st
		}
		d.Log = append(d.Log, rec)
	}
	return d, nil
}

// ResendEvent inserts a new pending delivery of an event to an endpoint and
// leaves its job for after commit (the queue of every delivery). The
// delivery lives in its event's partition (event_created_at) and its id
// carries that time. The event row is locked FOR KEY SHARE first, so the
// event's partition cannot be detached by retention meanwhile (DETACH waits
// for the lock), and retention keeps a partition while it holds a pending
// delivery (dropExpired); after a drop the event is not found.
func (s *Store) ResendEvent(ctx context.Context, sc payments.Scope, eventID, endpointID string, now time.Time, check func(eventType string, e payments.Endpoint) error) (payments.DeliveryRecord, error) {
	var d payments.DeliveryRecord
	err := s.inTx(ctx, func(tx *txn) error {
		var ev struct {
			Type    string    `db:"type"`
			Created time.Time `db:"created_at"`
		}
		const evq = `SELECT type, created_at FROM events WHERE merchant_id = $1 AND livemode = $2 AND id = $3
			AND created_at >= coalesce($4::timestamptz, '-infinity') AND created_at < coalesce($5::timestamptz, 'infinity') FOR KEY SHARE`
		lo, hi := idSpan(eventID)
		err := tx.GetContext(ctx, &ev, evq, sc.MerchantID, sc.Live, eventID, lo, hi)
		eventType := ev.Type
		if errors.Is(err, sql.ErrNoRows) {
			return payments.Errorf(payments.EndpointNotFound, "No such event: '%s'", eventID)
		}
		if err != nil {
			return fmt.Errorf("lock event: %w", err)
		}
		// FOR SHARE: a concurrent disable or delete waits for this insert,
		// then fails the new delivery with the endpoint's other pending ones.
		q := `SELECT ` + endpointCols + ` FROM webhook_endpoints
		WHERE merchant_id = $1 AND livemode = $2 AND id = $3 AND deleted_at IS NULL FOR SHARE`
		var r endpointRow
		err = tx.GetContext(ctx, &r, q, sc.MerchantID, sc.Live, endpointID)
		if errors.Is(err, sql.ErrNoRows) {
			return endpointNotFound(endpointID)
		}
		if err != nil {
			return fmt.Errorf("lock endpoint: %w", err)
		}
		e, err := r.endpoint()
		if err != nil {
			return err
		}
		if err := check(eventType, e); err != nil {
			return err
		}
		const ins = `INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, next_attempt_at, created_at, event_created_at)
		VALUES ($1, $2, $3, $4, $8, $5, 'pending', $6, $6, $7)`
		id := payments.NewTimedID("whd_", ev.Created)
		if _, err := tx.ExecContext(ctx, ins, id, sc.MerchantID, sc.Live, eventID, endpointID, now, ev.Created, eventType); err != nil {
			return fmt.Errorf("insert delivery: %w", err)
		}
		tx.jobs = append(tx.jobs, payments.Job{Kind: payments.JobDeliverWebhook, ID: id, MerchantID: sc.MerchantID, Live: sc.Live})
		d = payments.DeliveryRecord{ID: id, Live: sc.Live, EndpointID: endpointID, EventID: eventID, EventType: eventType,
			Status: payments.DeliveryPending, NextAttemptAt: now, Created: now}
		return nil
	})
	return d, err
}
