// Package groupcommit queues the calls of concurrent callers and runs those
// that arrive while one run is in flight together, as the next run: the
// calls share one round trip (a Redis pipeline, one SQL statement) instead
// of each paying its own. At low load a run holds one call and nothing waits.
package groupcommit

import (
	"context"
	"sync"
	"time"
)

// Waiter is a queued call whose caller waits for its answer or its own
// context, whichever comes first.
type Waiter interface {
	CallerCtx() context.Context
	// GiveUp answers the call with err and wakes its caller: a caller that
	// finds both its answer and its context done may take either, so the
	// answer must be an error too, never an empty success.
	GiveUp(err error)
}

// Queue is group commit: items added while a run is in flight wait for it
// to end and then go together, as one run; at low load a run holds one item.
// An item added after a run started is never part of it, so the run's work
// starts after every one of its callers asked. Items whose caller has given
// up by the time their run starts are answered with their context's error
// and left out of it. Run is called from one goroutine at a time.
type Queue[T Waiter] struct {
	Run func([]T)

	mu    sync.Mutex
	items []T
	busy  bool // a runner goroutine is running
}

// Add queues item and starts a runner when none is running.
func (q *Queue[T]) Add(item T) {
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
func (q *Queue[T]) drain() {
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
			if err := it.CallerCtx().Err(); err != nil {
				it.GiveUp(err)
				continue
			}
			live = append(live, it)
		}
		if len(live) > 0 {
			q.Run(live)
		}
	}
}

// PatientContext returns a context for work done on behalf of items: not
// cancelled with any of their callers' contexts, and ending at the latest of
// their deadlines (never, if one has none). No caller waits longer than its
// own budget anyway; the work may go on for the most patient one.
func PatientContext[T Waiter](items []T) (context.Context, context.CancelFunc) {
	var deadline time.Time
	unbounded := false
	for _, it := range items {
		if d, ok := it.CallerCtx().Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(items[0].CallerCtx())
	if unbounded {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}
