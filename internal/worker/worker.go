// Package worker holds the Asynq handlers run by cmd/worker.
package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/tasks"
)

// MaintenanceStore is what the housekeeping tasks need from storage.
type MaintenanceStore interface {
	MaintainPartitions(ctx context.Context, now time.Time, keepEvents, keepKeys time.Duration) (payments.PartitionChanges, error)
	PruneViolations(ctx context.Context, before time.Time) (int64, error)
}

// Handlers are the task handlers and what they need.
type Handlers struct {
	Service *payments.Service
	Store   MaintenanceStore
	Log     *slog.Logger
	// EventRetention is how long events are kept (EVENT_RETENTION); 0 is
	// payments.EventRetention.
	EventRetention time.Duration
}

// Register adds every handler to mux.
func (h *Handlers) Register(mux *asynq.ServeMux) {
	mux.HandleFunc(tasks.TypePartitions, h.maintainPartitions)
	mux.HandleFunc(tasks.TypePruneViolations, h.pruneViolations)
	mux.HandleFunc(tasks.TypeExpireSessions, h.expireSessions)
	mux.HandleFunc(tasks.TypeCloseDisputes, h.closeOverdueDisputes)
	mux.HandleFunc(tasks.TypeRenewSubscriptions, h.renewSubscriptions)
	h.registerMoney(mux)
}

// expireSessions closes expired sessions in batches until none are left.
func (h *Handlers) expireSessions(ctx context.Context, _ *asynq.Task) error {
	return h.sweep(ctx, "expired checkout sessions", h.Service.ExpireSessions)
}

// closeOverdueDisputes closes unanswered disputes past their due date as lost.
func (h *Handlers) closeOverdueDisputes(ctx context.Context, _ *asynq.Task) error {
	return h.sweep(ctx, "closed overdue disputes as lost", h.Service.CloseOverdueDisputes)
}

// renewSubscriptions runs the renewal sweep until nothing is due; the
// charges it writes are enqueued as their transactions commit.
func (h *Handlers) renewSubscriptions(ctx context.Context, _ *asynq.Task) error {
	return h.sweep(ctx, "renewed or ended subscriptions", h.Service.RenewDueSubscriptions)
}

// sweep drains a sweep (payments.Drain) and logs how many rows changed.
func (h *Handlers) sweep(ctx context.Context, what string, batch func(ctx context.Context, limit int) (int, error)) error {
	total, err := payments.Drain(ctx, batch)
	if err != nil {
		return err
	}
	if total > 0 {
		h.Log.InfoContext(ctx, what, "count", total)
	}
	return nil
}

// maintainPartitions creates the partitions of the days ahead and drops
// the expired ones (postgres.MaintainPartitions): events with their
// deliveries and attempts after EVENT_RETENTION, Idempotency-Key records
// after payments.IdempotencyTTL.
func (h *Handlers) maintainPartitions(ctx context.Context, _ *asynq.Task) error {
	keep := h.EventRetention
	if keep <= 0 {
		keep = payments.EventRetention
	}
	ch, err := h.Store.MaintainPartitions(ctx, h.Service.Clock().Base(), keep, payments.IdempotencyTTL)
	if len(ch.Created) > 0 || len(ch.Dropped) > 0 {
		h.Log.InfoContext(ctx, "partitions maintained", "created", ch.Created, "dropped", ch.Dropped)
	}
	return err
}

func (h *Handlers) pruneViolations(ctx context.Context, _ *asynq.Task) error {
	n, err := h.Store.PruneViolations(ctx, h.Service.Clock().Base().Add(-payments.ViolationRetention))
	if err != nil {
		return err
	}
	h.Log.InfoContext(ctx, "pruned content violations", "deleted", n)
	return nil
}

// Schedule is what cmd/scheduler enqueues (Periodic): spec (see Every) → task.
func Schedule() map[string]func() *asynq.Task {
	return map[string]func() *asynq.Task{
		"@every 1h":  tasks.NewPruneViolations,
		"@every 1m":  tasks.NewExpireSessions,
		"@every 5m":  tasks.NewCloseOverdueDisputes,
		"@hourly":    tasks.NewMaintainPartitions,
		"@every 60s": tasks.NewRenewSubscriptions, // a second key for every minute
	}
}
