package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"paysvc/internal/payments"
)

// insertEvents writes events in the caller's transaction (the outbox), each
// with one delivery per enabled endpoint of the scope subscribed to its type,
// in one statement per event. The deliveries are enqueued after commit.
func insertEvents(ctx context.Context, tx *txn, sc payments.Scope, events []payments.Event) error {
	const q = `WITH e AS (
		INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)
		RETURNING id, type, created_at
	)
	INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, created_at)
	SELECT 'whd_' || replace(gen_random_uuid()::text, '-', ''), we.merchant_id, we.livemode, e.id, we.id, 'pending',
		e.created_at, e.created_at
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
		for _, id := range ids {
			tx.jobs = append(tx.jobs, payments.Job{Kind: payments.JobDeliverWebhook, ID: id, MerchantID: sc.MerchantID, Live: sc.Live})
		}
	}
	return nil
}

// StoredEvent is an event row as delivery reads it.
type StoredEvent struct {
	ID      string `db:"id"`
	Type    string `db:"type"`
	Payload []byte `db:"payload"`
}

// Events returns the scope's events in the order they were written.
func (s *Store) Events(ctx context.Context, sc payments.Scope) ([]StoredEvent, error) {
	const q = `SELECT id, type, json_build_object('id', id, 'type', type, 'created', extract(epoch from created_at)::bigint,
		'livemode', livemode, 'data', data)::text AS payload
	FROM events WHERE merchant_id = $1 AND livemode = $2 ORDER BY seq`
	var out []StoredEvent
	if err := s.q.SelectContext(ctx, &out, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select events: %w", err)
	}
	return out, nil
}
