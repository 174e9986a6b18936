package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// Every parses a Schedule spec: "@every D" (a Go duration), "@hourly" or
// "@daily". Ticks are aligned on the wall clock (multiples of D since the
// zero time: on the minute for 1m, on the hour for 1h), not on when a
// scheduler started, so that every scheduler agrees on them.
func Every(spec string) (time.Duration, error) {
	switch spec {
	case "@hourly":
		return time.Hour, nil
	case "@daily":
		return 24 * time.Hour, nil
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && every >= time.Second {
			return every, nil
		}
	}
	return 0, fmt.Errorf("schedule spec %q: want @every <duration of 1s or more>, @hourly or @daily", spec)
}

// TickID is the task id of a periodic task's tick: two schedulers
// enqueueing the same tick name the same task, and Redis keeps one.
func TickID(taskType string, tick time.Time) string {
	return taskType + "@" + tick.UTC().Format(time.RFC3339)
}

// Periodic enqueues each task of schedule once per tick until ctx ends,
// with the task id TickID and a retention of one interval: the id refuses
// a second enqueue of the tick while the task waits or runs, the retention
// while it is done, so schedulers side by side (two for safety, or old and
// new during a deploy) run each tick once. A scheduler that starts
// mid-interval enqueues the current tick (once, like any other); a tick
// whose enqueue fails (Redis down) is tried again each second until it
// works or the next tick replaces it. A task made Unique runs one tick at
// a time: a tick that comes while the last one's task waits or runs is
// skipped.
func Periodic(ctx context.Context, client *asynq.Client, schedule map[string]func() *asynq.Task, now func() time.Time, log *slog.Logger) error {
	type job struct {
		every time.Duration
		task  func() *asynq.Task
		done  time.Time // the last tick enqueued
	}
	var jobs []*job
	poll := time.Second
	for spec, task := range schedule {
		every, err := Every(spec)
		if err != nil {
			return err
		}
		jobs = append(jobs, &job{every: every, task: task})
		poll = min(poll, every/10)
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		for _, j := range jobs {
			tick := now().Truncate(j.every)
			if !tick.After(j.done) {
				continue
			}
			task := j.task()
			id := TickID(task.Type(), tick)
			_, err := client.EnqueueContext(ctx, task, asynq.TaskID(id), asynq.Retention(j.every))
			switch {
			case err == nil:
				log.DebugContext(ctx, "periodic task enqueued", "task_id", id)
			case errors.Is(err, asynq.ErrTaskIDConflict):
				log.DebugContext(ctx, "periodic task already enqueued by another scheduler", "task_id", id)
			case errors.Is(err, asynq.ErrDuplicateTask): // a Unique task: the last tick's still waits or runs
				log.DebugContext(ctx, "periodic task skipped: the previous one has not finished", "task_id", id)
			default:
				log.WarnContext(ctx, "periodic task not enqueued, retrying", "task_id", id, "err", err)
				continue
			}
			j.done = tick
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
