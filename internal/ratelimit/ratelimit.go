// Package ratelimit limits requests per API key in Redis with GCRA, so
// every API replica shares one budget per key. The hourly limit is exact
// across replicas: the check that would overspend a key's budget is
// refused, whichever replica it reaches. Sign-in attempts (Window) use
// go-redis/redis_rate as it is.
package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/groupcommit"
)

// Limiter allows perHour requests per key per rolling hour.
type Limiter struct {
	rdb   *batcher
	burst int                               // the hourly budget, spendable at once
	q     groupcommit.Queue[string, Result] // checks by their key
	// refused holds, per key this process saw refused, until when that
	// refusal's RetryAfter runs (Refusing).
	refused sync.Map // key → time.Time
	// leases holds, per key, this process's latest lease of its budget
	// (lease.go).
	leases                     sync.Map // key → *lease
	leaseIDs                   leaseIDs
	maxLease, reserve          int
	leaseFor, leasedRemembered time.Duration
	leaseKept                  time.Duration
	closed                     atomic.Bool // Close: no more leases
}

// New returns a limiter of perHour requests per key. The burst equals the
// hourly budget: a key may spend its hour at once, then refills steadily.
// Concurrent checks of one key are decided together (coalesce), the Redis
// calls of concurrent checks share their round trips (batcher), and a key
// checked faster than Redis answers is decided from a short lease of its
// budget (lease.go).
func New(rdb redis.UniversalClient, perHour int) *Limiter {
	l := &Limiter{
		rdb:   newBatcher(rdb),
		burst: perHour,
	}
	l.q.Run = l.coalesce
	l.sizeLeases(perHour)
	return l
}

// Result is the outcome of one Allow.
type Result struct {
	Allowed    bool
	Limit      int
	Remaining  int
	RetryAfter time.Duration // when not allowed: until one request fits again
}

// check is one request's Allow, waiting for its turn in the queue.
type check = groupcommit.Call[string, Result]

// Allow spends one request of key's budget.
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.Start(ctx, key, 0).Wait()
}

// Check is an Allow under way (Start), or already decided from a lease.
type Check struct {
	l      *Limiter
	key    string
	c      *check
	cancel context.CancelFunc
	res    Result // c nil: decided at Start
}

// Start begins spending one request of key's budget and returns at once:
// the caller may do other work while Redis decides, then Wait. A check
// this process can decide from its lease of the key's budget is decided
// at once (Decided), with no call to Redis. budget, when above zero,
// bounds the wait for Redis's decision.
func (l *Limiter) Start(ctx context.Context, key string, budget time.Duration) Check {
	if res, ok := l.fromLease(key); ok {
		return Check{res: res}
	}
	k := Check{l: l, key: key}
	if budget > 0 {
		ctx, k.cancel = context.WithTimeout(ctx, budget)
	}
	k.c = l.q.Start(ctx, key)
	return k
}

// Decided says whether the check was decided at Start: Wait returns at
// once.
func (k Check) Decided() bool { return k.c == nil }

// Wait returns the decision of the check.
func (k Check) Wait() (Result, error) {
	if k.c == nil {
		return k.res, nil
	}
	res, err := k.c.Wait()
	if k.cancel != nil {
		k.cancel()
	}
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	if !res.Allowed {
		k.l.refused.Store(k.key, time.Now().Add(res.RetryAfter))
	}
	return res, nil
}

// Refusing says whether this process saw key refused less than that
// refusal's RetryAfter ago. Its next request is then likely refused too,
// and work done for it before the decision would be wasted on a client
// over its limit.
func (l *Limiter) Refusing(key string) bool {
	v, ok := l.refused.Load(key)
	if !ok {
		return false
	}
	if time.Now().Before(v.(time.Time)) {
		return true
	}
	l.refused.CompareAndDelete(key, v)
	return false
}

// coalesce decides the checks queued while the previous ones were in Redis:
// those a lease taken meanwhile covers from it, then one decision per
// remaining key, the keys' decisions at once, their Redis calls gathered in
// one pipeline (gathering).
func (l *Limiter) coalesce(checks []*check) {
	_, byKey := groupcommit.Distinct(checks, func(key string) string { return key })
	byKey = l.answerFromLeases(byKey)
	switch len(byKey) {
	case 0:
		return
	case 1:
		l.decide(byKey[0], nil)
		return
	}
	patient, cancel := groupcommit.PatientContext(checks)
	defer cancel()
	g := gatherIn(patient, len(byKey))
	var wg sync.WaitGroup
	for _, cs := range byKey {
		wg.Go(func() { l.decide(cs, g) })
	}
	wg.Wait()
}

// decide spends the budget of n concurrent checks of one key with one GCRA
// call, which allows as many of them as fit (all n, or the k that fit as
// a key crosses its limit): exact, since k calls of cost 1 at one instant
// pass exactly when one of cost k does (to GCRA's float rounding, well
// under Redis's microsecond clock). The call may take a lease for the
// checks to come as well (leaseSize); it is granted only with the budget
// well above it.
//
// The checks that do not fit while another process may hold a lease of
// the key's budget are decided again once every such lease has been used
// or given back (afterLeases); the others are refused. g, when coalesce
// decides several keys at once, gathers the call with theirs.
func (l *Limiter) decide(cs []*check, g *gathering) {
	n, key := len(cs), cs[0].In
	ctx, cancel := groupcommit.PatientContext(cs)
	defer cancel()
	gctx := ctx
	if g != nil {
		gctx = g.under(ctx)
	}
	res, err := l.spend(gctx, key, n, l.leaseSize(key, n))
	if err != nil {
		for _, c := range cs {
			c.Answer(Result{}, err)
		}
		return
	}
	answer := func(i int, r Result, err error) { cs[i].Answer(r, err) }
	refused := l.allow(cs, res, answer)
	if len(refused) == 0 {
		return
	}
	if res.leased > 0 {
		go l.afterLeases(refused, res)
		return
	}
	l.refuse(n-len(refused), n, res, answer)
}

// refuse answers the checks numbered from up to to with res's refusal.
func (l *Limiter) refuse(from, to int, res spent, answer func(int, Result, error)) {
	for i := from; i < to; i++ {
		answer(i, Result{Limit: l.burst, RetryAfter: res.retryAfter}, nil)
	}
}

// allow answers the checks res allowed, the first of cs (and lends the
// lease beyond them), and returns the rest, unanswered.
func (l *Limiter) allow(cs []*check, res spent, answer func(int, Result, error)) []*check {
	n := min(res.granted, len(cs))
	if res.granted > n {
		l.lend(cs[0].In, res.granted-n, res.remaining, res.lease, res.until)
	}
	for i := range n {
		answer(i, Result{Allowed: true, Limit: l.burst, Remaining: res.remaining + res.granted - 1 - i}, nil)
	}
	return cs[n:]
}

// afterLeases decides refused checks again once Redis no longer remembers
// a lease of their key (refused.leased from now): every lease taken so far
// has then ended and been given back. It runs on a goroutine of its own:
// the queue's other keys do not wait behind it. No lease of the key is
// granted meanwhile (the refusal keeps them off for three times
// leasedRemembered), so a second refusal is final.
//
// A check is never held past what its caller waits for: its caller would
// take a check out of time for a Redis that is down, and let its request
// through. One whose deadline leaves no room for the wait and a second
// call (retryBudget) keeps its refusal now; the others are answered with
// their refusal answerMargin before their deadline if the second decision
// has not answered them by then. A Redis call on the caller's goroutine
// waits for its reply whatever its context says (go-redis reads it until
// its ReadTimeout), so only such a timer bounds the wait.
func (l *Limiter) afterLeases(cs []*check, refused spent) {
	held := Result{Limit: l.burst, RetryAfter: max(refused.retryAfter, time.Millisecond)}
	latest := time.Now().Add(refused.leased + retryBudget)
	waiting := cs[:0:0]
	for _, c := range cs {
		if d, ok := c.Ctx().Deadline(); ok && d.Before(latest) {
			c.Answer(held, nil)
		} else {
			waiting = append(waiting, c)
		}
	}
	if len(waiting) == 0 {
		return
	}
	once := make([]sync.Once, len(waiting))
	answer := func(i int, r Result, err error) {
		once[i].Do(func() { waiting[i].Answer(r, err) })
	}
	for i, c := range waiting {
		if d, ok := c.Ctx().Deadline(); ok {
			t := time.AfterFunc(time.Until(d)-answerMargin, func() { answer(i, held, nil) })
			defer t.Stop()
		}
	}
	ctx, cancel := groupcommit.PatientContext(waiting)
	defer cancel()
	wait := time.NewTimer(refused.leased)
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-ctx.Done():
		for i := range waiting {
			answer(i, held, nil)
		}
		return
	}
	res, err := l.spend(ctx, waiting[0].In, len(waiting), 0)
	if err != nil {
		for i := range waiting {
			answer(i, held, nil)
		}
		return
	}
	rest := l.allow(waiting, res, answer)
	l.refuse(len(waiting)-len(rest), len(waiting), res, answer)
}

// A refusal held for leases (afterLeases) is decided again only if its
// caller waits retryBudget more after the wait, and is answered
// answerMargin before its caller stops waiting, for the answer to reach it.
const (
	retryBudget  = 40 * time.Millisecond
	answerMargin = 20 * time.Millisecond
)

// Window allows n events per key per period (sign-in attempts): GCRA
// with a burst of n, so a key that spent its n refills one per period/n.
type Window struct {
	l      *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
}

// NewWindow returns a limiter of n events per period under prefix.
func NewWindow(rdb redis.UniversalClient, prefix string, n int, period time.Duration) *Window {
	return &Window{l: redis_rate.NewLimiter(rdb), limit: redis_rate.Limit{Rate: n, Burst: n, Period: period}, prefix: prefix}
}

// Allow spends one event of key's budget; when refused, RetryAfter says
// when one fits again.
func (w *Window) Allow(ctx context.Context, key string) (Result, error) {
	res, err := w.l.Allow(ctx, "ratelimit:"+w.prefix+":"+key, w.limit)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	return Result{Allowed: res.Allowed > 0, Limit: w.limit.Burst, Remaining: res.Remaining, RetryAfter: res.RetryAfter}, nil
}

// Reset forgets key's spent events (a successful sign-in clears its
// account's failures).
func (w *Window) Reset(ctx context.Context, key string) error {
	return w.l.Reset(ctx, "ratelimit:"+w.prefix+":"+key)
}
