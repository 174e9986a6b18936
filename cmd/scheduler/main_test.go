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

// tickTasks returns the task ids of the current tick of every entry of
// worker.Schedule() that are in Redis (in any of the queues), sorted.
func tickTasks(t *testing.T, insp *asynq.Inspector, now time.Time) (got, want []string) {
	t.Helper()
	for spec, task := range worker.Schedule() {
		every, err := worker.Every(spec)
		if err != nil {
			t.Fatal(err)
		}
		id := worker.TickID(task().Type(), now.Truncate(every))
		want = append(want, id)
		for q := range tasks.Queues {
			if _, err := insp.GetTaskInfo(q, id); err == nil {
				got = append(got, id)
				break
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	return got, want
}

// TestRunEnqueuesTicksAndStopsGracefully: the scheduler enqueues the current
// tick of every periodic job when it starts (Periodic), and stops on cancel.
func TestRunEnqueuesTicksAndStopsGracefully(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	addr := testenv.FreeAddr(t)
	t.Setenv("SCHEDULER_ADMIN_ADDR", addr)
	insp := asynq.NewInspector(testenv.RedisOpt(t))
	defer insp.Close()

	types := []string{}
	for _, task := range worker.Schedule() {
		types = append(types, task().Type())
	}
	for _, typ := range []string{tasks.TypePartitions, tasks.TypePruneViolations} {
		if !slices.Contains(types, typ) {
			t.Fatalf("worker.Schedule(): got %v, want an entry for %s", types, typ)
		}
	}

	// Start well inside a minute: a scheduler started in a minute's last
	// seconds enqueues that minute's sweep, and the next minute's is then
	// skipped by design while the first waits (a Unique task; nothing
	// runs tasks here), so the current tick's would never appear.
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 12*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	testenv.WaitReady(t, addr, done)

	var got, want []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The current ticks are all enqueued within the wait, before the
		// next minute's boundary.
		got, want = tickTasks(t, insp, time.Now())
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("tasks of the current ticks while running: got %v, want %v", got, want)
	}

	cancel()
	if err := testenv.WaitRun(t, done); err != nil {
		t.Errorf("run after cancel: got %v, want nil", err)
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("after run returned: admin listener still answers (%s), want it closed", res.Status)
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
