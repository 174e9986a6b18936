package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

func TestRunServesAndStopsGracefully(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	addr := testenv.FreeAddr(t)
	t.Setenv("WORKER_ADMIN_ADDR", addr)
	const billingConcurrency = 3
	t.Setenv("WORKER_BILLING_CONCURRENCY", strconv.Itoa(billingConcurrency))
	redisOpt := testenv.RedisOpt(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	testenv.WaitReady(t, addr, done)

	// The worker processes maintenance tasks from the low queue.
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	info, err := client.Enqueue(tasks.NewMaintainPartitions(), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(redisOpt)
	defer insp.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		if err != nil {
			t.Fatalf("task %s: %v", info.ID, err)
		}
		if ti.State == asynq.TaskStateCompleted {
			break
		}
		if ti.State == asynq.TaskStateRetry || ti.State == asynq.TaskStateArchived {
			t.Fatalf("task %s: got state %v (last error %q), want completed", info.ID, ti.State, ti.LastErr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s: got state %v after 15s, want completed", info.ID, ti.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	servers, err := insp.Servers()
	if err != nil {
		t.Fatal(err)
	}
	// Three servers: deliveries (the default queue) alone, subscription
	// charges (billing) alone at WORKER_BILLING_CONCURRENCY, and the rest.
	if len(servers) != 3 {
		t.Fatalf("while running: got %d asynq servers registered, want 3", len(servers))
	}
	served := map[string]int{}
	var queues []map[string]int
	for _, s := range servers {
		for _, alone := range []string{tasks.QueueDefault, tasks.QueueBilling} {
			if _, ok := s.Queues[alone]; ok && len(s.Queues) != 1 {
				t.Errorf("the %s queue's server: queues %v, want that queue alone", alone, s.Queues)
			}
		}
		if _, ok := s.Queues[tasks.QueueBilling]; ok && s.Concurrency != billingConcurrency {
			t.Errorf("the billing queue's server: concurrency %d, want WORKER_BILLING_CONCURRENCY (%d)", s.Concurrency, billingConcurrency)
		}
		for q := range s.Queues {
			served[q]++
		}
		queues = append(queues, s.Queues)
	}
	for q := range tasks.Queues {
		if served[q] != 1 {
			t.Errorf("queue %q: served by %d servers, want 1 (servers' queues: %v)", q, served[q], queues)
		}
	}
	// Its /metrics has every queue's depth (the autoscaling signal).
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for q := range tasks.Queues {
		for _, want := range []string{`paysvc_queue_tasks{queue="` + q + `",state="pending"} `, `paysvc_queue_oldest_pending_seconds{queue="` + q + `"} `} {
			if !strings.Contains(string(body), want) {
				t.Errorf("worker GET /metrics: got no %s…, want each queue's depth", want)
			}
		}
	}

	cancel()
	if err := testenv.WaitRun(t, done); err != nil {
		t.Errorf("run after cancel: got %v, want nil", err)
	}
	if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("after run returned: admin listener still answers (%s), want it closed", res.Status)
	}
	servers, err = insp.Servers()
	if err != nil {
		t.Fatal(err)
	}
	if len(servers) != 0 {
		t.Errorf("after run returned: got %d asynq servers registered, want 0", len(servers))
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
	t.Setenv("WORKER_ADMIN_ADDR", l.Addr().String())

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	if err := testenv.WaitRun(t, done); err == nil {
		t.Error("run with WORKER_ADMIN_ADDR in use: got nil, want an error")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
	t.Setenv("WORKER_ADMIN_ADDR", testenv.FreeAddr(t))
	t.Setenv("RATE_LIMIT_PER_HOUR", "0")

	done := make(chan error, 1)
	go func() { done <- run(context.Background()) }()
	err := testenv.WaitRun(t, done)
	if err == nil || !strings.Contains(err.Error(), "RATE_LIMIT_PER_HOUR") {
		t.Errorf("run with RATE_LIMIT_PER_HOUR=0: got %v, want a configuration error naming RATE_LIMIT_PER_HOUR", err)
	}
}
