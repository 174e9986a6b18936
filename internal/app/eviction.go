package app

import (
	"context"
	"fmt"
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

// evictionCheckTimeout bounds the start-up read: Redis may be down then,
// which the processes already serve through.
const evictionCheckTimeout = 2 * time.Second

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
	return "", fmt.Errorf("INFO memory names no maxmemory_policy")
}

// CheckRedisEviction logs a warning when Redis may evict keys, and at debug
// level when the policy could not be read.
func CheckRedisEviction(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	policy, err := redisEvictionPolicy(ctx, rdb)
	switch {
	case err != nil:
		log.Debug("could not read Redis's maxmemory-policy", "error", err)
	case policy != "noeviction":
		log.Warn("Redis may evict keys (maxmemory-policy "+policy+"): set maxmemory-policy noeviction; "+
			"an evicted rate-limiter key can let a key past its limit, an evicted queue key delays its task (README, \"Redis must not evict keys\")",
			"maxmemory_policy", policy)
	}
}
