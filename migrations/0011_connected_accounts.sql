-- +goose Up
-- The connected account (GET /v1/account) and the Stripe processor.

-- The sandbox's payout bank, set by `api sandbox payout-bank`. Only what may
-- be shown (the bank's name, the last four digits) and a keyed fingerprint
-- (HMAC with SECRETS_KEY, to tell two banks apart without the numbers) are
-- kept: full account and routing numbers are never stored. NULL: the
-- sandbox's default test bank.
ALTER TABLE sandbox_accounts
    ADD COLUMN bank_name        text,
    ADD COLUMN bank_last4       text CHECK (bank_last4 ~ '^[0-9]{4}$'),
    ADD COLUMN bank_fingerprint text,
    ADD CONSTRAINT sandbox_accounts_bank CHECK ((bank_name IS NULL) = (bank_last4 IS NULL) AND (bank_name IS NULL) = (bank_fingerprint IS NULL));

-- A merchant's Stripe connected account per mode (`api merchant
-- stripe-account`): the Stripe-Account every call for that merchant and mode
-- carries, and how an inbound Stripe event (which names its account) finds
-- its merchant. One account serves one merchant and mode.
CREATE TABLE stripe_accounts (
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    account_id  text NOT NULL CHECK (account_id ~ '^acct_[A-Za-z0-9]+$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, livemode),
    UNIQUE (account_id, livemode)
);

-- Our id of an object and Stripe's id of the same object (a payment intent,
-- a checkout session's payment, a refund, a dispute), written by the Stripe
-- adapter when it learns Stripe's id: Stripe's events name Stripe's ids, and
-- dispute evidence goes to Stripe's dispute. Lookup only: nothing here moves
-- money, and a row left by a call whose change never committed is harmless.
CREATE TABLE stripe_objects (
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    id          text NOT NULL,
    stripe_id   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, livemode, id)
);
-- One Stripe object may stand for two of ours (a Checkout payment is our
-- cs_ and, once paid, our pi_), so this is an index, not a constraint.
CREATE INDEX stripe_objects_stripe_id ON stripe_objects (merchant_id, livemode, stripe_id);

-- +goose Down
DROP TABLE stripe_objects;
DROP TABLE stripe_accounts;
ALTER TABLE sandbox_accounts
    DROP CONSTRAINT sandbox_accounts_bank,
    DROP COLUMN bank_fingerprint,
    DROP COLUMN bank_last4,
    DROP COLUMN bank_name;
