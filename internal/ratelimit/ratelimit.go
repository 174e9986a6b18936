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
func New(rdb redis.UniversalClient, perHour int) *Limiter {
	return &Limiter{
		l:     redis_rate.NewLimiter(rdb),
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
