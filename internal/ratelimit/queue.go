package ratelimit

import (
	"context"
	"sync"
	"time"
)

// queue is group commit: items added while a run is in flight wait for it
// to end and then go together, as one run; at low load a run holds one item.
// Both of this package's layers use it: the limiter's same-key checks and the
// batcher's EVALSHAs.
type queue[T any] struct {
	run func([]T)

	mu    sync.Mutex
	items []T
	busy  bool // a runner goroutine is running
}

// add queues item and starts a runner when none is running.
func (q *queue[T]) add(item T) {
	q.mu.Lock()
	q.items = append(q.items, item)
	start := !q.busy
	q.busy = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
}

// drain runs the queued items until none are left.
func (q *queue[T]) drain() {
	for {
		q.mu.Lock()
		items := q.items
		q.items = nil
		if len(items) == 0 {
			q.busy = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.run(items)
	}
}

// patientContext returns a context for work done on behalf of items whose
// callers have the contexts ctxOf gives: not cancelled with any of them, and ending at the
// latest of their deadlines (never, if one has none). No caller waits longer
// than its own budget anyway; the work may go on for the most patient one.
func patientContext[T any](items []T, ctxOf func(T) context.Context) (context.Context, context.CancelFunc) {
	var (
		first    context.Context
		deadline time.Time
	)
	unbounded := false
	for _, item := range items {
		ctx := ctxOf(item)
		if first == nil {
			first = ctx
		}
		if d, ok := ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(first)
	if unbounded {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}
