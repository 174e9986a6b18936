package tasks_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

// TestEnqueueBatch: a sweep's batch of tasks is enqueued whole and counted,
// each once (a second call finds every TaskID taken and says nothing); when
// Redis cannot be reached in time, the call logs one warning for all of
// them, not one per task.
func TestEnqueueBatch(t *testing.T) {
	const n = 300
	client := asynq.NewClientFromRedisClient(testenv.Redis(t))
	log := &testenv.LogBuffer{}
	enq := &tasks.Enqueuer{Client: client, Log: slog.New(slog.NewTextHandler(log, nil))}
	batch := func(prefix string) []*asynq.Task {
		ts := make([]*asynq.Task, n)
		for i := range ts {
			ts[i] = asynq.NewTask("test:enqueue", nil, asynq.TaskID(fmt.Sprintf("%s_%d", prefix, i)), asynq.Queue(tasks.QueueLow))
		}
		return ts
	}
	ctx := context.Background()
	if got := enq.Enqueue(ctx, batch("enq")); got != n {
		t.Fatalf("Enqueue: got %d queued, want %d", got, n)
	}
	info, err := asynq.NewInspectorFromRedisClient(testenv.Redis(t)).GetQueueInfo(tasks.QueueLow)
	if err != nil || info.Pending != n {
		t.Fatalf("queue %s: got %+v, %v, want %d pending", tasks.QueueLow, info, err, n)
	}
	if got := enq.Enqueue(ctx, batch("enq")); got != 0 || len(log.Lines()) != 0 {
		t.Fatalf("Enqueue again: got %d queued and logs %q, want 0 and none (already queued)", got, log.Lines())
	}

	expired, cancel := context.WithCancel(ctx)
	cancel()
	if got := enq.Enqueue(expired, batch("late")); got != 0 {
		t.Fatalf("Enqueue with the budget spent: got %d queued, want 0", got)
	}
	lines := log.Lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "failed=300") || !strings.Contains(lines[0], "of=300") {
		t.Fatalf("Enqueue with the budget spent: got logs %q, want one warning for the 300 tasks", lines)
	}
}

// TestEnqueueQuietWhileRedisDown: while the API's breaker says Redis is
// down (RedisDown), a failed enqueue is logged at debug level, since the
// breaker warned once; otherwise, as a warning.
func TestEnqueueQuietWhileRedisDown(t *testing.T) {
	client := asynq.NewClientFromRedisClient(testenv.Redis(t))
	down := true
	enq := &tasks.Enqueuer{Client: client, RedisDown: func() bool { return down }}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	task := func() *asynq.Task { return asynq.NewTask("test:enqueue", nil, asynq.Queue(tasks.QueueLow)) }
	for _, d := range []bool{true, false} {
		down = d
		log := &testenv.LogBuffer{}
		enq.Log = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		enq.Enqueue(expired, []*asynq.Task{task()})
		enq.EnqueueIn(expired, task(), time.Minute)
		lines := log.Lines()
		want := "level=WARN"
		if d {
			want = "level=DEBUG"
		}
		if len(lines) != 2 || !strings.Contains(lines[0], want) || !strings.Contains(lines[1], want) {
			t.Fatalf("RedisDown %v: got logs %q, want two at %s", d, lines, want)
		}
	}
}
