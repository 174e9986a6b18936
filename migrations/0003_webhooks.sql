-- +goose Up
CREATE TABLE webhook_endpoints (
    id                   text PRIMARY KEY,
    merchant_id          text NOT NULL REFERENCES merchants (id),
    livemode             boolean NOT NULL,
    url                  text NOT NULL,
    events               jsonb NOT NULL,  -- event types, or ["*"]
    description          text,
    status               text NOT NULL CHECK (status IN ('enabled', 'disabled')),
    -- The signing secret sealed with SECRETS_KEY (AES-GCM); never stored in clear.
    secret_sealed        bytea NOT NULL,
    consecutive_failures integer NOT NULL DEFAULT 0,
    deleted_at           timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoints_scope ON webhook_endpoints (merchant_id, livemode) WHERE deleted_at IS NULL;

-- One delivery per event and subscribed endpoint, written in the event's
-- transaction. The row is the truth; the Asynq task (TaskID = id) is only
-- work in flight, rebuilt by the scheduler's relay when Redis loses it.
CREATE TABLE webhook_deliveries (
    id              text PRIMARY KEY,
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    event_id        text NOT NULL REFERENCES events (id),
    endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id),
    status          text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    last_status     integer,
    last_error      text,
    next_attempt_at timestamptz NOT NULL,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- The relay scans pending deliveries whose attempt is overdue.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (merchant_id, livemode, event_id);

-- +goose Down
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
