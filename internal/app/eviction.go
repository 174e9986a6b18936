package app

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis must not evict keys (README, "Redis must not evict keys"): an
// evicted rate-limiter key (a lease's give-back tally, or the counter that
// orders the leases) can give back budget already spent, and an evicted
// Asynq key loses a task until the relay enqueues it again. Managed Redis
// services often default to volatile-lru, so each process reads the policy
// once at start and warns when it evicts. INFO, not CONFIG GET: managed
// services that refuse CONFIG still answer INFO.

// evictionCheckTimeout bounds each read of the policy: Redis may be down
// at start, which the processes already serve through.
const evictionCheckTimeout = 2 * time.Second

// EvictionCheckRetry is how often a process whose Redis did not answer
// the check asks again (a process may start before its Redis).
const EvictionCheckRetry = 30 * time.Second

// redisEvictionPolicy returns Redis's maxmemory-policy, read from INFO memory.
func redisEvictionPolicy(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return v, nil
		}
	}
	return "", errNoPolicy
}

// errNoPolicy: the server answered INFO without a policy (a Redis-like
// service); asking again would not change that.
var errNoPolicy = errors.New("INFO memory names no maxmemory_policy")

// CheckRedisEviction logs a warning when Redis may evict keys. A read that
// fails is logged at debug level and made again every retry until one
// answers, the client is closed or ctx ends: it runs beside the process's
// work, never before it.
func CheckRedisEviction(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, retry time.Duration) {
	for {
		rctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
		policy, err := redisEvictionPolicy(rctx, rdb)
		cancel()
		switch {
		case err == nil && policy != "noeviction":
			log.Warn("Redis may evict keys (maxmemory-policy "+policy+"): set maxmemory-policy noeviction; "+
				"an evicted rate-limiter key can let a key past its limit, an evicted queue key delays its task (README, \"Redis must not evict keys\")",
				"maxmemory_policy", policy)
			return
		case err == nil, errors.Is(err, redis.ErrClosed):
			return
		case errors.Is(err, errNoPolicy):
			log.Debug("could not read Redis's maxmemory-policy", "error", err)
			return
		}
		log.Debug("could not read Redis's maxmemory-policy; trying again", "error", err, "in", retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
}
