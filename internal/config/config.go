// Package config reads the service's configuration from the environment
// (the variables of decisions.md §1) and validates it at start.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"paysvc/internal/clientaddr"
)

// Config is the whole configuration of api, worker and scheduler.
type Config struct {
	DatabaseURL string
	// DatabasePoolMode is "session" or "transaction": the latter when
	// DATABASE_URL goes through a transaction-mode pooler such as PgBouncer
	// (README, "Running at scale").
	DatabasePoolMode string
	// DatabasePoolerPrepared keeps named prepared statements in
	// transaction mode: only for PgBouncer 1.21 or later with
	// max_prepared_statements > 0, which tracks them per server connection.
	DatabasePoolerPrepared bool
	// DatabaseDirectURL reaches PostgreSQL without the pooler (default
	// DATABASE_URL): migrations and anything else that holds a session.
	DatabaseDirectURL string
	RedisURL          string
	// RedisPassword is REDIS_PASSWORD: the master's password under
	// Sentinel (see RedisOptions).
	RedisPassword       string
	APIAddr             string
	AdminAddr           string     // the running process's admin listener: app.Setup picks it from AdminAddrs
	AdminAddrs          AdminAddrs // the three processes' admin listeners
	AdminUser           string
	AdminPassword       string
	PublicBaseURL       string
	Processor           string
	StripeSecretKey     string
	StripeWebhookSecret string
	StripeAPIBase       string
	// StripePublishableKey goes with StripeSecretKey (same mode) to the
	// browser of an embedded payment.
	StripePublishableKey string
	// StripeTestSecretKey and StripeTestPublishableKey serve test-mode
	// requests when StripeSecretKey is a live key: one deployment, both modes.
	StripeTestSecretKey      string
	StripeTestPublishableKey string
	// StripeTimeout bounds each call to Stripe.
	StripeTimeout    time.Duration
	SecretsKey       []byte
	SecretsKeyIsDev  bool
	RateLimitPerHour int
	// UnknownKeysPerMinute is how many authentications with keys the
	// database does not hold a client address may make a minute (each
	// is a database read) before it is refused with 429; 0 turns the
	// limit off.
	UnknownKeysPerMinute int
	// TrustedProxies are the addresses and CIDR ranges of the reverse
	// proxies in front of the API: behind them a request's client is
	// named by X-Forwarded-For (clientaddr).
	TrustedProxies     []string
	CheckoutSessionTTL time.Duration
	// DashboardSessionTTL is how long a dashboard sign-in lasts.
	DashboardSessionTTL time.Duration
	// PortalSigningKey signs customer-portal URLs (HMAC-SHA256);
	// PortalSigningKeyIsDev when it is the built-in development key.
	PortalSigningKey      []byte
	PortalSigningKeyIsDev bool
	// PortalSessionTTL is how long a portal URL stays usable, on the
	// merchant's clock.
	PortalSessionTTL time.Duration
	WebhookRetryBase time.Duration
	// QueueCompletedRetention: how long completed webhook tasks stay in
	// Redis for the dashboard (tasks.CompletedRetention).
	QueueCompletedRetention time.Duration
	// EventRetention is how long events (and their finished deliveries)
	// are kept before the scheduler's sweep deletes them.
	EventRetention              time.Duration
	WebhookAllowPrivateNetworks bool
	WebhookTLSInsecure          bool
	ContentBlocklistFile        string
	LogLevel                    string
	// SandboxRefundLatency delays the sandbox's answer to a refund after it
	// executed it (tests of a worker dying mid-refund; demos of slow processors).
	SandboxRefundLatency time.Duration
	// WorkerShutdownTimeout is how long a stopping worker waits for its
	// running tasks before handing them back to the queue (asynq's
	// ShutdownTimeout); keep it below the pod's terminationGracePeriodSeconds.
	WorkerShutdownTimeout time.Duration
	// WorkerBillingConcurrency is how many subscription charges a worker
	// runs at once (WORKER_BILLING_CONCURRENCY; default half of GOMAXPROCS,
	// at least 1). Each keeps one PostgreSQL backend busy, so this is how
	// many of the database's cores a renewal sweep may take from the API.
	WorkerBillingConcurrency int
	// APIShutdownDelay is how long a stopping API fails /readyz before it
	// closes its listener and drains (API_SHUTDOWN_DELAY).
	APIShutdownDelay time.Duration
}

// AdminAddrs are the admin listeners of the three processes. The rule:
// API_ADMIN_ADDR, WORKER_ADMIN_ADDR and SCHEDULER_ADMIN_ADDR when set;
// otherwise ADMIN_ADDR (default 127.0.0.1:8081) for the api, and ADMIN_ADDR's
// host with its port +1 for the worker and +2 for the scheduler
// (127.0.0.1:8082 and :8083 by default; port 0, "any free port", stays 0).
// So one environment serves the three side by side on one host, and each
// process has the same port wherever it runs, a container included.
type AdminAddrs struct {
	API, Worker, Scheduler string
}

// For returns the admin listener of process ("api", "worker", "scheduler");
// the api's for any other (the CLI serves none).
func (a AdminAddrs) For(process string) string {
	switch process {
	case "worker":
		return a.Worker
	case "scheduler":
		return a.Scheduler
	}
	return a.API
}

// adminAddrs applies the AdminAddrs rule to base (ADMIN_ADDR).
func adminAddrs(get func(name, def string) string, bad func(name, format string, args ...any)) AdminAddrs {
	base := get("ADMIN_ADDR", "127.0.0.1:8081")
	a := AdminAddrs{
		API:       get("API_ADMIN_ADDR", base),
		Worker:    get("WORKER_ADMIN_ADDR", ""),
		Scheduler: get("SCHEDULER_ADMIN_ADDR", ""),
	}
	host, p, err := net.SplitHostPort(base)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		bad("ADMIN_ADDR", "must be host:port or :port with a numeric port, got %q", base)
		return a
	}
	for _, d := range []struct {
		addr   *string
		name   string
		offset int
	}{{&a.Worker, "WORKER_ADMIN_ADDR", 1}, {&a.Scheduler, "SCHEDULER_ADMIN_ADDR", 2}} {
		if *d.addr != "" {
			continue
		}
		if port == 0 {
			*d.addr = base
		} else if port+d.offset > 65535 {
			bad("ADMIN_ADDR", "port %d leaves no port +%d for the default %s: set %s", port, d.offset, d.name, d.name)
		} else {
			*d.addr = net.JoinHostPort(host, strconv.Itoa(port+d.offset))
		}
	}
	return a
}

// devSecretsKey is used when SECRETS_KEY is unset, with a loud warning:
// development only, since anyone with the source can read secrets under it.
var devSecretsKey = []byte("paysvc-development-key-32-bytes!")

// devPortalSigningKey is used when PORTAL_SIGNING_KEY is unset, with a loud
// warning: anyone with the source could forge portal URLs under it.
var devPortalSigningKey = []byte("paysvc-development-portal-signing-key")

// FromEnv reads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.Getenv) }

// Load reads the configuration through getenv and reports every bad value at once.
func Load(getenv func(string) string) (Config, error) {
	var errs []error
	get := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}

	c := Config{
		DatabaseURL:              get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/payments?sslmode=disable"),
		DatabasePoolMode:         get("DATABASE_POOL_MODE", "session"),
		RedisURL:                 get("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisPassword:            getenv("REDIS_PASSWORD"),
		APIAddr:                  get("API_ADDR", ":8080"),
		AdminUser:                getenv("ADMIN_USER"),
		AdminPassword:            getenv("ADMIN_PASSWORD"),
		PublicBaseURL:            strings.TrimRight(get("PUBLIC_BASE_URL", "http://localhost:8080"), "/"),
		Processor:                get("PROCESSOR", "sandbox"),
		StripeSecretKey:          getenv("STRIPE_SECRET_KEY"),
		StripeWebhookSecret:      getenv("STRIPE_WEBHOOK_SECRET"),
		StripeAPIBase:            getenv("STRIPE_API_BASE"),
		StripePublishableKey:     getenv("STRIPE_PUBLISHABLE_KEY"),
		StripeTestSecretKey:      getenv("STRIPE_TEST_SECRET_KEY"),
		StripeTestPublishableKey: getenv("STRIPE_TEST_PUBLISHABLE_KEY"),
		ContentBlocklistFile:     getenv("CONTENT_BLOCKLIST_FILE"),
		LogLevel:                 get("LOG_LEVEL", "info"),
	}

	c.AdminAddrs = adminAddrs(get, bad)
	c.AdminAddr = c.AdminAddrs.API

	c.DatabaseDirectURL = get("DATABASE_DIRECT_URL", c.DatabaseURL)
	for name, raw := range map[string]string{"DATABASE_URL": c.DatabaseURL, "DATABASE_DIRECT_URL": getenv("DATABASE_DIRECT_URL")} {
		if name != "DATABASE_URL" && strings.TrimSpace(raw) == "" {
			continue // the default, DATABASE_URL, is checked once
		}
		if u, err := url.Parse(strings.TrimSpace(raw)); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad(name, "must be a postgres:// URL")
		}
	}
	switch c.DatabasePoolMode {
	case "session", "transaction":
	default:
		bad("DATABASE_POOL_MODE", "must be session or transaction, got %q", c.DatabasePoolMode)
	}
	c.DatabasePoolerPrepared = boolean(get("DATABASE_POOLER_PREPARED_STATEMENTS", "false"), "DATABASE_POOLER_PREPARED_STATEMENTS", bad)
	if _, err := RedisOptions(c.RedisURL, c.RedisPassword); err != nil {
		bad("REDIS_URL", "must be a redis://, rediss:// or redis-sentinel:// URL (%v)", err)
	}
	for name, addr := range map[string]string{"API_ADDR": c.APIAddr, "API_ADMIN_ADDR": getenv("API_ADMIN_ADDR"),
		"WORKER_ADMIN_ADDR": getenv("WORKER_ADMIN_ADDR"), "SCHEDULER_ADMIN_ADDR": getenv("SCHEDULER_ADMIN_ADDR")} {
		if name != "API_ADDR" && strings.TrimSpace(addr) == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(strings.TrimSpace(addr)); err != nil || port == "" {
			bad(name, "must be host:port or :port, got %q", addr)
		}
	}
	if (c.AdminUser == "") != (c.AdminPassword == "") {
		bad("ADMIN_USER/ADMIN_PASSWORD", "set both or neither")
	}
	if u, err := url.Parse(c.PublicBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("PUBLIC_BASE_URL", "must be an absolute http(s) URL, got %q", c.PublicBaseURL)
	}
	switch c.Processor {
	case "sandbox":
	case "stripe":
		checkStripeKeys(c, bad)
	default:
		bad("PROCESSOR", "must be sandbox or stripe, got %q", c.Processor)
	}
	if d, err := time.ParseDuration(get("STRIPE_TIMEOUT", "20s")); err != nil || d < 100*time.Millisecond || d > 2*time.Minute {
		bad("STRIPE_TIMEOUT", "must be a duration between 100ms and 2m")
	} else {
		c.StripeTimeout = d
	}
	if c.StripeAPIBase != "" {
		if u, err := url.Parse(c.StripeAPIBase); err != nil || u.Host == "" {
			bad("STRIPE_API_BASE", "must be an absolute URL")
		}
	}

	if raw := getenv("SECRETS_KEY"); raw == "" {
		c.SecretsKey, c.SecretsKeyIsDev = devSecretsKey, true
	} else if k, err := base64.StdEncoding.DecodeString(raw); err != nil || len(k) != 32 {
		bad("SECRETS_KEY", "must be 32 bytes, base64-encoded (generate one with `openssl rand -base64 32`)")
	} else {
		c.SecretsKey = k
	}

	// A portal URL is a capability: the key must be at least as strong as
	// the HMAC it keys (32 bytes).
	if raw := getenv("PORTAL_SIGNING_KEY"); raw == "" {
		c.PortalSigningKey, c.PortalSigningKeyIsDev = devPortalSigningKey, true
	} else if k, err := base64.StdEncoding.DecodeString(raw); err != nil || len(k) < 32 {
		bad("PORTAL_SIGNING_KEY", "must be at least 32 bytes, base64-encoded (generate one with `openssl rand -base64 32`)")
	} else {
		c.PortalSigningKey = k
	}

	c.RateLimitPerHour = positiveInt(get("RATE_LIMIT_PER_HOUR", "1000"), "RATE_LIMIT_PER_HOUR", bad)
	if n, err := strconv.Atoi(get("RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE", "600")); err != nil || n < 0 {
		bad("RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE", "must be a whole number, 0 for no limit")
	} else {
		c.UnknownKeysPerMinute = n
	}
	for _, p := range strings.Split(getenv("API_TRUSTED_PROXIES"), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.TrustedProxies = append(c.TrustedProxies, p)
		}
	}
	if _, err := clientaddr.New(c.TrustedProxies); err != nil {
		bad("API_TRUSTED_PROXIES", "must be IP addresses or CIDR ranges separated by commas (%v)", err)
	}
	c.CheckoutSessionTTL = positiveDuration(get("CHECKOUT_SESSION_TTL", "24h"), "CHECKOUT_SESSION_TTL", bad)
	c.DashboardSessionTTL = positiveDuration(get("DASHBOARD_SESSION_TTL", "12h"), "DASHBOARD_SESSION_TTL", bad)
	c.PortalSessionTTL = positiveDuration(get("PORTAL_SESSION_TTL", "1h"), "PORTAL_SESSION_TTL", bad)
	c.WebhookRetryBase = positiveDuration(get("WEBHOOK_RETRY_BASE", "30s"), "WEBHOOK_RETRY_BASE", bad)
	if d, err := time.ParseDuration(get("EVENT_RETENTION", "720h")); err != nil || d < time.Hour {
		bad("EVENT_RETENTION", "must be a duration of at least 1h such as 720h (30 days)")
	} else {
		c.EventRetention = d
	}
	if d, err := time.ParseDuration(get("SANDBOX_REFUND_LATENCY", "0s")); err != nil || d < 0 || d > 30*time.Second {
		bad("SANDBOX_REFUND_LATENCY", "must be a duration between 0s and 30s (refund tasks time out after 1m)")
	} else {
		c.SandboxRefundLatency = d
	}
	if d, err := time.ParseDuration(get("API_SHUTDOWN_DELAY", "0s")); err != nil || d < 0 || d > 5*time.Minute {
		bad("API_SHUTDOWN_DELAY", "must be a duration between 0s and 5m such as 10s")
	} else {
		c.APIShutdownDelay = d
	}
	if d, err := time.ParseDuration(get("QUEUE_COMPLETED_RETENTION", "1h")); err != nil || d < 0 || d > 24*time.Hour {
		bad("QUEUE_COMPLETED_RETENTION", "must be a duration between 0s and 24h such as 1h (0s keeps no completed task)")
	} else {
		c.QueueCompletedRetention = d
	}
	c.WorkerShutdownTimeout = positiveDuration(get("WORKER_SHUTDOWN_TIMEOUT", "20s"), "WORKER_SHUTDOWN_TIMEOUT", bad)
	c.WorkerBillingConcurrency = positiveInt(get("WORKER_BILLING_CONCURRENCY", strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/2))), "WORKER_BILLING_CONCURRENCY", bad)
	c.WebhookAllowPrivateNetworks = boolean(get("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "false"), "WEBHOOK_ALLOW_PRIVATE_NETWORKS", bad)
	c.WebhookTLSInsecure = boolean(get("WEBHOOK_TLS_INSECURE", "false"), "WEBHOOK_TLS_INSECURE", bad)

	if c.ContentBlocklistFile != "" {
		if _, err := os.Stat(c.ContentBlocklistFile); err != nil {
			bad("CONTENT_BLOCKLIST_FILE", "cannot be read: %v", err)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("LOG_LEVEL", "must be debug, info, warn or error")
	}
	return c, errors.Join(errs...)
}

func positiveInt(s, name string, bad func(string, string, ...any)) int {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		bad(name, "must be a positive integer, got %q", s)
	}
	return n
}

func positiveDuration(s, name string, bad func(string, string, ...any)) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		bad(name, "must be a positive duration such as 30s or 24h, got %q", s)
	}
	return d
}

func boolean(s, name string, bad func(string, string, ...any)) bool {
	b, err := strconv.ParseBool(s)
	if err != nil {
		bad(name, "must be true or false, got %q", s)
	}
	return b
}

// stripeMode is the mode of a Stripe key by its prefix (sk_test_, pk_live_,
// rk_test_ …): "test", "live", or "" for something else.
func stripeMode(key string, kinds ...string) string {
	for _, k := range kinds {
		for _, m := range []string{"test", "live"} {
			if strings.HasPrefix(key, k+"_"+m+"_") {
				return m
			}
		}
	}
	return ""
}

// checkStripeKeys checks the keys PROCESSOR=stripe needs: a secret key and
// its publishable key of the same mode, optional test keys beside live
// ones, and the webhook secret. Messages never repeat a key.
func checkStripeKeys(c Config, bad func(name, format string, args ...any)) {
	mode := stripeMode(c.StripeSecretKey, "sk", "rk")
	if mode == "" {
		bad("STRIPE_SECRET_KEY", "is required when PROCESSOR=stripe: a secret (sk_test_/sk_live_) or restricted (rk_) key")
	}
	if stripeMode(c.StripePublishableKey, "pk") != mode {
		bad("STRIPE_PUBLISHABLE_KEY", "is required when PROCESSOR=stripe: the publishable key (pk_%s_…) of STRIPE_SECRET_KEY's mode", mode)
	}
	if c.StripeTestSecretKey != "" || c.StripeTestPublishableKey != "" {
		if mode != "live" {
			bad("STRIPE_TEST_SECRET_KEY", "is only for test mode beside a live STRIPE_SECRET_KEY")
		}
		if stripeMode(c.StripeTestSecretKey, "sk", "rk") != "test" || stripeMode(c.StripeTestPublishableKey, "pk") != "test" {
			bad("STRIPE_TEST_SECRET_KEY/STRIPE_TEST_PUBLISHABLE_KEY", "set both, test-mode keys (sk_test_…, pk_test_…)")
		}
	}
	if !strings.HasPrefix(c.StripeWebhookSecret, "whsec_") {
		bad("STRIPE_WEBHOOK_SECRET", "is required when PROCESSOR=stripe: the signing secret (whsec_…) of the webhook endpoint registered in Stripe")
	}
}
