// Command scheduler enqueues periodic work (expiring sessions, pruning
// idempotency keys and old content-violation counts) and runs the outbox
// relay, which re-enqueues webhook deliveries whose task vanished.
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

// The relay looks for stranded work every relayEvery; a pending delivery
// counts as stranded relayGrace after its attempt was due, a pending refund,
// processor event or evidence submission relayGrace after it was written.
const (
	relayEvery = 10 * time.Second
	relayGrace = 30 * time.Second
)

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

	enq, closeQueue := env.Enqueuer()
	defer closeQueue()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return admin.Serve(gctx, env.Config.AdminAddr, admin.Handler(*env.Admin()), env.Log) })
	g.Go(func() error {
		worker.Relay(gctx, env.Store, enq, time.Now, relayEvery, relayGrace, env.Log) // real time: rows carry their merchant's offset
		return nil
	})
	err = g.Wait()
	sched.Shutdown()
	env.Log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
