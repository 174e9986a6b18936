package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/app"
	"paysvc/internal/testenv"
)

// A process warns at start when its Redis may evict keys, naming the
// policy, and says nothing when it runs with noeviction. The Redis is a
// server of the test's own: the shared one's policy is not the test's to
// change.
func TestWarnsWhenRedisMayEvict(t *testing.T) {
	addr := testenv.FreeAddr(t)
	startDaemon(t, "redis-server", "--port", port(addr), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory-policy", "volatile-lru")
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	waitUntil(t, 10*time.Second, "redis-server to answer", func() bool { return rdb.Ping(ctx).Err() == nil })

	check := func() string {
		var buf testenv.LogBuffer
		app.CheckRedisEviction(ctx, rdb, slog.New(slog.NewJSONHandler(&buf, nil)))
		return buf.String()
	}
	if out := check(); !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"maxmemory_policy":"volatile-lru"`) {
		t.Fatalf("volatile-lru: want a warning naming the policy, logged %q", out)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if out := check(); out != "" {
		t.Fatalf("noeviction: want nothing logged, logged %q", out)
	}
	// A Redis that does not answer is not a warning: the processes serve
	// without it, and the check must not hold the start.
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	if out := check(); out != "" {
		t.Fatalf("closed client: want nothing at info level, logged %q", out)
	}
}
