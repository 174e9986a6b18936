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

	enq, closeQueue := env.Enqueuer()
	defer closeQueue()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return admin.Serve(gctx, env.Config.AdminAddr, admin.Handler(*env.Admin()), env.Log) })
	// Periodic jobs, one task per (job, tick) however many schedulers run
	// (worker.Periodic); asynq's own Scheduler would enqueue each tick
	// once per scheduler.
	g.Go(func() error {
		return worker.Periodic(gctx, enq.Client, env.Redis, worker.Schedule(), time.Now, env.Log)
	})
	g.Go(func() error {
		worker.Relay(gctx, env.Store, enq, time.Now, relayEvery, relayGrace, env.Log) // real time: rows carry their merchant's offset
		return nil
	})
	err = g.Wait()
	env.Log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
