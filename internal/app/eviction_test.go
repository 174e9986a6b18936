package app_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/app"
	"paysvc/internal/breaker"
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
		app.CheckRedisEviction(ctx, rdb, slog.New(slog.NewJSONHandler(&buf, nil)), time.Hour)
		return buf.String()
	}
	if out := check(); !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"maxmemory_policy":"volatile-lru"`) {
		t.Fatalf("volatile-lru: want a warning naming the policy, logged %q", out)
	}
	// Each process's start makes the check (app.Setup logs to stderr).
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", "redis://"+addr+"/0")
	if out := setupLog(t, "worker", `"maxmemory_policy":"volatile-lru"`); !strings.Contains(out, `"maxmemory_policy":"volatile-lru"`) {
		t.Fatalf("app.Setup with Redis at volatile-lru: want the warning within 5 s, logged %q", out)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if out := check(); out != "" {
		t.Fatalf("noeviction: want nothing logged, logged %q", out)
	}
	// A closed client ends the check (no retry for an hour).
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	if out := check(); out != "" {
		t.Fatalf("closed client: want nothing at info level, logged %q", out)
	}
}

// A Redis that does not answer at start is not a warning (the processes
// serve without it), and the check asks again until it answers: a process
// started before its Redis still warns once that Redis is up.
func TestEvictionCheckWaitsForRedis(t *testing.T) {
	addr := testenv.FreeAddr(t)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var buf testenv.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		app.CheckRedisEviction(ctx, rdb, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), 100*time.Millisecond)
	}()
	// Redis starts only once a read has failed (go-redis itself retries a
	// dial for a while first).
	waitUntil(t, 15*time.Second, "a failed read of the policy", func() bool {
		return strings.Contains(buf.String(), "could not read")
	})
	if out := buf.String(); strings.Contains(out, `"level":"WARN"`) {
		t.Fatalf("Redis not started: want no warning, logged %q", out)
	}
	startDaemon(t, "redis-server", "--port", port(addr), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory-policy", "allkeys-lru")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the check still running 10 s after Redis started; logged %q", buf.String())
	}
	if out := buf.String(); !strings.Contains(out, `"maxmemory_policy":"allkeys-lru"`) {
		t.Fatalf("Redis started later at allkeys-lru: want the warning, logged %q", out)
	}
}

// setupLog runs app.Setup for process with stderr, where its logger
// writes, captured, and returns what was logged by the time a line holding
// want came or 5 s passed.
func setupLog(t *testing.T, process, want string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, logger := os.Stderr, slog.Default()
	os.Stderr = w
	defer func() { os.Stderr = stderr; slog.SetDefault(logger); w.Close(); r.Close() }()
	env, err := app.Setup(context.Background(), process, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	var out testenv.LogBuffer
	go io.Copy(&out, r) //nolint:errcheck // ends when r is closed
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), want) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return out.String()
}

// TestSetupBreaksRedisCircuit: the API's Redis client fails a command at
// once, without sending it, after Redis has not answered three in a row
// (internal/breaker), instead of letting each wait out its budget. The
// worker's does not: Asynq's processor shares it and would spin.
func TestSetupBreaksRedisCircuit(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", "redis://"+testenv.FreeAddr(t)+"/0") // nothing listens there
	for _, process := range []string{"api", "worker"} {
		env, err := app.Setup(context.Background(), process, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer env.Close()
		for range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := env.Redis.Ping(ctx).Err()
			cancel()
			if err == nil {
				t.Fatalf("%s: PING answered with nothing listening", process)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err = env.Redis.Ping(ctx).Err()
		cancel()
		if unsent := err == breaker.ErrUnreachable; unsent != (process == "api") {
			t.Fatalf("%s, after three unanswered commands: got %v", process, err)
		}
	}
}

// TestRedisClientLogsJSON: go-redis's own messages (here, its dials that
// keep failing) come out through the process's logger, as JSON lines, not
// as go-redis's plain text.
func TestRedisClientLogsJSON(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", "redis://"+testenv.FreeAddr(t)+"/0") // nothing listens there
	out := setupLog(t, "worker", `"msg":"redis client"`)
	if !strings.Contains(out, `"msg":"redis client"`) {
		t.Fatalf("no go-redis message through the logger within 5 s; logged %q", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Errorf("a line that is not JSON: %q", line)
		}
	}
}
