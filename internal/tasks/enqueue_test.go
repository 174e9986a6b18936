package tasks_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/breaker"
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

// refuseAll is a Redis hook that fails every command as the API's open
// breaker does.
type refuseAll struct{}

func (refuseAll) DialHook(next redis.DialHook) redis.DialHook { return next }
func (refuseAll) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		cmd.SetErr(breaker.ErrUnreachable)
		return breaker.ErrUnreachable
	}
}
func (refuseAll) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			c.SetErr(breaker.ErrUnreachable)
		}
		return breaker.ErrUnreachable
	}
}

// TestEnqueueQuietWhileRedisDown: an enqueue the API's open breaker
// refused is logged at debug level, since the breaker warned once, also
// where Asynq's scripts keep only the error's text; any other failure, as
// a warning.
func TestEnqueueQuietWhileRedisDown(t *testing.T) {
	// The queue is known to the client (Asynq publishes it at its first
	// enqueue) before Redis goes: its enqueues then fail in a script.
	refused := testenv.Redis(t)
	warm := &tasks.Enqueuer{Client: asynq.NewClientFromRedisClient(refused), Log: slog.New(slog.DiscardHandler)}
	if warm.Enqueue(context.Background(), []*asynq.Task{asynq.NewTask("test:enqueue", nil, asynq.Queue(tasks.QueueLow))}) != 1 {
		t.Fatal("enqueue with Redis up failed")
	}
	refused.AddHook(refuseAll{})
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	task := func() *asynq.Task { return asynq.NewTask("test:enqueue", nil, asynq.Queue(tasks.QueueLow)) }
	for _, c := range []struct {
		name string
		rdb  redis.UniversalClient
		ctx  context.Context
		want string
	}{
		{"breaker open", nil, context.Background(), "level=DEBUG"},
		{"budget spent", testenv.Redis(t), expired, "level=WARN"},
	} {
		log := &testenv.LogBuffer{}
		enq := warm
		if c.rdb != nil {
			enq = &tasks.Enqueuer{Client: asynq.NewClientFromRedisClient(c.rdb)}
		}
		enq.Log = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		enq.Enqueue(c.ctx, []*asynq.Task{task()})
		enq.EnqueueIn(c.ctx, task(), time.Minute)
		lines := log.Lines()
		if len(lines) != 2 || !strings.Contains(lines[0], c.want) || !strings.Contains(lines[1], c.want) {
			t.Errorf("%s: got logs %q, want two at %s", c.name, lines, c.want)
		}
	}
}
