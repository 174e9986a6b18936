-- +goose Up
-- The merchant dashboard: its users, their sign-in sessions, and when each
-- API key was last used (shown on the dashboard's keys page).

-- A dashboard user belongs to one merchant. Emails are stored lower-cased
-- and are unique across merchants: sign-in asks for an email alone.
CREATE TABLE dashboard_users (
    id            text PRIMARY KEY,
    merchant_id   text NOT NULL REFERENCES merchants (id),
    email         text NOT NULL UNIQUE CHECK (email = lower(email)),
    role          text NOT NULL CHECK (role IN ('admin', 'viewer')),
    -- bcrypt of the password; the password itself is never stored.
    password_hash text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_users_merchant ON dashboard_users (merchant_id);

-- A signed-in browser. The cookie holds a random token; only its SHA-256
-- is stored, so a read of this table cannot be replayed as a session.
CREATE TABLE dashboard_sessions (
    token_hash bytea PRIMARY KEY,
    user_id    text NOT NULL REFERENCES dashboard_users (id) ON DELETE CASCADE,
    -- The token the session's forms carry against cross-site requests.
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_expiry ON dashboard_sessions (expires_at);

-- Written at most once a minute per key (payments.Service.Authenticate),
-- so the hot path of authentication stays a read.
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;

-- The events of one object (a detail page's timeline): its id, or the
-- payment it belongs to (refunds, disputes, sessions carry payment_intent).
CREATE INDEX events_object ON events (merchant_id, livemode, (data ->> 'id'), created_at DESC);
CREATE INDEX events_payment ON events (merchant_id, livemode, (data ->> 'payment_intent'), created_at DESC)
    WHERE data ? 'payment_intent';

-- +goose Down
DROP INDEX events_payment;
DROP INDEX events_object;
ALTER TABLE api_keys DROP COLUMN last_used_at;
DROP TABLE dashboard_sessions;
DROP TABLE dashboard_users;
