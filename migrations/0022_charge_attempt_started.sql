-- +goose Up
-- A subscription charge's attempt whose processor call may have been made,
-- and what it was sent with: the saved card and the amount charged. The
-- worker writes and commits them before it calls the processor (under the
-- attempt's idempotency key), and the settlement of that attempt keeps
-- them. A run that finds an attempt started and not settled (the worker
-- died between the call and the record) answers it first with the same
-- key, card and amount, whatever changed meanwhile: a cancellation (a
-- charge the processor made is recorded as a payment, never lost) or a new
-- card (the new card is charged by the next attempt, under its own key,
-- not answered with the old card's result). Existing rows have all three
-- null, which the check allows: NOT VALID spares the scan under the
-- table's lock, and new rows are checked.
ALTER TABLE subscription_charges
    ADD COLUMN started_attempt integer,
    ADD COLUMN started_card_id text,
    ADD COLUMN started_amount bigint;
ALTER TABLE subscription_charges ADD CONSTRAINT subscription_charges_started CHECK (
    (started_attempt IS NULL AND started_card_id IS NULL AND started_amount IS NULL)
    OR (started_attempt BETWEEN 1 AND attempts + 1 AND started_card_id IS NOT NULL AND started_amount > 0)) NOT VALID;

-- +goose Down
ALTER TABLE subscription_charges DROP CONSTRAINT subscription_charges_started;
ALTER TABLE subscription_charges DROP COLUMN started_attempt, DROP COLUMN started_card_id, DROP COLUMN started_amount;
