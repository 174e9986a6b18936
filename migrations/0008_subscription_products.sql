-- +goose Up
-- Subscription products: products whose one price is recurring. They live in
-- products and prices, not tables of their own, so that a subscription
-- product is a product like any other (one prod_/price_ namespace; GET and
-- DELETE /v1/products/{id} read and archive it) and a subscription session
-- finds its price by id in the one place prices are.

-- Set at creation, never changed: GET /v1/subscription-products lists the
-- products that have it, through their own keyset index.
ALTER TABLE products
    ADD COLUMN subscription      boolean NOT NULL DEFAULT false,
    ADD COLUMN trial_period_days integer CHECK (trial_period_days BETWEEN 0 AND 730),
    ADD CONSTRAINT products_trial_only_subscription CHECK (subscription OR trial_period_days IS NULL);
CREATE INDEX products_subscription_page ON products (merchant_id, livemode, created_at DESC, id DESC)
    WHERE subscription;

-- A recurring price bills every recurring_interval_count × recurring_interval
-- (payments.Interval): a product's named interval with count 1, or the inline
-- subscription form's unit with count 1..52. NULL for one-time prices, which
-- one-time checkout sessions refuse to mix up with recurring ones.
ALTER TABLE prices
    ADD COLUMN recurring_interval       text,
    ADD COLUMN recurring_interval_count integer,
    ADD CONSTRAINT prices_recurring CHECK (
        (recurring_interval IS NULL AND recurring_interval_count IS NULL)
        OR (recurring_interval IN ('weekly', 'bi-weekly', 'monthly', 'bi-monthly', 'quarterly', 'semi-annual', 'annual')
            AND recurring_interval_count = 1)
        OR (recurring_interval IN ('day', 'week', 'month', 'year')
            AND recurring_interval_count BETWEEN 1 AND 52));

-- +goose Down
ALTER TABLE prices DROP CONSTRAINT prices_recurring,
    DROP COLUMN recurring_interval_count, DROP COLUMN recurring_interval;
DROP INDEX products_subscription_page;
ALTER TABLE products DROP CONSTRAINT products_trial_only_subscription,
    DROP COLUMN trial_period_days, DROP COLUMN subscription;
