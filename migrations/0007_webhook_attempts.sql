-- +goose Up
-- Every attempt of every webhook delivery, for the delivery log and the
-- portal: when, the receiver's HTTP status, the start of its response body
-- and the error. Written in the statement (or transaction) that records the
-- attempt on its delivery.
CREATE TABLE webhook_attempts (
    id            text PRIMARY KEY,
    merchant_id   text NOT NULL REFERENCES merchants (id),
    livemode      boolean NOT NULL,
    delivery_id   text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    http_status   integer,          -- NULL when no response came
    response_body text NOT NULL DEFAULT '', -- at most 1 KiB (payments.MaxAttemptResponse)
    error         text,             -- NULL on success
    created_at    timestamptz NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (merchant_id, livemode, delivery_id, created_at);

-- +goose Down
DROP TABLE webhook_attempts;
