package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/worker"
)

func TestScheduleSpecsParse(t *testing.T) {
	t.Parallel()
	for spec := range worker.Schedule() {
		if _, err := worker.Every(spec); err != nil {
			t.Error(err)
		}
	}
	for _, bad := range []string{"", "@every", "@every 10ms", "@weekly", "*/5 * * * *"} {
		if _, err := worker.Every(bad); err == nil {
			t.Errorf("Every(%q): got nil error, want one", bad)
		}
	}
}

// TestTwoSchedulersRunEachTickOnce: two schedulers side by side, each with
// its own Redis connection, over several ticks of two periodic jobs, with a
// worker running the tasks as they come: each tick runs exactly once, no
// tick is missed. (asynq's Scheduler, used before, would run each twice.)
// Not parallel: it runs an asynq server on this binary's Redis database.
func TestTwoSchedulersRunEachTickOnce(t *testing.T) {
	redisOpt := testenv.RedisOpt(t)
	// The schedulers' warnings (an enqueue that failed) are kept for the
	// report: without them a missed tick cannot be told from a lost task.
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const typeA, typeB = "test:periodic_a", "test:periodic_b"
	schedule := map[string]func() *asynq.Task{
		"@every 1s": func() *asynq.Task { return asynq.NewTask(typeA, nil, asynq.Queue(tasks.QueueDefault)) },
		// Unique, as the renewal sweep: the late scheduler's enqueue of a
		// tick already run took its lock and kept it once (asynq), which
		// skipped every later tick until the lock expired.
		"@every 2s": func() *asynq.Task {
			return asynq.NewTask(typeB, nil, asynq.Queue(tasks.QueueLow), asynq.Unique(time.Minute))
		},
	}
	rdb := testenv.Redis(t)

	var mu sync.Mutex
	runs := map[string]int{} // task id → runs
	srv := asynq.NewServer(redisOpt, asynq.Config{Concurrency: 4, Queues: tasks.Queues, LogLevel: asynq.WarnLevel, TaskCheckInterval: 50 * time.Millisecond})
	mux := asynq.NewServeMux()
	count := func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		runs[id]++
		mu.Unlock()
		return nil
	}
	mux.HandleFunc(typeA, count)
	mux.HandleFunc(typeB, count)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	// The second scheduler's clock is half a second late: it enqueues each
	// tick after the first one's task has run, which must not run it again.
	for _, skew := range []time.Duration{0, -500 * time.Millisecond} {
		client := asynq.NewClient(redisOpt)
		defer client.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := func() time.Time { return time.Now().Add(skew) }
			if err := worker.Periodic(ctx, client, rdb, schedule, now, log); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(6500 * time.Millisecond)
	stop := time.Now()
	cancel()
	wg.Wait()
	end := time.Now()
	start = start.Add(-500 * time.Millisecond) // the late clock's first tick

	// Every tick between start and end may run, once; each one whose whole
	// interval passed before the schedulers were told to stop must have run.
	// (Judged on stop, not end: wg.Wait can return well after cancel on a
	// loaded machine, and a tick that only came due after the stop may be
	// cut off in its enqueue, as it should.)
	want := map[string]bool{}
	for typ, every := range map[string]time.Duration{typeA: time.Second, typeB: 2 * time.Second} {
		for tick := start.Truncate(every); !tick.After(end); tick = tick.Add(every) {
			want[worker.TickID(typ, tick)] = !tick.Add(every).After(stop) // false: maybe not enqueued before the stop
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for id, must := range want {
			if must && runs[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a duplicate would be run by now too
	mu.Lock()
	defer mu.Unlock()
	if len(runs) < 8 {
		t.Errorf("got %d ticks run, want at least 8 (6 of 1s, 3 of 2s): %v", len(runs), runs)
	}
	for id, n := range runs {
		if _, ok := want[id]; !ok {
			t.Errorf("task %s ran: not a tick between start and end", id)
		}
		if n != 1 {
			t.Errorf("task %s ran %d times, want once", id, n)
		}
	}
	for id, must := range want {
		if must && runs[id] == 0 {
			t.Errorf("tick %s never ran", id)
		}
	}
	if t.Failed() {
		t.Logf("start %s, stop %s, end %s; the schedulers' warnings:\n%s", start.Format(time.StampMilli), stop.Format(time.StampMilli), end.Format(time.StampMilli), logs)
	}
}

// TestPeriodicSkipsTicksWhileAUniqueTaskRuns: a Unique periodic task (the
// renewal sweep) is enqueued once while its last tick's task has not
// finished, and the ticks it skips are not errors to retry each second.
func TestPeriodicSkipsTicksWhileAUniqueTaskRuns(t *testing.T) {
	redisOpt := testenv.RedisOpt(t)
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	insp := asynq.NewInspector(redisOpt)
	defer insp.Close()

	// The sweep's own task is Unique: a second one is refused while the
	// first waits.
	if _, err := client.Enqueue(tasks.NewRenewSubscriptions(), asynq.TaskID("renew_first")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(tasks.NewRenewSubscriptions(), asynq.TaskID("renew_second")); !errors.Is(err, asynq.ErrDuplicateTask) {
		t.Fatalf("a second renewal sweep while one waits: got %v, want asynq.ErrDuplicateTask", err)
	}
	if err := insp.DeleteTask(tasks.QueueCritical, "renew_first"); err != nil { // no other test's worker may sweep
		t.Fatal(err)
	}

	// Periodic over three 1 s ticks of a Unique task no worker runs.
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const typ = "test:periodic_unique"
	schedule := map[string]func() *asynq.Task{
		"@every 1s": func() *asynq.Task {
			return asynq.NewTask(typ, nil, asynq.Queue(tasks.QueueLow), asynq.Unique(time.Minute))
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	if err := worker.Periodic(ctx, client, testenv.Redis(t), schedule, time.Now, log); err != nil {
		t.Fatal(err)
	}
	pending, err := insp.ListPendingTasks(tasks.QueueLow)
	if err != nil || len(pending) != 1 {
		t.Errorf("after three ticks: got %d pending tasks (%v), want the first tick's alone", len(pending), err)
	}
	// A tick whose enqueue the test's own deadline cut short (a loaded
	// machine, Redis slow to answer at the last tick) warns rightly; any
	// other warning is a skipped tick that was not quiet.
	for _, line := range logs.Lines() {
		if !strings.Contains(line, "context deadline exceeded") {
			t.Errorf("got warnings, want the skipped ticks skipped quietly:\n%s", logs)
			break
		}
	}
}
