-- +goose Up
-- The renewal sweep read every subscription whose period had ended,
-- renewed or not: one whose renewal charge was written and waits for its
-- attempt stays due (its period moves only when the charge succeeds), and
-- the sweep passed over it with a look-up of its charge. With 90,000
-- charges waiting, one batch of 500 read 90,500 subscriptions and as many
-- charges (0.5 s), and a sweep that wrote 100,000 charges at once read
-- about as many times more. renewal_charged_for is the current_period_end
-- of the period whose renewal charge the sweep wrote (that charge's
-- period_start), null when there is none: derived from the charges by
-- every save of the subscription (postgres saveSubscription; the sweep
-- saves it after inserting the charge). The sweep's index leaves out a
-- subscription while the two are equal, and takes it back as soon as its
-- period moves. The sweep's NOT EXISTS stays: it, and the charges'
-- unique (subscription_id, period_start), decide; this only spares the
-- reading.
ALTER TABLE subscriptions ADD COLUMN renewal_charged_for timestamptz;
UPDATE subscriptions s SET renewal_charged_for = s.current_period_end
WHERE EXISTS (SELECT 1 FROM subscription_charges ch WHERE ch.subscription_id = s.id AND ch.period_start = s.current_period_end);
DROP INDEX subscriptions_due;
CREATE INDEX subscriptions_due ON subscriptions (due_at)
    WHERE status IN ('active', 'trialing', 'past_due') AND processor_subscription_id IS NULL
        AND renewal_charged_for IS DISTINCT FROM current_period_end;

-- +goose Down
DROP INDEX subscriptions_due;
CREATE INDEX subscriptions_due ON subscriptions (due_at)
    WHERE status IN ('active', 'trialing', 'past_due') AND processor_subscription_id IS NULL;
ALTER TABLE subscriptions DROP COLUMN renewal_charged_for;
