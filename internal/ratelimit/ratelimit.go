// Package ratelimit limits requests per API key in Redis with GCRA
// (go-redis/redis_rate), so every API replica shares one budget per key.
package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Limiter allows perHour requests per key per rolling hour.
type Limiter struct {
	l     *redis_rate.Limiter
	limit redis_rate.Limit
}

// New returns a limiter of perHour requests per key. The burst equals the
// hourly budget: a key may spend its hour at once, then refills steadily.
// Concurrent requests' checks share their round trips to Redis (batcher).
func New(rdb redis.UniversalClient, perHour int) *Limiter {
	return &Limiter{
		l:     redis_rate.NewLimiter(&batcher{UniversalClient: rdb}),
		limit: redis_rate.Limit{Rate: perHour, Burst: perHour, Period: time.Hour},
	}
}

// Result is the outcome of one Allow.
type Result struct {
	Allowed    bool
	Limit      int
	Remaining  int
	RetryAfter time.Duration // when not allowed: until one request fits again
}

// Allow spends one request of key's budget.
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	res, err := l.l.Allow(ctx, "ratelimit:"+key, l.limit)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	return Result{Allowed: res.Allowed > 0, Limit: l.limit.Burst, Remaining: res.Remaining, RetryAfter: res.RetryAfter}, nil
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
