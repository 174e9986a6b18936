-- +goose Up
-- Refunds, disputes, the merchant balance ledger and inbound processor events.

-- What has left or is about to leave each payment. Kept on the payment row
-- so that the refund check reads and changes them under the payment's lock.
ALTER TABLE payment_intents
    ADD COLUMN amount_refunded       bigint NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0),
    ADD COLUMN amount_refund_pending bigint NOT NULL DEFAULT 0 CHECK (amount_refund_pending >= 0),
    ADD COLUMN dispute_id            text,
    -- Never more out than came in: the last line of defence behind the checks.
    ADD CONSTRAINT payment_intents_refund_bound CHECK (amount_refunded + amount_refund_pending <= amount_received);

-- The merchant's money, append-only: one signed entry per movement. The
-- source (pi_, re_, dp_, po_) and type are unique together, so a movement
-- recorded twice (a job run again) fails instead of counting twice.
CREATE TABLE ledger_entries (
    id          text PRIMARY KEY,
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    currency    text NOT NULL,
    type        text NOT NULL CHECK (type IN ('payment', 'refund', 'dispute', 'dispute_reversal', 'payout')),
    amount      bigint NOT NULL,  -- signed, minor units: + in, - out
    fee         bigint NOT NULL DEFAULT 0,  -- the fee kept from a payment (already netted from amount)
    source_id   text NOT NULL,
    -- Whether balances.ledger_total counts it yet. Payment credits are
    -- written unfolded, touching no shared row, so a merchant's payments do
    -- not queue on its balance; whatever decides on the balance (a refund, a
    -- payout) first folds them in under the balance's lock.
    folded      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_id, type)
);
CREATE INDEX ledger_entries_scope ON ledger_entries (merchant_id, livemode, currency, created_at);
CREATE INDEX ledger_entries_unfolded ON ledger_entries (merchant_id, livemode, currency) WHERE NOT folded;

-- The running sum of the ledger's folded entries per merchant, mode and
-- currency (debits are folded as they are written, credits by the next
-- refund or payout), plus what pending refunds reserve.
-- Available = ledger_total + unfolded credits - reserved. Refunds and payouts lock this row, so
-- the debits of one merchant and currency are serialized. ledger_total may go
-- below zero: a dispute withdraws its amount whatever the balance holds.
CREATE TABLE balances (
    merchant_id  text NOT NULL REFERENCES merchants (id),
    livemode     boolean NOT NULL,
    currency     text NOT NULL,
    ledger_total bigint NOT NULL DEFAULT 0,
    reserved     bigint NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, livemode, currency)
);

CREATE TABLE refunds (
    id                text PRIMARY KEY,
    merchant_id       text NOT NULL REFERENCES merchants (id),
    livemode          boolean NOT NULL,
    payment_intent_id text NOT NULL REFERENCES payment_intents (id),
    session_id        text,
    amount            bigint NOT NULL CHECK (amount > 0),
    currency          text NOT NULL,
    reason            text CHECK (reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
    status            text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    failure_reason    text,
    -- The request's Idempotency-Key, written in the refund's own
    -- transaction: a retry whose first attempt committed but died before
    -- its response was stored gets this refund back instead of a second one.
    idempotency_key   text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refunds_page ON refunds (merchant_id, livemode, created_at DESC, id DESC);
CREATE INDEX refunds_idempotency ON refunds (merchant_id, livemode, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX refunds_payment ON refunds (payment_intent_id);
-- The relay's scan for refunds whose task vanished.
CREATE INDEX refunds_pending ON refunds (created_at) WHERE status = 'pending';

CREATE TABLE disputes (
    id                text PRIMARY KEY,
    merchant_id       text NOT NULL REFERENCES merchants (id),
    livemode          boolean NOT NULL,
    payment_intent_id text NOT NULL UNIQUE REFERENCES payment_intents (id),
    amount            bigint NOT NULL CHECK (amount > 0),
    currency          text NOT NULL,
    reason            text NOT NULL,
    status            text NOT NULL CHECK (status IN ('needs_response', 'under_review', 'won', 'lost')),
    evidence          jsonb NOT NULL DEFAULT '{}',
    evidence_due_by   timestamptz,
    -- Set when the merchant submits; evidence_sent_at when the processor has it.
    submitted_at      timestamptz,
    evidence_sent_at  timestamptz,
    closed_at         timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX disputes_page ON disputes (merchant_id, livemode, created_at DESC, id DESC);
CREATE INDEX disputes_unsent ON disputes (submitted_at) WHERE submitted_at IS NOT NULL AND evidence_sent_at IS NULL;
-- The sweep that closes disputes left unanswered past their due date.
CREATE INDEX disputes_overdue ON disputes (evidence_due_by) WHERE status = 'needs_response';

-- What the processor told us (the sandbox's dispute on its test card; later
-- Stripe's webhooks), stored in the transaction that learned it and applied
-- by a worker: the same outbox pattern as webhook deliveries.
CREATE TABLE processor_events (
    id                text PRIMARY KEY,
    merchant_id       text NOT NULL REFERENCES merchants (id),
    livemode          boolean NOT NULL,
    type              text NOT NULL,
    payment_intent_id text,
    data              jsonb NOT NULL DEFAULT '{}',
    -- The processor's own event id, to drop redelivered events (Stripe).
    external_id       text UNIQUE,
    processed_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX processor_events_pending ON processor_events (created_at) WHERE processed_at IS NULL;

-- The sandbox processor's own record of refunds it executed, keyed by our
-- refund id (its idempotency key): a refund retried after a crash is
-- answered from here instead of being executed again.
CREATE TABLE sandbox_refunds (
    refund_id         text PRIMARY KEY,
    payment_intent_id text NOT NULL,
    amount            bigint NOT NULL,
    status            text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE sandbox_refunds;
DROP TABLE processor_events;
DROP TABLE disputes;
DROP TABLE refunds;
DROP TABLE balances;
DROP TABLE ledger_entries;
ALTER TABLE payment_intents
    DROP CONSTRAINT payment_intents_refund_bound,
    DROP COLUMN dispute_id,
    DROP COLUMN amount_refund_pending,
    DROP COLUMN amount_refunded;
