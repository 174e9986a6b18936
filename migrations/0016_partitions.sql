-- +goose Up
-- Retention by partition (issue 16, item 6). Events, webhook deliveries,
-- their attempts and Idempotency-Key records become tables partitioned by
-- range on a time, one partition per UTC week from a Monday, so that
-- retention drops a whole week (DETACH + DROP, internal/postgres/partitions.go) instead of
-- deleting rows. Nothing else is partitioned: the ledger and the money
-- tables are never touched by retention.
--
--   events              by created_at
--   webhook_deliveries  by event_created_at: its event's created_at, so an
--   webhook_attempts    event, every delivery of it (resends included) and
--                       every attempt of those share a week and leave together
--   idempotency_keys    by created_at (the claim's time; new column)
--
-- PostgreSQL requires every unique key of a partitioned table to include
-- the partition column, so the primary keys become (id, partition column).
-- The foreign keys between these tables (deliveries → events, attempts →
-- deliveries) are dropped, not widened: detaching a referenced partition
-- re-checks the whole referencing table under an exclusive lock. The
-- shared partition time replaces them: a delivery is written in the
-- statement of its event (or by a resend holding the event), and a week's
-- partitions of the three tables are dropped together. Foreign keys to merchants and
-- endpoints (plain tables) stay.
--
-- Every row is moved: into a partition "<table>_before_<next Monday>"
-- holding everything before the end of the week of the migration (dropped
-- as a whole when that week expires), or, for rows dated later (sandbox
-- clocks run ahead), the default partition "<table>_default", from which
-- partition maintenance moves rows into their week's partition (created
-- then). A new
-- database (no rows) gets no _before_ partition.
-- Ids minted from now on carry their partition time (payments.NewTimedID);
-- ids minted before are found by probing each partition's primary key.

ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_delivery_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey;
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER TABLE webhook_deliveries RENAME TO webhook_deliveries_unpartitioned;
ALTER TABLE webhook_attempts RENAME TO webhook_attempts_unpartitioned;
ALTER TABLE idempotency_keys RENAME TO idempotency_keys_unpartitioned;

CREATE TABLE events (
    id          text NOT NULL,
    -- The order events were written in; created_at ties within a transaction.
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    type        text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (created_at);

CREATE TABLE webhook_deliveries (
    id               text NOT NULL,
    merchant_id      text NOT NULL REFERENCES merchants (id),
    livemode         boolean NOT NULL,
    event_id         text NOT NULL,
    endpoint_id      text NOT NULL REFERENCES webhook_endpoints (id),
    status           text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    last_status      integer,
    last_error       text,
    next_attempt_at  timestamptz NOT NULL,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    event_created_at timestamptz NOT NULL -- the event's created_at: the partition
) PARTITION BY RANGE (event_created_at);

CREATE TABLE webhook_attempts (
    id               text NOT NULL,
    merchant_id      text NOT NULL REFERENCES merchants (id),
    livemode         boolean NOT NULL,
    delivery_id      text NOT NULL,
    http_status      integer,          -- NULL when no response came
    response_body    text NOT NULL DEFAULT '', -- at most 1 KiB (payments.MaxAttemptResponse)
    error            text,             -- NULL on success
    created_at       timestamptz NOT NULL,
    event_created_at timestamptz NOT NULL -- its delivery's: the partition
) PARTITION BY RANGE (event_created_at);

CREATE TABLE idempotency_keys (
    merchant_id  text NOT NULL,
    livemode     boolean NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    status       integer,          -- null while the first request is in flight
    response     bytea,
    request_id   text,
    locked_at    timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now() -- when the key was claimed: the partition
) PARTITION BY RANGE (created_at);

-- +goose StatementBegin
DO $$
DECLARE
    t    text;
    cut  timestamptz := (date_trunc('week', now() AT TIME ZONE 'UTC') + interval '7 days') AT TIME ZONE 'UTC';
    name text := to_char(date_trunc('week', now() AT TIME ZONE 'UTC') + interval '7 days', 'YYYYMMDD');
BEGIN
    FOREACH t IN ARRAY ARRAY['events', 'webhook_deliveries', 'webhook_attempts', 'idempotency_keys'] LOOP
        -- A database with rows to move (a new one has none: its partitions
        -- are all weeks, created by the first maintenance run).
        IF EXISTS (SELECT 1 FROM events_unpartitioned) OR EXISTS (SELECT 1 FROM idempotency_keys_unpartitioned) THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (MINVALUE) TO (%L)', t || '_before_' || name, t, cut);
        END IF;
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', t || '_default', t);
    END LOOP;
END $$;
-- +goose StatementEnd

INSERT INTO events (id, seq, merchant_id, livemode, type, data, created_at) OVERRIDING SYSTEM VALUE
SELECT id, seq, merchant_id, livemode, type, data, created_at FROM events_unpartitioned;
SELECT setval(pg_get_serial_sequence('events', 'seq'), (SELECT max(seq) FROM events_unpartitioned))
WHERE EXISTS (SELECT 1 FROM events_unpartitioned);

INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, attempts, last_status,
    last_error, next_attempt_at, delivered_at, created_at, event_created_at)
SELECT d.id, d.merchant_id, d.livemode, d.event_id, d.endpoint_id, d.status, d.attempts, d.last_status,
    d.last_error, d.next_attempt_at, d.delivered_at, d.created_at, e.created_at
FROM webhook_deliveries_unpartitioned d JOIN events_unpartitioned e ON e.id = d.event_id;

INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, response_body, error, created_at, event_created_at)
SELECT a.id, a.merchant_id, a.livemode, a.delivery_id, a.http_status, a.response_body, a.error, a.created_at, e.created_at
FROM webhook_attempts_unpartitioned a
JOIN webhook_deliveries_unpartitioned d ON d.id = a.delivery_id
JOIN events_unpartitioned e ON e.id = d.event_id;

INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at, created_at)
SELECT merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at, locked_at
FROM idempotency_keys_unpartitioned;

DROP TABLE webhook_attempts_unpartitioned;
DROP TABLE webhook_deliveries_unpartitioned;
DROP TABLE events_unpartitioned;
DROP TABLE idempotency_keys_unpartitioned;

ALTER TABLE events ADD PRIMARY KEY (id, created_at);
CREATE INDEX events_page ON events (merchant_id, livemode, created_at DESC, id DESC);
CREATE INDEX events_object ON events (merchant_id, livemode, (data ->> 'id'), created_at DESC);
CREATE INDEX events_payment ON events (merchant_id, livemode, (data ->> 'payment_intent'), created_at DESC)
    WHERE data ? 'payment_intent';

ALTER TABLE webhook_deliveries ADD PRIMARY KEY (id, event_created_at);
-- The relay scans pending deliveries whose attempt is overdue; retention
-- asks a day's partition whether it still has one.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (merchant_id, livemode, event_id);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (merchant_id, livemode, endpoint_id, created_at DESC, id DESC);

ALTER TABLE webhook_attempts ADD PRIMARY KEY (id, event_created_at);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (merchant_id, livemode, delivery_id, created_at);

-- One live record per key is kept by the claim (idempotency_claim), which
-- serializes the claims of a key on a transaction-level advisory lock:
-- a unique key would have to include created_at and could not.
ALTER TABLE idempotency_keys ADD PRIMARY KEY (merchant_id, livemode, key, created_at);

-- idempotency_claim claims an Idempotency-Key in the caller's transaction
-- (the request's), in one round trip: it takes the key's transaction-level
-- advisory lock, waiting at most p_wait (lock_timeout, put back after), so
-- a request racing an in-flight one with the same key waits until that one
-- commits or rolls back; then, on a fresh snapshot (each statement of a
-- volatile function takes one), it returns the key's live record (claimed
-- false; status null: a claim of a version before the request transaction,
-- still in flight) or inserts the claim (claimed true). Live: not expired,
-- and not such a legacy claim older than p_stale. Records of a key are
-- looked for in the partitions of the last TTL only (created_at after
-- p_now minus the TTL, p_expires - p_now).
-- +goose StatementBegin
CREATE FUNCTION idempotency_claim(p_merchant text, p_live boolean, p_key text, p_hash bytea,
    p_now timestamptz, p_expires timestamptz, p_stale timestamptz, p_wait text)
RETURNS TABLE (claimed boolean, request_hash bytea, status integer, response bytea, request_id text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    prev text := current_setting('lock_timeout');
BEGIN
    PERFORM set_config('lock_timeout', p_wait, true);
    PERFORM pg_advisory_xact_lock(hashtextextended(p_merchant || '/' || p_live::text || '/' || p_key, 16));
    PERFORM set_config('lock_timeout', prev, true);
    RETURN QUERY SELECT false, k.request_hash, k.status, k.response, k.request_id FROM idempotency_keys k
        WHERE k.merchant_id = p_merchant AND k.livemode = p_live AND k.key = p_key
            AND k.created_at > p_now - (p_expires - p_now) - interval '1 minute'
            AND k.expires_at >= p_now AND NOT (k.status IS NULL AND k.locked_at < p_stale)
        ORDER BY k.created_at DESC LIMIT 1;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, locked_at, expires_at, created_at)
    VALUES (p_merchant, p_live, p_key, p_hash, p_now, p_expires, p_now);
    RETURN QUERY SELECT true, p_hash, NULL::integer, NULL::bytea, NULL::text;
END $$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE events RENAME TO events_partitioned;
ALTER TABLE webhook_deliveries RENAME TO webhook_deliveries_partitioned;
ALTER TABLE webhook_attempts RENAME TO webhook_attempts_partitioned;
ALTER TABLE idempotency_keys RENAME TO idempotency_keys_partitioned;

CREATE TABLE events (
    id          text PRIMARY KEY,
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    type        text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO events (id, seq, merchant_id, livemode, type, data, created_at) OVERRIDING SYSTEM VALUE
SELECT id, seq, merchant_id, livemode, type, data, created_at FROM events_partitioned;
SELECT setval(pg_get_serial_sequence('events', 'seq'), (SELECT max(seq) FROM events_partitioned))
WHERE EXISTS (SELECT 1 FROM events_partitioned);

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
INSERT INTO webhook_deliveries SELECT id, merchant_id, livemode, event_id, endpoint_id, status, attempts, last_status,
    last_error, next_attempt_at, delivered_at, created_at FROM webhook_deliveries_partitioned;

CREATE TABLE webhook_attempts (
    id            text PRIMARY KEY,
    merchant_id   text NOT NULL REFERENCES merchants (id),
    livemode      boolean NOT NULL,
    delivery_id   text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    http_status   integer,
    response_body text NOT NULL DEFAULT '',
    error         text,
    created_at    timestamptz NOT NULL
);
INSERT INTO webhook_attempts SELECT id, merchant_id, livemode, delivery_id, http_status, response_body, error, created_at
FROM webhook_attempts_partitioned;

CREATE TABLE idempotency_keys (
    merchant_id  text NOT NULL,
    livemode     boolean NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    status       integer,
    response     bytea,
    request_id   text,
    locked_at    timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, livemode, key)
);
INSERT INTO idempotency_keys SELECT DISTINCT ON (merchant_id, livemode, key)
    merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at
FROM idempotency_keys_partitioned ORDER BY merchant_id, livemode, key, created_at DESC;

DROP TABLE events_partitioned, webhook_deliveries_partitioned, webhook_attempts_partitioned, idempotency_keys_partitioned;
DROP FUNCTION idempotency_claim;

CREATE INDEX events_page ON events (merchant_id, livemode, created_at DESC, id DESC);
CREATE INDEX events_object ON events (merchant_id, livemode, (data ->> 'id'), created_at DESC);
CREATE INDEX events_payment ON events (merchant_id, livemode, (data ->> 'payment_intent'), created_at DESC)
    WHERE data ? 'payment_intent';
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (merchant_id, livemode, event_id);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (merchant_id, livemode, endpoint_id, created_at DESC, id DESC);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (merchant_id, livemode, delivery_id, created_at);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);
