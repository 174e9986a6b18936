-- +goose Up
-- Renewals and dunning (issue 12): the sandbox processor's record of the
-- charges it made on saved cards, keyed by our idempotency key (a
-- subscription charge's id and attempt number), so that an attempt retried
-- after a crash is answered from here and moves no money twice — as
-- sandbox_refunds does for refunds.
CREATE TABLE sandbox_card_charges (
    charge_key   text PRIMARY KEY,
    merchant_id  text NOT NULL REFERENCES merchants (id),
    livemode     boolean NOT NULL,
    card_id      text NOT NULL,
    amount       bigint NOT NULL CHECK (amount > 0),
    currency     text NOT NULL,
    succeeded    boolean NOT NULL,
    decline_code text,
    last4        text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE sandbox_card_charges;
