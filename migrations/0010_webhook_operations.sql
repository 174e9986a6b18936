-- +goose Up
-- Webhook operations (issue 13): why and when an endpoint was disabled, when
-- it last received a delivery, and the previous signing secret that still
-- signs during a rotation's grace period.
ALTER TABLE webhook_endpoints
    -- 'consecutive_failures', 'gone' (the receiver answered 410) or 'manual';
    -- NULL while enabled.
    ADD COLUMN disabled_reason            text,
    ADD COLUMN disabled_at                timestamptz,
    -- The last successful delivery, kept to the second: the success statement
    -- writes it only when the second changes, so a busy endpoint's row is
    -- written about once a second, not once a delivery.
    ADD COLUMN last_delivery_at           timestamptz,
    -- The secret replaced by the last rotation, sealed like secret_sealed,
    -- and until when deliveries are signed with it as well (wall time).
    ADD COLUMN previous_secret_sealed     bytea,
    ADD COLUMN previous_secret_expires_at timestamptz;

-- The delivery log of an endpoint, newest first (keyset paging), and the
-- pending deliveries failed when an endpoint is disabled or deleted.
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (merchant_id, livemode, endpoint_id, created_at DESC, id DESC);

-- +goose Down
DROP INDEX webhook_deliveries_endpoint;
ALTER TABLE webhook_endpoints
    DROP COLUMN disabled_reason,
    DROP COLUMN disabled_at,
    DROP COLUMN last_delivery_at,
    DROP COLUMN previous_secret_sealed,
    DROP COLUMN previous_secret_expires_at;
