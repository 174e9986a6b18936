-- +goose Up
-- Customer portal sessions (issue 12, item 7): what POST
-- /v1/subscriptions/{id}/portal-session created. The page's URL carries the
-- session's id and an HMAC (PORTAL_SIGNING_KEY) over this row's binding:
-- merchant, mode, subscription, customer and expiry. The row alone (a
-- leaked database) grants nothing without the key, and the key alone
-- nothing without a row; expires_at is judged on the merchant's clock.
CREATE TABLE portal_sessions (
    id              text PRIMARY KEY, -- bps_…
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    subscription_id text NOT NULL REFERENCES subscriptions (id),
    customer_id     text NOT NULL REFERENCES customers (id),
    return_url      text NOT NULL,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (expires_at > created_at)
);

-- +goose Down
DROP TABLE portal_sessions;
