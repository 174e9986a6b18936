package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/tasks"
)

// Relay re-enqueues work whose task vanished (Redis flushed or lost, or the
// process died between commit and enqueue): pending deliveries overdue by
// more than grace, and refunds, processor events and submitted evidence
// waiting longer than grace. Enqueueing a task that still exists is a no-op
// (its TaskID is its row's id). It runs until ctx ends.
func Relay(ctx context.Context, store *postgres.Store, enq *tasks.Enqueuer, every, grace time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := RelayOnce(ctx, store, enq, grace); err != nil {
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
func RelayOnce(ctx context.Context, store *postgres.Store, enq *tasks.Enqueuer, grace time.Duration) (int, error) {
	jobs, err := store.StrandedJobs(ctx, time.Now().Add(-grace), relayBatch)
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	if err := enq.PublishQueues(ctx); err != nil {
		return 0, err
	}
	return enq.Enqueue(ctx, Tasks(jobs)), nil
}

const relayBatch = 1000

// Tasks converts the jobs transactions leave to the tasks that do them.
func Tasks(jobs []payments.Job) []*asynq.Task {
	out := make([]*asynq.Task, 0, len(jobs))
	for _, j := range jobs {
		ref := tasks.Ref{MerchantID: j.MerchantID, Live: j.Live, ID: j.ID}
		switch j.Kind {
		case payments.JobDeliverWebhook:
			out = append(out, tasks.NewDeliverWebhook(tasks.DeliverWebhook{MerchantID: j.MerchantID, Live: j.Live, DeliveryID: j.ID}))
		case payments.JobExecuteRefund:
			out = append(out, tasks.NewMoneyTask(tasks.TypeExecuteRefund, ref))
		case payments.JobProcessorEvent:
			out = append(out, tasks.NewMoneyTask(tasks.TypeProcessorEvent, ref))
		case payments.JobSubmitEvidence:
			out = append(out, tasks.NewMoneyTask(tasks.TypeSubmitEvidence, ref))
		default:
			panic("worker: no task for job kind " + string(j.Kind)) // a new kind without its task is a bug
		}
	}
	return out
}
