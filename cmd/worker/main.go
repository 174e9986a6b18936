// Command worker runs the Asynq server: processor calls, refunds,
// subscription changes, webhook delivery and maintenance tasks.
package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"paysvc/internal/admin"
	"paysvc/internal/app"
	"paysvc/internal/tasks"
	"paysvc/internal/webhook"
	"paysvc/internal/worker"
)

func main() {
	ctx, stop := app.SignalContext()
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := app.Setup(ctx, "worker", 32)
	if err != nil {
		return err
	}
	defer env.Close()

	d, err := env.Domain()
	if err != nil {
		return err
	}
	enq, closeQueue := env.Enqueuer() // expiries, refunds and disputes write events with deliveries
	defer closeQueue()
	// Three asynq servers, so three fetch loops: asynq fetches one task at
	// a time per server, trying its queues in a weighted-random order at
	// one Redis round trip per queue. Deliveries (the default queue) have a
	// server of their own, so fetching one costs one round trip instead of
	// about two, deliveries are fetched while money tasks are, and a
	// delivery backlog never holds the slots of money tasks. Subscription
	// charges (billing) have one too, a few at once: they are database work
	// only, and thirty at once on two cores renewed no faster than two,
	// their transactions idle while their goroutines waited for the CPU,
	// and the API's queries queued behind all of them.
	newServer := func(concurrency int, queues map[string]int) *asynq.Server {
		return asynq.NewServerFromRedisClient(env.Redis, asynq.Config{
			Concurrency:    concurrency,
			RetryDelayFunc: tasks.RetryDelay(env.Config.WebhookRetryBase),
			// asynq idles 1 s when the queues are empty and checks due retries
			// every 5 s by default; a webhook should not wait that long.
			TaskCheckInterval:        20 * time.Millisecond,
			DelayedTaskCheckInterval: time.Second,
			Queues:                   queues,
			// Below the pod's terminationGracePeriodSeconds (deploy/k8s), so
			// that tasks still running are handed back before SIGKILL.
			ShutdownTimeout: env.Config.WorkerShutdownTimeout,
			Logger:          app.AsynqLogger{Log: env.Log},
		})
	}
	others := maps.Clone(tasks.Queues) // critical and low, at their weights
	delete(others, tasks.QueueDefault)
	delete(others, tasks.QueueBilling)
	servers := []*asynq.Server{
		// Deliveries mostly wait on receivers, so concurrency is well above
		// the core count.
		newServer(50, map[string]int{tasks.QueueDefault: 1}),
		newServer(30, others),
		newServer(env.Config.WorkerBillingConcurrency, map[string]int{tasks.QueueBilling: 1}),
	}
	mux := asynq.NewServeMux()
	(&worker.Handlers{Service: d.Service, Store: env.Store, Log: env.Log, EventRetention: env.Config.EventRetention}).Register(mux)
	(&worker.Deliverer{
		Store:     env.Store,
		Sealer:    d.Secrets,
		Client:    webhook.NewClient(webhook.Options{AllowPrivateNetworks: env.Config.WebhookAllowPrivateNetworks, InsecureTLS: env.Config.WebhookTLSInsecure}),
		RetryBase: env.Config.WebhookRetryBase,
		Log:       env.Log,
		Now:       time.Now,
		Enqueuer:  enq,
	}).Register(mux)
	for i, srv := range servers {
		if err := srv.Start(mux); err != nil {
			shutdown(servers[:i])
			return fmt.Errorf("start asynq server: %w", err)
		}
	}
	env.Log.Info("worker started", "queues", tasks.Queues)

	g, gctx := errgroup.WithContext(ctx)
	// The worker's /metrics has the queues' depth (the autoscaling signal).
	adm := env.Admin()
	adm.QueueDepth = asynq.NewInspectorFromRedisClient(env.Redis)
	adm.Queues = slices.Sorted(maps.Keys(tasks.Queues))
	g.Go(func() error { return admin.Serve(gctx, env.Config.AdminAddr, admin.Handler(*adm), env.Log) })
	err = g.Wait()
	// Shutdown stops fetching and waits for running tasks up to
	// WORKER_SHUTDOWN_TIMEOUT; unfinished ones go back to the queue at once
	// (no lease to wait out) and run again elsewhere, from the start: each
	// handler is keyed by its row, so a refund the processor already
	// executed is recorded, not executed again.
	shutdown(servers)
	env.Log.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// shutdown shuts the servers down at once, so that the whole stop takes one
// WORKER_SHUTDOWN_TIMEOUT at most.
func shutdown(servers []*asynq.Server) {
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
}
