// Package app is the wiring the three processes share: configuration,
// logging, PostgreSQL and Redis connections, and readiness checks.
package app

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/admin"
	"paysvc/internal/breaker"
	"paysvc/internal/config"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/processor/stripe"
	"paysvc/internal/secrets"
	"paysvc/internal/tasks"
	"paysvc/internal/webhook"
)

// Env is a process's connections and configuration.
type Env struct {
	Config config.Config
	Log    *slog.Logger
	DB     *sqlx.DB
	Store  *postgres.Store
	// Redis is the process's one Redis client, built from REDIS_URL
	// (config.RedisOptions): Asynq's client and server, the rate limiters
	// and the health check share it, so all follow a Sentinel failover
	// the same way.
	Redis redis.UniversalClient
	// RedisOpt are the same options for the dashboard (asynqmon), which
	// takes options rather than a client.
	RedisOpt asynq.RedisConnOpt
	// Breaker is the API's circuit breaker on Redis (nil in the other
	// processes).
	Breaker *breaker.Hook
}

// Logger returns the JSON logger at level.
func Logger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// Setup reads the configuration and connects to PostgreSQL and Redis.
// process names the binary in logs; maxConns sizes the PostgreSQL pool.
func Setup(ctx context.Context, process string, maxConns int) (*Env, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, fmt.Errorf("configuration:\n%w", err)
	}
	cfg.AdminAddr = cfg.AdminAddrs.For(process) // one environment for all three processes
	log := Logger(cfg.LogLevel).With("process", process)
	slog.SetDefault(log)
	redis.SetLogger(redisLog{log})
	if cfg.SecretsKeyIsDev && process != "cli" {
		log.Warn("SECRETS_KEY is not set: using the built-in development key; webhook secrets are NOT protected at rest. Set SECRETS_KEY (openssl rand -base64 32) in production.")
	}
	if cfg.PortalSigningKeyIsDev && process == "api" {
		log.Warn("PORTAL_SIGNING_KEY is not set: using the built-in development key; anyone with the source can forge customer-portal URLs. Set PORTAL_SIGNING_KEY (openssl rand -base64 32) in production.")
	}
	tasks.SetCompletedRetention(cfg.QueueCompletedRetention)
	db, err := postgres.OpenMode(ctx, cfg.DatabaseURL, maxConns, cfg.DatabasePoolMode, cfg.DatabasePoolerPrepared)
	if err != nil {
		return nil, err
	}
	ropt, err := config.RedisOptions(cfg.RedisURL, cfg.RedisPassword)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	registerPoolMetrics(db.DB, process)
	rdb := redis.NewUniversalClient(ropt)
	var brk *breaker.Hook
	if process == "api" {
		// Requests wait on the API's Redis commands; nothing waits on the
		// worker's, and Asynq's processor, which shares the worker's
		// client, dequeues again at once after an error: commands failing
		// at once there would spin it.
		brk = breaker.New(log, breaker.Cooldown, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
		rdb.AddHook(brk)
		registerBreakerMetric(brk)
	}
	if process != "cli" {
		go CheckRedisEviction(context.WithoutCancel(ctx), rdb, log, EvictionCheckRetry)
	}
	aopt := asynqOpt(ropt)
	return &Env{Config: cfg, Log: log, DB: db, Store: postgres.New(db), Redis: rdb, RedisOpt: aopt, Breaker: brk}, nil
}

// registerPoolMetrics exports the PostgreSQL pool's sql.DBStats on
// /metrics as go_sql_*{db_name=process}: open, in-use and idle
// connections, and the requests that waited for one (go_sql_wait_count_total,
// go_sql_wait_duration_seconds_total) — a tail made of pool waits shows
// there. The first pool of a process is the one exported (tests set up
// more than one).
func registerPoolMetrics(db *sql.DB, process string) {
	register(collectors.NewDBStatsCollector(db, process), "pool metrics")
}

// register registers c with Prometheus once a process: a second of its
// kind (tests set up more than one Env) is left out.
func register(c prometheus.Collector, what string) {
	err := prometheus.Register(c)
	if are := (prometheus.AlreadyRegisteredError{}); err != nil && !errors.As(err, &are) {
		slog.Warn(what+" not registered", "error", err)
	}
}

// registerBreakerMetric exports the API's Redis breaker's state on
// /metrics as paysvc_redis_circuit_open: 1 while Redis commands fail at
// once because Redis stopped answering. The first breaker of a process is
// the one exported (tests set up more than one).
func registerBreakerMetric(b *breaker.Hook) {
	register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "paysvc_redis_circuit_open",
		Help: "1 while Redis does not answer and the API's Redis commands fail at once (it pings Redis every second meanwhile), else 0.",
	}, func() float64 {
		if b.Open() {
			return 1
		}
		return 0
	}), "breaker metric")
}

// asynqOpt is o for asynq's RedisConnOpt.
func asynqOpt(o *redis.UniversalOptions) asynq.RedisConnOpt {
	if o.MasterName != "" {
		return asynq.RedisFailoverClientOpt{MasterName: o.MasterName, SentinelAddrs: o.Addrs, SentinelPassword: o.SentinelPassword,
			Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	}
	return asynq.RedisClientOpt{Addr: o.Addrs[0], Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
}

// Close releases the connections.
func (e *Env) Close() {
	if e.Breaker != nil {
		e.Breaker.Close()
	}
	e.Redis.Close()
	e.DB.Close()
}

// Checks are the readiness checks: PostgreSQL, the source of truth, is
// required; Redis is optional, since every process serves without it,
// degraded (README, "Operating it"), and catches up when it is back.
func (e *Env) Checks() (required, optional map[string]admin.Check) {
	return map[string]admin.Check{"postgres": func(ctx context.Context) error { return e.DB.PingContext(ctx) }},
		map[string]admin.Check{"redis": func(ctx context.Context) error { return e.Redis.Ping(ctx).Err() }}
}

// Admin returns this process's admin handler.
func (e *Env) Admin() *admin.Options {
	required, optional := e.Checks()
	return &admin.Options{Redis: e.RedisOpt, User: e.Config.AdminUser, Password: e.Config.AdminPassword, Checks: required, Optional: optional}
}

// SignalContext is cancelled on SIGINT or SIGTERM: the start of a graceful stop.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// EnqueueBudget bounds the after-commit enqueue of a request's jobs.
const EnqueueBudget = 300 * time.Millisecond

// Enqueuer connects an Asynq client and has the store enqueue the jobs of
// every transaction (webhook deliveries, refunds …) after it commits. Call
// the returned function at shutdown.
func (e *Env) Enqueuer() (*tasks.Enqueuer, func()) {
	client := asynq.NewClientFromRedisClient(e.Redis)
	enq := &tasks.Enqueuer{Client: client, Log: e.Log, Redis: e.Redis}
	e.Store.OnCommit(func(ctx context.Context, jobs []payments.Job) {
		// The request may be ending; the rows are committed either way, and
		// the relay enqueues what this misses: with Redis down or failing
		// over, the request waits EnqueueBudget at most, not go-redis's
		// retries (about 2 s per command).
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), EnqueueBudget)
		defer cancel()
		enq.Enqueue(ctx, tasks.ForJobs(jobs))
	})
	return enq, func() { client.Close() }
}

// Processor returns the card processor PROCESSOR names: the sandbox, or
// Stripe with the platform's keys (config.checkStripeKeys has checked them).
func (e *Env) Processor() (processor.Processor, error) {
	c := e.Config
	switch c.Processor {
	case "sandbox":
		return sandbox.New(e.DB, c.PublicBaseURL).WithLatency(c.SandboxRefundLatency).WithRequests(e.Store.InRequest), nil
	case "stripe":
		sc := stripe.Config{APIBase: c.StripeAPIBase, Timeout: c.StripeTimeout}
		keys := stripe.Keys{Secret: c.StripeSecretKey, Publishable: c.StripePublishableKey}
		if strings.Contains(c.StripeSecretKey, "_live_") {
			sc.Live = keys
			sc.Test = stripe.Keys{Secret: c.StripeTestSecretKey, Publishable: c.StripeTestPublishableKey}
		} else {
			sc.Test = keys
		}
		return stripe.New(e.DB, sc), nil
	}
	return nil, fmt.Errorf("PROCESSOR=%s: unknown processor", c.Processor)
}

// Domain is the Service and what beside it the hosted pages and the webhook
// deliverer use too: the processor and the secrets box.
type Domain struct {
	Service *payments.Service
	Sandbox *sandbox.Sandbox // PROCESSOR=sandbox: its hosted pages are served
	Stripe  *stripe.Inbound  // PROCESSOR=stripe: the receiver of Stripe's webhooks
	Secrets *secrets.Box
}

// Domain builds the Service of the API, the CLI and the worker: one
// constructor, so that the three cannot disagree on its options. It reads
// the content blocklist, SECRETS_KEY, the processor (the sandbox, whose
// merchants each get their own clock), the session TTL and the webhook URL
// check from the configuration.
func (e *Env) Domain() (*Domain, error) {
	blocklist, err := payments.LoadBlocklist(e.Config.ContentBlocklistFile)
	if err != nil {
		return nil, err
	}
	proc, err := e.Processor()
	if err != nil {
		return nil, err
	}
	box, err := secrets.New(e.Config.SecretsKey)
	if err != nil {
		return nil, err
	}
	opts := []payments.Option{
		payments.WithProcessor(proc), payments.WithSessionTTL(e.Config.CheckoutSessionTTL),
		payments.WithSecrets(box), payments.WithEndpointCheck(e.EndpointCheck()),
		payments.WithPortal(e.Config.PortalSigningKey, e.Config.PortalSessionTTL, e.Config.PublicBaseURL),
		// A quarter of the pool at most waits on Stripe inside a transaction.
		payments.WithProcessorCallsInTx(max(1, e.DB.Stats().MaxOpenConnections/4)),
	}
	if e.Config.Processor == "sandbox" {
		opts = append(opts, payments.WithSandboxClocks())
	}
	d := &Domain{Service: payments.NewService(e.Store, blocklist, time.Now, opts...), Secrets: box}
	switch p := proc.(type) {
	case *sandbox.Sandbox:
		d.Sandbox = p
	case *stripe.Processor:
		d.Stripe = p.Inbound(e.Config.StripeWebhookSecret, d.Service)
	}
	return d, nil
}

// EndpointCheck is the registration check of webhook URLs for this config.
func (e *Env) EndpointCheck() func(ctx context.Context, rawURL string) error {
	allow := e.Config.WebhookAllowPrivateNetworks
	return func(ctx context.Context, rawURL string) error { return webhook.CheckURL(ctx, rawURL, allow) }
}
