-- +goose Up
-- Per-merchant, per-mode sandbox clocks. A row exists only for a scope whose
-- sandbox clock was moved; its time is real time plus offset_us. Clocks only
-- move forward (offset_us >= 0): every scope's time is at least real time,
-- which is what lets the sweeps find most due rows with their plain
-- expiry index (see postgres.ExpireSessions). Only the sandbox processor
-- reads or writes this table.
CREATE TABLE sandbox_clocks (
    merchant_id text NOT NULL REFERENCES merchants (id),
    livemode    boolean NOT NULL,
    offset_us   bigint NOT NULL CHECK (offset_us >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (merchant_id, livemode)
);

-- +goose Down
DROP TABLE sandbox_clocks;
