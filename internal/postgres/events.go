package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
)

// insertEvents writes events in the caller's transaction (the outbox).
func insertEvents(ctx context.Context, tx *sqlx.Tx, sc payments.Scope, events []payments.Event) error {
	const q = `INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)`
	for _, e := range events {
		data, err := json.Marshal(e.Data)
		if err != nil {
			return fmt.Errorf("marshal event %s: %w", e.Type, err)
		}
		if _, err := tx.ExecContext(ctx, q, e.ID, sc.MerchantID, sc.Live, e.Type, string(data), e.Created); err != nil {
			return fmt.Errorf("insert event %s: %w", e.Type, err)
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
	if err := s.db.SelectContext(ctx, &out, q, sc.MerchantID, sc.Live); err != nil {
		return nil, fmt.Errorf("select events: %w", err)
	}
	return out, nil
}
