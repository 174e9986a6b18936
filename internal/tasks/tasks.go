// Package tasks declares the Asynq task types, their payloads and
// constructors. Payloads hold ids; handlers reload the rows they name.
package tasks

import (
	"time"

	"github.com/hibiken/asynq"
)

// Queues and their weights: money paths before housekeeping.
const (
	QueueCritical = "critical"
	QueueDefault  = "default"
	QueueLow      = "low"
	// QueueBilling holds the sandbox's subscription charges (renewals,
	// dunning retries, prorations). Each is database work and nothing
	// else (the sandbox answers in-process), so the worker runs them on a
	// server of their own, a few at once (WORKER_BILLING_CONCURRENCY): a
	// sweep of many due subscriptions then renews about as fast as with
	// thirty at once, without taking the database's CPU from the API
	// (deploy/bench/results.md, "The renewal sweep").
	QueueBilling = "billing"
)

// Queues maps each queue to its priority weight for the worker.
var Queues = map[string]int{QueueCritical: 6, QueueBilling: 6, QueueDefault: 3, QueueLow: 1}

// Maintenance task types, enqueued by the scheduler.
const (
	TypePruneViolations    = "maintenance:prune_violations"
	TypeExpireSessions     = "sessions:expire"
	TypeCloseDisputes      = "disputes:close_overdue"
	TypePartitions         = "maintenance:partitions"
	TypeRenewSubscriptions = "subscriptions:renew"
)

// NewRenewSubscriptions runs the renewal sweep: ends scheduled
// cancellations that came due and writes the charges of due renewals.
// One sweep at a time (Unique, for as long as one may run): a sweep of
// many due subscriptions outlasts its one-minute tick, and the ticks after
// it would sweep beside it, splitting its rows (SKIP LOCKED) and writing
// charges two or three times as fast as the billing queue takes them,
// against the API's share of the database. The next tick after it ends
// sweeps what came due meanwhile.
func NewRenewSubscriptions() *asynq.Task {
	const timeout = 5 * time.Minute
	return asynq.NewTask(TypeRenewSubscriptions, nil, asynq.Queue(QueueCritical), asynq.MaxRetry(3),
		asynq.Timeout(timeout), asynq.Unique(timeout))
}

// NewCloseOverdueDisputes closes disputes left unanswered past their due date.
func NewCloseOverdueDisputes() *asynq.Task {
	return asynq.NewTask(TypeCloseDisputes, nil, asynq.Queue(QueueDefault), asynq.MaxRetry(3), asynq.Timeout(5*time.Minute))
}

// NewExpireSessions closes checkout sessions past CHECKOUT_SESSION_TTL.
func NewExpireSessions() *asynq.Task {
	return asynq.NewTask(TypeExpireSessions, nil, asynq.Queue(QueueDefault), asynq.MaxRetry(3), asynq.Timeout(5*time.Minute))
}

// NewPruneViolations deletes content violations past the suspension window.
func NewPruneViolations() *asynq.Task {
	return asynq.NewTask(TypePruneViolations, nil, asynq.Queue(QueueLow), asynq.MaxRetry(3), asynq.Timeout(5*time.Minute))
}

// NewMaintainPartitions creates the partitions of the days ahead and drops
// the expired ones: the retention of events, webhook deliveries and
// Idempotency-Key records (internal/postgres partitions.go).
func NewMaintainPartitions() *asynq.Task {
	return asynq.NewTask(TypePartitions, nil, asynq.Queue(QueueLow), asynq.MaxRetry(3), asynq.Timeout(10*time.Minute))
}
