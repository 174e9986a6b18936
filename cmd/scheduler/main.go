// Command scheduler enqueues periodic work (expiring sessions, pruning
// idempotency keys and old content-violation counts) and, in later issues,
// relays stranded outbox rows back into the queue.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"paysvc/internal/admin"
	"paysvc/internal/app"
	"paysvc/internal/worker"
)

func main() {
	ctx, stop := app.SignalContext()
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := app.Setup(ctx, "scheduler", 4)
	if err != nil {
		return err
	}
	defer env.Close()

	sched := asynq.NewScheduler(env.RedisOpt, &asynq.SchedulerOpts{
		Location: time.UTC,
		Logger:   app.AsynqLogger{Log: env.Log},
	})
	for spec, task := range worker.Schedule() {
		id, err := sched.Register(spec, task(), asynq.Unique(worker.ScheduleUnique))
		if err != nil {
			return fmt.Errorf("register %s %s: %w", spec, task().Type(), err)
		}
		env.Log.Info("scheduled", "spec", spec, "task", task().Type(), "entry", id)
	}
	if err := sched.Start(); err != nil {
		return fmt.Errorf("start scheduler: %w", err)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return admin.Serve(gctx, env.Config.AdminAddr, admin.Handler(*env.Admin()), env.Log) })
	err = g.Wait()
	sched.Shutdown()
	env.Log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
