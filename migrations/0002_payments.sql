-- +goose Up
-- Hosted checkout sessions, payments (payment intents) and the event outbox.

CREATE TABLE checkout_sessions (
    id                         text PRIMARY KEY,
    merchant_id                text NOT NULL REFERENCES merchants (id),
    livemode                   boolean NOT NULL,
    mode                       text NOT NULL DEFAULT 'payment' CHECK (mode IN ('payment', 'subscription')),
    status                     text NOT NULL CHECK (status IN ('open', 'complete', 'expired')),
    payment_status             text NOT NULL CHECK (payment_status IN ('unpaid', 'paid', 'no_payment_required')),
    currency                   text NOT NULL,
    amount_subtotal            bigint NOT NULL CHECK (amount_subtotal >= 0),
    amount_total               bigint NOT NULL CHECK (amount_total >= 0),
    pass_fees_to_customer      boolean NOT NULL DEFAULT false,
    line_items                 jsonb NOT NULL,
    customer_id                text,
    customer_email             text,
    success_url                text NOT NULL,
    cancel_url                 text NOT NULL,
    collect_shipping_address   boolean NOT NULL DEFAULT false,
    billing_address_collection text CHECK (billing_address_collection IN ('auto', 'required')),
    shipping_countries         jsonb NOT NULL DEFAULT '[]',
    shipping_options           jsonb NOT NULL DEFAULT '[]',
    shipping_details           jsonb,
    billing_details            jsonb,
    metadata                   jsonb NOT NULL DEFAULT '{}',
    url                        text,
    payment_intent_id          text,
    subscription_id            text,
    expires_at                 timestamptz NOT NULL,
    completed_at               timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX checkout_sessions_page ON checkout_sessions (merchant_id, livemode, created_at DESC, id DESC);
-- The expiry sweep reads only open sessions, oldest deadline first.
CREATE INDEX checkout_sessions_expiry ON checkout_sessions (expires_at) WHERE status = 'open';

-- A payment is a payment intent: from a checkout session or created for the
-- embedded flow. Amounts are minor units; fee and net are fixed at success.
CREATE TABLE payment_intents (
    id                 text PRIMARY KEY,
    merchant_id        text NOT NULL REFERENCES merchants (id),
    livemode           boolean NOT NULL,
    amount             bigint NOT NULL CHECK (amount > 0),
    amount_received    bigint NOT NULL DEFAULT 0 CHECK (amount_received >= 0),
    currency           text NOT NULL,
    status             text NOT NULL CHECK (status IN ('requires_payment_method', 'processing', 'succeeded', 'canceled')),
    fee_amount         bigint NOT NULL DEFAULT 0,
    customer_id        text,
    customer_name      text,
    customer_email     text,
    description        text,
    metadata           jsonb NOT NULL DEFAULT '{}',
    session_id         text REFERENCES checkout_sessions (id),
    -- Embedded flow only: SHA-256 of the client secret; the secret itself is
    -- returned once and never stored.
    client_secret_hash bytea,
    source             text,
    device             text,
    card_last4         text,
    last_decline_code  text,
    succeeded_at       timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payment_intents_page ON payment_intents (merchant_id, livemode, created_at DESC, id DESC);
CREATE UNIQUE INDEX payment_intents_session ON payment_intents (session_id) WHERE session_id IS NOT NULL;

-- Events are written in the transaction of the change they describe
-- (transactional outbox); delivery reads them from here.
CREATE TABLE events (
    id          text PRIMARY KEY,
    -- The order events were written in; created_at ties within a transaction.
    seq         bigint GENERATED ALWAYS AS IDENTITY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    type        text NOT NULL,
    data        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_page ON events (merchant_id, livemode, created_at DESC, id DESC);

-- The sandbox processor's connected account per merchant and mode: the
-- publishable key and account id handed to browsers.
CREATE TABLE sandbox_accounts (
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    account_id      text NOT NULL UNIQUE,
    publishable_key text NOT NULL UNIQUE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, livemode)
);

-- +goose Down
DROP TABLE sandbox_accounts;
DROP TABLE events;
DROP TABLE payment_intents;
DROP TABLE checkout_sessions;
