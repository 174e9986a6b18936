package tasks_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

// lockedLog is a log sink the Enqueuer's goroutines may share.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.FieldsFunc(l.b.String(), func(r rune) bool { return r == '\n' })
}

// TestEnqueueBatch: a sweep's batch of tasks is enqueued whole and counted,
// each once (a second call finds every TaskID taken and says nothing); when
// Redis cannot be reached in time, the call logs one warning for all of
// them, not one per task.
func TestEnqueueBatch(t *testing.T) {
	const n = 300
	client := asynq.NewClientFromRedisClient(testenv.Redis(t))
	log := &lockedLog{}
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
	if got := enq.Enqueue(ctx, batch("enq")); got != 0 || len(log.lines()) != 0 {
		t.Fatalf("Enqueue again: got %d queued and logs %q, want 0 and none (already queued)", got, log.lines())
	}

	expired, cancel := context.WithCancel(ctx)
	cancel()
	if got := enq.Enqueue(expired, batch("late")); got != 0 {
		t.Fatalf("Enqueue with the budget spent: got %d queued, want 0", got)
	}
	lines := log.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "failed=300") || !strings.Contains(lines[0], "of=300") {
		t.Fatalf("Enqueue with the budget spent: got logs %q, want one warning for the 300 tasks", lines)
	}
}
