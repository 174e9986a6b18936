package ratelimit

import (
	"context"
	"sync"
	"time"
)

// waiter is a queued call whose caller waits for its answer or its own
// context, whichever comes first.
type waiter interface {
	callerCtx() context.Context
	// giveUp answers the call with err and wakes its caller: a caller that
	// finds both its answer and its context done may take either, so the
	// answer must be an error too, never an empty success.
	giveUp(err error)
}

// queue is group commit: items added while a run is in flight wait for it
// to end and then go together, as one run; at low load a run holds one item.
// Both of this package's layers use it: the limiter's same-key checks and the
// batcher's EVALSHAs. Items whose caller has given up by the time their run
// starts are answered with their context's error and left out of it.
type queue[T waiter] struct {
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
		live := items[:0]
		for _, it := range items {
			if err := it.callerCtx().Err(); err != nil {
				it.giveUp(err)
				continue
			}
			live = append(live, it)
		}
		if len(live) > 0 {
			q.run(live)
		}
	}
}

// patientContext returns a context for work done on behalf of items: not
// cancelled with any of their callers' contexts, and ending at the latest of
// their deadlines (never, if one has none). No caller waits longer than its
// own budget anyway; the work may go on for the most patient one.
func patientContext[T waiter](items []T) (context.Context, context.CancelFunc) {
	var deadline time.Time
	unbounded := false
	for _, it := range items {
		if d, ok := it.callerCtx().Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(items[0].callerCtx())
	if unbounded {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}
