package main

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/worker"
)

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitReady polls the admin listener's /readyz until it answers 200; it fails
// the test if run returns first or 15 s pass.
func waitReady(t *testing.T, addr string, done <-chan error) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned %v before /readyz answered 200 (last: %s)", err, last)
		default:
		}
		res, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			last = res.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET /readyz: got %s for 15s, want 200", last)
}

// waitRun waits for run to return after ctx was cancelled.
func waitRun(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation, want a graceful stop")
		return nil
	}
}

// entries returns the registered scheduler entries as "type spec", sorted.
func entries(t *testing.T, insp *asynq.Inspector) []string {
	t.Helper()
	es, err := insp.SchedulerEntries()
	if err != nil {
		t.Fatalf("SchedulerEntries: %v", err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Task.Type()+" "+e.Spec)
	}
	slices.Sort(out)
	return out
}

func TestRunRegistersEntriesAndStopsGracefully(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	addr := freeAddr(t)
	t.Setenv("ADMIN_ADDR", addr)
	insp := asynq.NewInspector(testenv.RedisOpt(t))
	defer insp.Close()

	var want []string
	for spec, task := range worker.Schedule() {
		want = append(want, task().Type()+" "+spec)
	}
	slices.Sort(want)
	for _, typ := range []string{tasks.TypePruneIdempotency, tasks.TypePruneViolations} {
		if !slices.ContainsFunc(want, func(s string) bool { return strings.HasPrefix(s, typ+" ") }) {
			t.Fatalf("worker.Schedule(): got %v, want an entry for %s", want, typ)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	waitReady(t, addr, done)

	// The scheduler publishes its entries on its heartbeat (every 5 s).
	var got []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		got = entries(t, insp)
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("scheduler entries while running: got %v, want %v", got, want)
	}

	cancel()
	if err := waitRun(t, done); err != nil {
		t.Errorf("run after cancel: got %v, want nil", err)
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("after run returned: admin listener still answers (%s), want it closed", res.Status)
	}
	if got := entries(t, insp); len(got) != 0 {
		t.Errorf("scheduler entries after stop: got %v, want none", got)
	}
}

func TestRunFailsWhenAdminAddrIsTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("ADMIN_ADDR", l.Addr().String())

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	if err := waitRun(t, done); err == nil {
		t.Error("run with ADMIN_ADDR in use: got nil, want an error")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", "mysql://localhost/payments")
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("ADMIN_ADDR", freeAddr(t))

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	err := waitRun(t, done)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("run with DATABASE_URL=mysql://…: got %v, want a configuration error naming DATABASE_URL", err)
	}
}
