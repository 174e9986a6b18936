package worker

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/tasks"
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
// skipped. rdb is the Redis of client, where releaseUniqueLock works.
func Periodic(ctx context.Context, client *asynq.Client, rdb redis.UniversalClient, schedule map[string]func() *asynq.Task, now func() time.Time, log *slog.Logger) error {
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
				if err := releaseUniqueLock(ctx, rdb, task, id); err != nil {
					log.WarnContext(ctx, "periodic task: uniqueness lock not released, its next ticks wait for it to expire", "task_id", id, "err", err)
				}
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

// releaseUniqueLock deletes the uniqueness lock that an enqueue of task
// under id took before it found id taken. asynq (v0.26, enqueueUniqueCmd)
// sets a Unique task's lock first, then checks the id, and on a conflict
// leaves the lock: the tick's task had finished already (a waiting or
// running one holds the lock itself, and the enqueue is refused as a
// duplicate instead), so nothing would release it, and every later tick of
// the task was skipped as a duplicate until the lock expired. With two
// schedulers that was the renewal sweep running every sixth minute (its
// Unique TTL is 5 minutes). The lock holds the task id, so only this
// tick's lock is deleted; for a task not Unique there is none. The key is
// asynq's base.UniqueKey, tried in each queue (a task's queue cannot be
// read from it): TestTwoSchedulersRunEachTickOnce fails if asynq changes it.
func releaseUniqueLock(ctx context.Context, rdb redis.UniversalClient, task *asynq.Task, id string) error {
	if rdb == nil {
		return nil
	}
	suffix := "unique:" + task.Type() + ":"
	if p := task.Payload(); p != nil {
		sum := md5.Sum(p)
		suffix += hex.EncodeToString(sum[:])
	}
	for q := range tasks.Queues {
		if err := deleteIfHolds.Run(ctx, rdb, []string{"asynq:{" + q + "}:" + suffix}, id).Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

// deleteIfHolds deletes KEYS[1] if it holds ARGV[1].
var deleteIfHolds = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
