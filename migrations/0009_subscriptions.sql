-- +goose Up
-- Subscriptions (issue 12): the subscription and its items, one row per
-- charge of it, the proration items the next renewal bills, stored
-- quantity-change previews, and the sandbox's saved cards. Designed in one
-- go so that checkout, renewals, dunning, quantity changes and the portal
-- need no further schema change.

-- The sandbox processor's saved cards: what a real processor keeps as a
-- payment method. Never the card number: its last four digits, brand,
-- expiry and the behaviour class the sandbox decided from the number when
-- it was saved (decisions.md §5), which every later charge of the card
-- follows: 'succeeds' (4242…), 'disputes' (4000…0259: charges succeed, then
-- a dispute opens), 'declines' (4000…0341: saved, but every charge is
-- declined card_declined). Cards that decline at once are never saved.
CREATE TABLE sandbox_cards (
    id          text PRIMARY KEY, -- card_…
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    customer_id text NOT NULL REFERENCES customers (id),
    brand       text NOT NULL,
    last4       text NOT NULL CHECK (last4 ~ '^[0-9]{4}$'),
    exp_month   integer NOT NULL CHECK (exp_month BETWEEN 1 AND 12),
    exp_year    integer NOT NULL CHECK (exp_year BETWEEN 2000 AND 2200),
    behavior    text NOT NULL CHECK (behavior IN ('succeeds', 'disputes', 'declines')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_cards_customer ON sandbox_cards (merchant_id, livemode, customer_id);

-- A subscription bills its items every period. Periods are derived from
-- anchor (payments.PeriodEnd), never chained from the previous end; a
-- trial's end becomes the anchor. A trialing subscription's current period
-- is its trial (current_period_end = trial_end), so one column says when
-- it next comes due.
CREATE TABLE subscriptions (
    id                    text PRIMARY KEY, -- sub_…
    merchant_id           text NOT NULL REFERENCES merchants (id),
    livemode              boolean NOT NULL,
    customer_id           text NOT NULL REFERENCES customers (id),
    status                text NOT NULL CHECK (status IN ('active', 'trialing', 'past_due', 'unpaid', 'canceled',
                                                         'incomplete', 'incomplete_expired', 'paused')),
    currency              text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    anchor                timestamptz NOT NULL,
    current_period_start  timestamptz NOT NULL,
    current_period_end    timestamptz NOT NULL CHECK (current_period_end > current_period_start),
    cancel_at_period_end  boolean NOT NULL DEFAULT false,
    canceled_at           timestamptz,
    ended_at              timestamptz,
    trial_end             timestamptz,
    -- The sum of the unbilled subscription_proration_items (negative: a
    -- credit), kept here so that reading a subscription needs no sum and the
    -- renewal reads it under the subscription's lock.
    pending_proration     bigint NOT NULL DEFAULT 0,
    -- Every charge is grossed up by the fee as its session's was.
    pass_fees_to_customer boolean NOT NULL DEFAULT false,
    metadata              jsonb NOT NULL DEFAULT '{}',
    -- The processor's reference of the saved card every charge uses: a
    -- sandbox_cards id (card_…) in the sandbox, a payment method id with
    -- Stripe; hence no foreign key. The portal replaces it.
    card_id               text,
    -- The checkout session it came from: one subscription per session.
    session_id            text UNIQUE REFERENCES checkout_sessions (id),
    -- Dunning: when a past_due subscription's open charge is retried next
    -- (the same time as its subscription_charges row's next_attempt_at,
    -- copied here so that the sweep reads one index).
    next_retry_at         timestamptz,
    -- When the renewal sweep must next look at it: the period's (or
    -- trial's) end, a scheduled cancellation included, or the next retry of
    -- a past_due one. Generated, so no code path can forget to move it.
    due_at                timestamptz GENERATED ALWAYS AS (
                              CASE WHEN status = 'past_due' THEN coalesce(next_retry_at, current_period_end)
                                   ELSE current_period_end END) STORED,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'trialing' OR (trial_end IS NOT NULL AND current_period_end = trial_end)),
    CHECK (status <> 'canceled' OR (canceled_at IS NOT NULL AND ended_at IS NOT NULL))
);
-- GET /v1/subscriptions: newest first, keyset on (created_at, id), with the
-- status filter (default active) and without it (status=all), and by customer.
CREATE INDEX subscriptions_page ON subscriptions (merchant_id, livemode, created_at DESC, id DESC);
CREATE INDEX subscriptions_status_page ON subscriptions (merchant_id, livemode, status, created_at DESC, id DESC);
CREATE INDEX subscriptions_customer_page ON subscriptions (merchant_id, livemode, customer_id, created_at DESC, id DESC);
-- The renewal sweep: subscriptions that can come due, by when they do.
-- Scopes with a moved sandbox clock are found as the session expiry sweep
-- finds theirs (see postgres.ExpireSessions).
CREATE INDEX subscriptions_due ON subscriptions (due_at) WHERE status IN ('active', 'trialing', 'past_due');

-- One price of a subscription and its quantity. The price is copied here
-- (amount, currency, interval) rather than joined: a subscription product's
-- price never changes, and an inline session's price exists only on its
-- item (no prices row, so it never shows in product lists).
CREATE TABLE subscription_items (
    id              text PRIMARY KEY, -- si_…
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    subscription_id text NOT NULL REFERENCES subscriptions (id),
    price_id        text NOT NULL,
    product_id      text REFERENCES products (id), -- null for an inline price
    name            text NOT NULL,
    amount          bigint NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
    currency        text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    interval        text NOT NULL,
    interval_count  integer NOT NULL,
    quantity        integer NOT NULL CHECK (quantity BETWEEN 1 AND 1000),
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subscription_items_interval CHECK (
        (interval IN ('weekly', 'bi-weekly', 'monthly', 'bi-monthly', 'quarterly', 'semi-annual', 'annual') AND interval_count = 1)
        OR (interval IN ('day', 'week', 'month', 'year') AND interval_count BETWEEN 1 AND 52))
);
CREATE INDEX subscription_items_subscription ON subscription_items (subscription_id);

-- Quantity changes, computed before they are made (payments.QuantityChange
-- as jsonb): a preview the merchant asked for (binding until expires_at),
-- and every change made, previewed or not (used_at set), so that an
-- always_invoice charge and the proration items name the change they bill.
CREATE TABLE subscription_quantity_previews (
    id              text PRIMARY KEY, -- sqp_…
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    subscription_id text NOT NULL REFERENCES subscriptions (id),
    change          jsonb NOT NULL,
    expires_at      timestamptz NOT NULL,
    used_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscription_quantity_previews_subscription ON subscription_quantity_previews (subscription_id, created_at);

-- One row per charge of a subscription. A period's charge (the first
-- period's, a renewal's) exists once per (subscription, period_start):
-- whatever schedulers, retried tasks or restarted workers do, a second
-- renewal of the same period breaks the unique constraint and finds the
-- first. Its id is the processor's idempotency key. A proration charge
-- (always_invoice) has no period: it is keyed by the change it bills.
-- Dunning retries the same row: attempts, next_attempt_at, first_failed_at.
CREATE TABLE subscription_charges (
    id                text PRIMARY KEY, -- subch_…
    merchant_id       text NOT NULL REFERENCES merchants (id),
    livemode          boolean NOT NULL,
    subscription_id   text NOT NULL REFERENCES subscriptions (id),
    kind              text NOT NULL CHECK (kind IN ('first', 'renewal', 'proration')),
    period_start      timestamptz,
    period_end        timestamptz,
    change_id         text UNIQUE REFERENCES subscription_quantity_previews (id),
    amount            bigint NOT NULL CHECK (amount >= 0),
    currency          text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    status            text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at   timestamptz,
    first_failed_at   timestamptz,
    decline_code      text,
    payment_intent_id text UNIQUE REFERENCES payment_intents (id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (subscription_id, period_start),
    CONSTRAINT subscription_charges_key CHECK (
        (kind IN ('first', 'renewal') AND period_start IS NOT NULL AND period_end > period_start AND change_id IS NULL)
        OR (kind = 'proration' AND period_start IS NULL AND change_id IS NOT NULL))
);
-- Charges waiting for an attempt (a renewal not yet charged, a dunning
-- retry): the relay re-enqueues those whose time came.
CREATE INDEX subscription_charges_pending ON subscription_charges (next_attempt_at) WHERE status = 'pending';
CREATE INDEX subscription_charges_subscription ON subscription_charges (subscription_id, created_at);

-- Proration lines not billed at once (create_prorations, or a credit that
-- always_invoice leaves): the next renewal bills those with billed_by null
-- and sets it to its charge, in the transaction that moves the period.
-- amount is signed: negative for the credit of unused time.
CREATE TABLE subscription_proration_items (
    id              text PRIMARY KEY, -- prli_…
    merchant_id     text NOT NULL REFERENCES merchants (id),
    livemode        boolean NOT NULL,
    subscription_id text NOT NULL REFERENCES subscriptions (id),
    change_id       text NOT NULL REFERENCES subscription_quantity_previews (id),
    item_id         text NOT NULL REFERENCES subscription_items (id),
    description     text NOT NULL,
    quantity        integer NOT NULL,
    unit_amount     bigint NOT NULL,
    amount          bigint NOT NULL,
    currency        text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    period_from     timestamptz NOT NULL,
    period_to       timestamptz NOT NULL,
    billed_by       text REFERENCES subscription_charges (id),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX subscription_proration_items_pending ON subscription_proration_items (subscription_id) WHERE billed_by IS NULL;

-- A subscription's charges are payments like any other (fee, ledger entry,
-- refundable) that name their subscription.
ALTER TABLE payment_intents ADD COLUMN subscription_id text REFERENCES subscriptions (id);
CREATE INDEX payment_intents_subscription ON payment_intents (subscription_id) WHERE subscription_id IS NOT NULL;

-- A subscription-mode checkout session (mode 'subscription', since 0002)
-- sells one recurring line; its trial is fixed at creation.
ALTER TABLE checkout_sessions
    ADD COLUMN trial_period_days integer CHECK (trial_period_days BETWEEN 0 AND 730);

-- +goose Down
ALTER TABLE checkout_sessions DROP COLUMN trial_period_days;
DROP INDEX payment_intents_subscription;
ALTER TABLE payment_intents DROP COLUMN subscription_id;
DROP TABLE subscription_proration_items;
DROP TABLE subscription_charges;
DROP TABLE subscription_quantity_previews;
DROP TABLE subscription_items;
DROP TABLE subscriptions;
DROP TABLE sandbox_cards;
