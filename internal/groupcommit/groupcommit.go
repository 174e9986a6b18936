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
	// Run answers every call of a run (Call.Answer). With Overlap zero,
	// one run at a time; otherwise up to MaxRuns at once.
	Run func([]*Call[In, Out])
	// Overlap, when above zero, lets a further run start once the newest
	// run in flight has gone on this long. A run is slow when what it
	// waits for is saturated (a database busy with a sweep); the calls
	// queued behind it then wait about Overlap for their own run to start,
	// not for the slow run to end as well. Runs shorter than Overlap, the
	// usual case, still carry every call that came meanwhile.
	Overlap time.Duration
	// MaxRuns bounds the runs in flight when Overlap is set (2 when zero).
	MaxRuns int

	mu     sync.Mutex
	calls  []*Call[In, Out]
	runs   int         // runner goroutines running
	newest time.Time   // when the newest run in flight started; zero once it ended
	timer  *time.Timer // starts a run when the newest gets old (Overlap)
	armed  bool        // timer is set to fire
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

// Do makes a call of in and waits for its answer or the end of ctx.
//
// A call that finds the queue idle (no run in flight, none queued) runs at
// once, alone, on the caller's goroutine, as if there were no queue. A
// runner goroutine would cost a start and two wake-ups for a caller that
// waits anyway; that is every call at low load, and every call of a queue
// whose caller mostly makes one at a time (the limiter's runner, for its
// Redis calls; its held refusals and give-backs call it too). Calls made
// meanwhile queue behind it as behind any run, and go together from a
// runner once it ends.
func (q *Queue[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := newCall[In, Out](ctx, in)
	q.mu.Lock()
	if q.runs == 0 && len(q.calls) == 0 {
		q.runs++
		started := q.begin()
		q.mu.Unlock()
		q.runInline(c, started)
		return c.out, c.err
	}
	start := q.queue(c)
	q.mu.Unlock()
	if start {
		go q.drain()
	}
	return c.Wait()
}

// runInline runs c alone on its caller's goroutine (Do), then leaves the
// calls queued meanwhile to a runner. That hand-over is deferred: a Run
// that panics here panics in the caller's goroutine, which may recover
// (the API answers 500), and the queue must not be left counting a run
// that never ends, with every later call waiting behind it.
func (q *Queue[In, Out]) runInline(c *Call[In, Out], started time.Time) {
	defer func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.end(started)
		switch {
		case len(q.calls) == 0:
			q.runs--
		case q.yield():
		default:
			go q.drain() // the run stays counted, as drain's
		}
	}()
	q.run([]*Call[In, Out]{c})
}

// Start queues a call of in and returns at once; the caller may do other
// work before it Waits for the answer.
func (q *Queue[In, Out]) Start(ctx context.Context, in In) *Call[In, Out] {
	c := newCall[In, Out](ctx, in)
	q.add(c)
	return c
}

func newCall[In, Out any](ctx context.Context, in In) *Call[In, Out] {
	return &Call[In, Out]{In: in, ctx: ctx, done: make(chan struct{})}
}

// Wait waits for the call's answer or the end of its context. An answer
// that came is taken even when the context has ended too (a caller that
// did other work after Start may find both), and a call given up is
// answered with an error, never an empty success.
func (c *Call[In, Out]) Wait() (Out, error) {
	select {
	case <-c.done:
		return c.out, c.err
	case <-c.ctx.Done():
		select {
		case <-c.done:
			return c.out, c.err
		default:
			var zero Out
			return zero, c.ctx.Err()
		}
	}
}

// add queues c and starts a runner when none is running, or when the
// newest run has gone on for Overlap.
func (q *Queue[In, Out]) add(c *Call[In, Out]) {
	q.mu.Lock()
	start := q.queue(c)
	q.mu.Unlock()
	if start {
		go q.drain()
	}
}

// queue appends c to the queued calls and says whether the caller must
// start a runner for them (claimRun). The caller holds q.mu.
func (q *Queue[In, Out]) queue(c *Call[In, Out]) bool {
	q.calls = append(q.calls, c)
	return q.claimRun()
}

// claimRun says whether a run may start now for the queued calls: none is
// in flight, or Overlap is due. If so it counts the run, whose runner the
// caller starts; if not it sets the timer for when Overlap will be due.
// The caller holds q.mu.
func (q *Queue[In, Out]) claimRun() bool {
	if q.runs == 0 || q.overlapDue() {
		q.runs++
		return true
	}
	q.arm()
	return false
}

// overlapDue says whether one more run may start beside those in flight.
// The caller holds q.mu.
func (q *Queue[In, Out]) overlapDue() bool {
	return q.runs < q.maxRuns() && q.newestOld()
}

// newestOld says whether the newest run started Overlap ago or longer.
// The caller holds q.mu.
func (q *Queue[In, Out]) newestOld() bool {
	return q.Overlap > 0 && time.Since(q.newest) >= q.Overlap
}

func (q *Queue[In, Out]) maxRuns() int {
	if q.MaxRuns > 0 {
		return q.MaxRuns
	}
	return 2
}

// arm sets the timer to start a run when the newest one becomes Overlap
// old, unless it is set already: queued calls then wait no longer than
// that even if no further call comes to start it. The caller holds q.mu.
func (q *Queue[In, Out]) arm() {
	if q.Overlap <= 0 || q.armed || q.runs >= q.maxRuns() {
		return
	}
	q.armed = true
	wait := q.Overlap - time.Since(q.newest)
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, q.due)
		return
	}
	q.timer.Reset(wait)
}

// due is the timer's: it starts a run for the queued calls if one may
// start now, and sets the timer again if not yet.
func (q *Queue[In, Out]) due() {
	q.mu.Lock()
	q.armed = false
	if len(q.calls) == 0 {
		q.mu.Unlock()
		return
	}
	start := q.claimRun()
	q.mu.Unlock()
	if start {
		q.drain()
	}
}

// drain runs the queued calls until none are left; or, when other runs are
// in flight, until taking them would start a run before Overlap is due:
// they are then left to the runner of a run in flight, or the timer's.
func (q *Queue[In, Out]) drain() {
	q.mu.Lock()
	for {
		calls := q.calls
		if len(calls) == 0 {
			q.runs--
			q.mu.Unlock()
			return
		}
		q.calls = nil
		started := q.begin()
		q.mu.Unlock()
		q.run(calls)
		q.mu.Lock()
		q.end(started)
		if q.yield() {
			q.mu.Unlock()
			return
		}
	}
}

// begin notes that a run starts (with Overlap, as the newest) and returns
// its start for end. The caller holds q.mu.
func (q *Queue[In, Out]) begin() time.Time {
	if q.Overlap <= 0 {
		return time.Time{}
	}
	q.newest = time.Now()
	return q.newest
}

// end notes that the run begun at started ended. A run starts only once
// the newest in flight is Overlap old, so when the newest ends, every run
// still in flight is. The caller holds q.mu.
func (q *Queue[In, Out]) end(started time.Time) {
	if q.newest.Equal(started) {
		q.newest = time.Time{}
	}
}

// yield says whether the runner of a run that just ended leaves the
// queued calls to a run in flight, or to the timer, because taking them
// now would start a run before Overlap is due; it then no longer counts.
// The caller holds q.mu.
func (q *Queue[In, Out]) yield() bool {
	if q.runs > 1 && len(q.calls) > 0 && !q.newestOld() {
		q.runs--
		q.arm()
		return true
	}
	return false
}

// run answers the calls whose caller has given up with their context's
// error and gives the others to Run.
func (q *Queue[In, Out]) run(calls []*Call[In, Out]) {
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
