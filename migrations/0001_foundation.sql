-- +goose Up
-- Every merchant-owned row carries merchant_id and livemode, and every index
-- used by the API leads with them: test and live data never meet, and one
-- merchant's page never scans another's rows.

CREATE TABLE merchants (
    id             text PRIMARY KEY,
    name           text NOT NULL,
    email          text,
    plan           text NOT NULL CHECK (plan IN ('free', 'brand', 'pro')),
    suspended_at   timestamptz,
    -- Violations before this instant no longer count toward a suspension.
    unsuspended_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    -- SHA-256 of the whole key: keys are 190 bits of randomness, so a fast
    -- hash is as safe as a slow one and keeps authentication one index probe.
    key_hash    bytea NOT NULL UNIQUE,
    -- The first characters of the key, shown to operators to tell keys apart.
    hint        text NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_merchant_created ON api_keys (merchant_id, created_at);

CREATE TABLE products (
    id                   text PRIMARY KEY,
    merchant_id          text NOT NULL REFERENCES merchants (id),
    livemode             boolean NOT NULL,
    name                 text NOT NULL,
    description          text,
    active               boolean NOT NULL DEFAULT true,
    images               jsonb NOT NULL DEFAULT '[]',
    url                  text,
    metadata             jsonb NOT NULL DEFAULT '{}',
    shippable            boolean,
    unit_label           text,
    statement_descriptor text CHECK (char_length(statement_descriptor) <= 22),
    tax_code             text,
    default_price_id     text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
-- Keyset pagination: newest first, ties broken by id.
CREATE INDEX products_page ON products (merchant_id, livemode, created_at DESC, id DESC);

CREATE TABLE prices (
    id           text PRIMARY KEY,
    merchant_id  text NOT NULL REFERENCES merchants (id),
    livemode     boolean NOT NULL,
    product_id   text NOT NULL REFERENCES products (id),
    amount       bigint NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency     text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    tax_behavior text CHECK (tax_behavior IN ('inclusive', 'exclusive', 'unspecified')),
    active       boolean NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX prices_product ON prices (merchant_id, livemode, product_id);
ALTER TABLE products ADD CONSTRAINT products_default_price_fk
    FOREIGN KEY (default_price_id) REFERENCES prices (id) DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE customers (
    id          text PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    email       text,
    name        text,
    phone       text,
    metadata    jsonb NOT NULL DEFAULT '{}',
    -- Deleted customers answer 404 but stay for the payments that name them.
    deleted_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX customers_page ON customers (merchant_id, livemode, created_at DESC, id DESC)
    WHERE deleted_at IS NULL;

-- Idempotency-Key records (Stripe's behaviour): the first request with a key
-- owns the row; concurrent duplicates wait for its response and replay it.
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
    PRIMARY KEY (merchant_id, livemode, key)
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

CREATE TABLE content_violations (
    id          bigserial PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    field       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX content_violations_merchant ON content_violations (merchant_id, created_at);

-- +goose Down
DROP TABLE content_violations;
DROP TABLE idempotency_keys;
DROP TABLE customers;
ALTER TABLE products DROP CONSTRAINT products_default_price_fk;
DROP TABLE prices;
DROP TABLE products;
DROP TABLE api_keys;
DROP TABLE merchants;
