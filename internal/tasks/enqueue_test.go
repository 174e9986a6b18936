package tasks_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

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
