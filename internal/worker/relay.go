package worker

import (
	"context"
	"log/slog"
	"time"

	"paysvc/internal/tasks"
)

// Relay re-enqueues work whose task vanished (Redis flushed or lost, or the
// process died between commit and enqueue): pending deliveries overdue by
// more than grace, and refunds, processor events and submitted evidence
// waiting longer than grace. Enqueueing a task that still exists is a no-op
// (its TaskID is its row's id). now is the clock's base time (payments.Clock
// Base): the stranded queries add each row's merchant's sandbox offset in
// SQL, so every row is judged on its own merchant's clock. It runs until ctx
// ends.
func Relay(ctx context.Context, store tasks.StrandedStore, enq *tasks.Enqueuer, now func() time.Time, every, grace time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := RelayOnce(ctx, store, enq, now(), grace); err != nil {
			log.WarnContext(ctx, "outbox relay", "error", err)
		} else if n > 0 {
			log.InfoContext(ctx, "outbox relay re-enqueued stranded work", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RelayOnce runs one pass of the relay and returns how many tasks it enqueued.
// A pass looks at the oldest relayBatch rows of each kind; a larger backlog
// is worked through on the following passes.
func RelayOnce(ctx context.Context, store tasks.StrandedStore, enq *tasks.Enqueuer, now time.Time, grace time.Duration) (int, error) {
	jobs, err := tasks.StrandedJobs(ctx, store, now.Add(-grace), relayBatch)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	if err := enq.PublishQueues(ctx); err != nil {
		return 0, err
	}
	return enq.Enqueue(ctx, tasks.ForJobs(jobs)), nil
}

const relayBatch = 1000
