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
	addr := testenv.FreeAddr(t)
	t.Setenv("SCHEDULER_ADMIN_ADDR", addr)
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
	testenv.WaitReady(t, addr, done)

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
	if err := testenv.WaitRun(t, done); err != nil {
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
	t.Setenv("SCHEDULER_ADMIN_ADDR", l.Addr().String())

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	if err := testenv.WaitRun(t, done); err == nil {
		t.Error("run with SCHEDULER_ADMIN_ADDR in use: got nil, want an error")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", "mysql://localhost/payments")
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("SCHEDULER_ADMIN_ADDR", testenv.FreeAddr(t))

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	err := testenv.WaitRun(t, done)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL") {
		t.Errorf("run with DATABASE_URL=mysql://…: got %v, want a configuration error naming DATABASE_URL", err)
	}
}
