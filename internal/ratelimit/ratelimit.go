// Package ratelimit limits requests per API key in Redis with GCRA
// (go-redis/redis_rate), so every API replica shares one budget per key.
package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/groupcommit"
)

// Limiter allows perHour requests per key per rolling hour.
type Limiter struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
	q     groupcommit.Queue[string, Result] // checks by their Redis key
	// refused holds, per key this process saw refused, until when that
	// refusal's RetryAfter runs (Refusing).
	refused sync.Map // key → time.Time
}

// New returns a limiter of perHour requests per key. The burst equals the
// hourly budget: a key may spend its hour at once, then refills steadily.
// Concurrent checks of one key are decided together (coalesce), and the
// Redis calls of concurrent checks share their round trips (batcher).
func New(rdb redis.UniversalClient, perHour int) *Limiter {
	l := &Limiter{
		l:     redis_rate.NewLimiter(newBatcher(rdb)),
		limit: redis_rate.Limit{Rate: perHour, Burst: perHour, Period: time.Hour},
	}
	l.q.Run = l.coalesce
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
	return l.Start(ctx, key).Wait()
}

// Check is an Allow under way (Start).
type Check struct {
	l   *Limiter
	key string
	c   *check
}

// Start begins spending one request of key's budget and returns at once:
// the caller may do other work while Redis decides, then Wait.
func (l *Limiter) Start(ctx context.Context, key string) Check {
	return Check{l: l, key: key, c: l.q.Start(ctx, "ratelimit:"+key)}
}

// Wait returns the decision of the check.
func (k Check) Wait() (Result, error) {
	res, err := k.c.Wait()
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
// one decision per key, the keys' decisions at once, their Redis calls
// gathered in one pipeline (gathering).
func (l *Limiter) coalesce(checks []*check) {
	_, byKey := groupcommit.Distinct(checks, func(key string) string { return key })
	if len(byKey) == 1 {
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
// call of cost n, which is exact (to redis_rate's float rounding, well under
// Redis's microsecond clock): n calls of cost 1 at one instant all pass
// exactly when one of cost n passes, and when it is refused it spends
// nothing. Refused, its RetryAfter tells how many of the n would have fitted
// one by one: none when even the first would still wait (the call of cost n
// waits n-1 intervals longer than the first call of cost 1 would), and then
// every check is refused with the first one's wait. Otherwise some but not
// all fit, as when a key crosses its limit, and each check is decided
// alone, with a call of cost 1 of its own (through the batcher's queue).
// g, when coalesce decides several keys at once, gathers the call of cost
// n with theirs.
func (l *Limiter) decide(cs []*check, g *gathering) {
	n, key := len(cs), cs[0].In
	ctx, cancel := groupcommit.PatientContext(cs)
	defer cancel()
	if g != nil {
		ctx = g.under(ctx)
	}
	res, err := l.l.AllowN(ctx, key, l.limit, n)
	if err != nil {
		for _, c := range cs {
			c.Answer(Result{}, err)
		}
		return
	}
	if res.Allowed > 0 {
		for i, c := range cs {
			c.Answer(Result{Allowed: true, Limit: l.limit.Burst, Remaining: res.Remaining + n - 1 - i}, nil)
		}
		return
	}
	// GCRA's emission interval: one request refills in it. The margin keeps
	// a float rounding at the boundary on the exact path.
	interval := l.limit.Period / time.Duration(l.limit.Rate)
	if firstWaits := res.RetryAfter - time.Duration(n-1)*interval; n == 1 || firstWaits > time.Millisecond {
		for _, c := range cs {
			c.Answer(Result{Limit: l.limit.Burst, RetryAfter: firstWaits}, nil)
		}
		return
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			res, err := l.l.Allow(c.Ctx(), key, l.limit)
			if err != nil {
				c.Answer(Result{}, err)
				return
			}
			r := Result{Allowed: res.Allowed > 0, Limit: l.limit.Burst, Remaining: res.Remaining}
			if !r.Allowed {
				r.RetryAfter = res.RetryAfter
			}
			c.Answer(r, nil)
		})
	}
	wg.Wait()
}

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
