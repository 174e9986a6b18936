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

// Queue is group commit: calls made while a run is in flight wait for it
// to end and then go together, as one run. A call made after a run started
// is never part of it, so a run's work starts after every one of its
// callers asked. Calls whose caller has given up by the time their run
// starts are answered with their context's error and left out of it.
type Queue[In, Out any] struct {
	// Run answers every call of a run (Call.Answer), from one goroutine
	// at a time.
	Run func([]*Call[In, Out])

	mu    sync.Mutex
	calls []*Call[In, Out]
	busy  bool // a runner goroutine is running
}

// Call is one caller's call: its input and, once its run answers it, its
// output.
type Call[In, Out any] struct {
	In   In
	ctx  context.Context
	out  Out
	err  error
	done chan struct{}
}

// Ctx is the caller's context.
func (c *Call[In, Out]) Ctx() context.Context { return c.ctx }

// Answer gives the call its output or error and wakes its caller; a run
// answers each of its calls once.
func (c *Call[In, Out]) Answer(out Out, err error) {
	c.out, c.err = out, err
	close(c.done)
}

// Do queues a call of in and waits for its answer or the end of ctx. A
// caller that finds both done may take either, so a call given up is
// answered with an error too, never an empty success.
func (q *Queue[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &Call[In, Out]{In: in, ctx: ctx, done: make(chan struct{})}
	q.add(c)
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
		var zero Out
		return zero, ctx.Err()
	}
}

// add queues c and starts a runner when none is running.
func (q *Queue[In, Out]) add(c *Call[In, Out]) {
	q.mu.Lock()
	q.calls = append(q.calls, c)
	start := !q.busy
	q.busy = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
}

// drain runs the queued calls until none are left.
func (q *Queue[In, Out]) drain() {
	for {
		q.mu.Lock()
		calls := q.calls
		q.calls = nil
		if len(calls) == 0 {
			q.busy = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		live := calls[:0]
		for _, c := range calls {
			if err := c.ctx.Err(); err != nil {
				var zero Out
				c.Answer(zero, err)
				continue
			}
			live = append(live, c)
		}
		if len(live) > 0 {
			q.Run(live)
		}
	}
}

// AloneOrTogether returns a Run that answers a run of one call by alone,
// under its caller's context, as if there were no queue; and a longer run by
// together, at most max calls at a time (any number when max is 0), under
// PatientContext. together answers each call it is given.
func AloneOrTogether[In, Out any](max int, alone func(ctx context.Context, in In) (Out, error), together func(ctx context.Context, calls []*Call[In, Out])) func([]*Call[In, Out]) {
	return func(calls []*Call[In, Out]) {
		if len(calls) == 1 {
			c := calls[0]
			c.Answer(alone(c.ctx, c.In))
			return
		}
		ctx, cancel := PatientContext(calls)
		defer cancel()
		for len(calls) > 0 {
			n := len(calls)
			if max > 0 {
				n = min(n, max)
			}
			together(ctx, calls[:n])
			calls = calls[n:]
		}
	}
}

// PatientContext returns a context for work done on behalf of calls: not
// cancelled with any of their callers' contexts, and ending at the latest of
// their deadlines (never, if one has none). No caller waits longer than its
// own budget anyway; the work may go on for the most patient one.
func PatientContext[In, Out any](calls []*Call[In, Out]) (context.Context, context.CancelFunc) {
	var deadline time.Time
	unbounded := false
	for _, c := range calls {
		if d, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	ctx := context.WithoutCancel(calls[0].ctx)
	if unbounded {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, deadline)
}

// Distinct groups calls by their key, in the order each key first came:
// keys[i] is the i-th distinct key and calls[i] its calls. Calls of one key
// can share one answer's work (a row read once, decoded for each).
func Distinct[K comparable, In, Out any](calls []*Call[In, Out], key func(In) K) (keys []K, byKey [][]*Call[In, Out]) {
	index := make(map[K]int, len(calls))
	for _, c := range calls {
		k := key(c.In)
		i, ok := index[k]
		if !ok {
			i = len(keys)
			index[k] = i
			keys = append(keys, k)
			byKey = append(byKey, nil)
		}
		byKey[i] = append(byKey[i], c)
	}
	return keys, byKey
}
