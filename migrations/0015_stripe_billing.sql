-- +goose Up
-- Stripe Billing (issue 14): with PROCESSOR=stripe a subscription is
-- Stripe's. processor_subscription_id is Stripe's id of it (sub_… on the
-- connected account), set when its checkout completes; null for a
-- subscription this service bills itself (the sandbox). The renewal sweep
-- and dunning skip the processor's: Stripe bills them and reports back by
-- events. processor_synced_at is the creation time of the newest Stripe
-- subscription event applied: an older snapshot arriving late is stale.
ALTER TABLE subscriptions ADD COLUMN processor_subscription_id text;
ALTER TABLE subscriptions ADD COLUMN processor_synced_at timestamptz;
CREATE UNIQUE INDEX subscriptions_processor_id ON subscriptions (merchant_id, livemode, processor_subscription_id)
    WHERE processor_subscription_id IS NOT NULL;
DROP INDEX subscriptions_due;
CREATE INDEX subscriptions_due ON subscriptions (due_at)
    WHERE status IN ('active', 'trialing', 'past_due') AND processor_subscription_id IS NULL;

-- +goose Down
DROP INDEX subscriptions_due;
CREATE INDEX subscriptions_due ON subscriptions (due_at) WHERE status IN ('active', 'trialing', 'past_due');
DROP INDEX subscriptions_processor_id;
ALTER TABLE subscriptions DROP COLUMN processor_synced_at;
ALTER TABLE subscriptions DROP COLUMN processor_subscription_id;
