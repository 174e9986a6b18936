package config_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"paysvc/internal/config"
)

// env returns a getenv that reads only m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestLoadDefaults checks that an empty environment gives the defaults of
// decisions.md §1.
func TestLoadDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load(env(nil))
	if err != nil {
		t.Fatalf("Load(empty): got error %v, want nil", err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"DATABASE_URL", c.DatabaseURL, "postgres://postgres@127.0.0.1:5432/payments?sslmode=disable"},
		{"DATABASE_POOL_MODE", c.DatabasePoolMode, "session"},
		{"WORKER_SHUTDOWN_TIMEOUT", c.WorkerShutdownTimeout, 20 * time.Second},
		{"WORKER_BILLING_CONCURRENCY (half of GOMAXPROCS)", c.WorkerBillingConcurrency, max(1, runtime.GOMAXPROCS(0)/2)},
		{"API_SHUTDOWN_DELAY", c.APIShutdownDelay, time.Duration(0)},
		{"DATABASE_DIRECT_URL (DATABASE_URL)", c.DatabaseDirectURL, c.DatabaseURL},
		{"DATABASE_POOLER_PREPARED_STATEMENTS", c.DatabasePoolerPrepared, false},
		{"REDIS_URL", c.RedisURL, "redis://127.0.0.1:6379/0"},
		{"API_ADDR", c.APIAddr, ":8080"},
		{"ADMIN_ADDR", c.AdminAddr, "127.0.0.1:8081"},
		{"admin listeners", c.AdminAddrs, config.AdminAddrs{API: "127.0.0.1:8081", Worker: "127.0.0.1:8082", Scheduler: "127.0.0.1:8083"}},
		{"ADMIN_USER", c.AdminUser, ""},
		{"ADMIN_PASSWORD", c.AdminPassword, ""},
		{"PUBLIC_BASE_URL", c.PublicBaseURL, "http://localhost:8080"},
		{"PROCESSOR", c.Processor, "sandbox"},
		{"STRIPE_SECRET_KEY", c.StripeSecretKey, ""},
		{"STRIPE_WEBHOOK_SECRET", c.StripeWebhookSecret, ""},
		{"STRIPE_API_BASE", c.StripeAPIBase, ""},
		{"SECRETS_KEY is the dev key", c.SecretsKeyIsDev, true},
		{"SECRETS_KEY length", len(c.SecretsKey), 32},
		{"RATE_LIMIT_PER_HOUR", c.RateLimitPerHour, 1000},
		{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE", c.UnknownKeysPerMinute, 600},
		{"API_TRUSTED_PROXIES", len(c.TrustedProxies), 0},
		{"CHECKOUT_SESSION_TTL", c.CheckoutSessionTTL, 24 * time.Hour},
		{"PORTAL_SIGNING_KEY is the dev key", c.PortalSigningKeyIsDev, true},
		{"PORTAL_SIGNING_KEY set", len(c.PortalSigningKey) >= 32, true},
		{"PORTAL_SESSION_TTL", c.PortalSessionTTL, time.Hour},
		{"WEBHOOK_RETRY_BASE", c.WebhookRetryBase, 30 * time.Second},
		{"EVENT_RETENTION", c.EventRetention, 720 * time.Hour},
		{"QUEUE_COMPLETED_RETENTION", c.QueueCompletedRetention, time.Hour},
		{"WEBHOOK_ALLOW_PRIVATE_NETWORKS", c.WebhookAllowPrivateNetworks, false},
		{"WEBHOOK_TLS_INSECURE", c.WebhookTLSInsecure, false},
		{"CONTENT_BLOCKLIST_FILE (built-in list)", c.ContentBlocklistFile, ""},
		{"LOG_LEVEL", c.LogLevel, "info"},
		{"SANDBOX_REFUND_LATENCY", c.SandboxRefundLatency, time.Duration(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}

// TestLoadOverrides sets every variable to a valid non-default value and
// checks that each reaches its field.
func TestLoadOverrides(t *testing.T) {
	t.Parallel()
	blocklist := filepath.Join(t.TempDir(), "blocklist.txt")
	if err := os.WriteFile(blocklist, []byte("forbidden\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{0xA5}, 32)
	vars := map[string]string{
		"DATABASE_URL":                        "postgresql://app@db.internal:5433/pay?sslmode=require",
		"DATABASE_POOL_MODE":                  "transaction",
		"WORKER_SHUTDOWN_TIMEOUT":             "45s",
		"WORKER_BILLING_CONCURRENCY":          "7",
		"DATABASE_DIRECT_URL":                 "postgresql://app@db-direct.internal:5432/pay?sslmode=require",
		"DATABASE_POOLER_PREPARED_STATEMENTS": "true",
		"REDIS_URL":                           "redis://cache.internal:6380/3",
		"API_ADDR":                            "0.0.0.0:9090",
		"ADMIN_ADDR":                          "127.0.0.1:9091",
		"API_ADMIN_ADDR":                      "127.0.0.1:9191",
		"WORKER_ADMIN_ADDR":                   "127.0.0.1:9192",
		"SCHEDULER_ADMIN_ADDR":                "127.0.0.1:9193",
		"ADMIN_USER":                          "ops",
		"ADMIN_PASSWORD":                      "s3cret",
		"PUBLIC_BASE_URL":                     "https://pay.example.com/",
		"PROCESSOR":                           "stripe",
		"STRIPE_SECRET_KEY":                   "sk_test_123",
		"STRIPE_PUBLISHABLE_KEY":              "pk_test_123",
		"STRIPE_TIMEOUT":                      "3s",
		"STRIPE_WEBHOOK_SECRET":               "whsec_456",
		"STRIPE_API_BASE":                     "http://127.0.0.1:12111",
		"SECRETS_KEY":                         base64.StdEncoding.EncodeToString(key),
		"RATE_LIMIT_PER_HOUR":                 "50",
		"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE":  "0",
		"API_TRUSTED_PROXIES":                 " 10.0.0.0/8, 192.0.2.7 ,,2001:db8::/32",
		"CHECKOUT_SESSION_TTL":                "90m",
		"PORTAL_SIGNING_KEY":                  base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 48)),
		"PORTAL_SESSION_TTL":                  "15m",
		"WEBHOOK_RETRY_BASE":                  "2s",
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS":      "true",
		"WEBHOOK_TLS_INSECURE":                "true",
		"CONTENT_BLOCKLIST_FILE":              blocklist,
		"LOG_LEVEL":                           "debug",
		"SANDBOX_REFUND_LATENCY":              "5s",
		"QUEUE_COMPLETED_RETENTION":           "0s",
	}
	c, err := config.Load(env(vars))
	if err != nil {
		t.Fatalf("Load: got error %v, want nil", err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"DATABASE_URL", c.DatabaseURL, vars["DATABASE_URL"]},
		{"DATABASE_POOL_MODE", c.DatabasePoolMode, "transaction"},
		{"WORKER_SHUTDOWN_TIMEOUT", c.WorkerShutdownTimeout, 45 * time.Second},
		{"WORKER_BILLING_CONCURRENCY", c.WorkerBillingConcurrency, 7},
		{"DATABASE_DIRECT_URL", c.DatabaseDirectURL, vars["DATABASE_DIRECT_URL"]},
		{"DATABASE_POOLER_PREPARED_STATEMENTS", c.DatabasePoolerPrepared, true},
		{"REDIS_URL", c.RedisURL, vars["REDIS_URL"]},
		{"API_ADDR", c.APIAddr, "0.0.0.0:9090"},
		{"ADMIN_ADDR (the api's, overridden by API_ADMIN_ADDR)", c.AdminAddr, "127.0.0.1:9191"},
		{"*_ADMIN_ADDR", c.AdminAddrs, config.AdminAddrs{API: "127.0.0.1:9191", Worker: "127.0.0.1:9192", Scheduler: "127.0.0.1:9193"}},
		{"ADMIN_USER", c.AdminUser, "ops"},
		{"ADMIN_PASSWORD", c.AdminPassword, "s3cret"},
		{"PUBLIC_BASE_URL (trailing slash trimmed)", c.PublicBaseURL, "https://pay.example.com"},
		{"PROCESSOR", c.Processor, "stripe"},
		{"STRIPE_SECRET_KEY", c.StripeSecretKey, "sk_test_123"},
		{"STRIPE_WEBHOOK_SECRET", c.StripeWebhookSecret, "whsec_456"},
		{"STRIPE_API_BASE", c.StripeAPIBase, "http://127.0.0.1:12111"},
		{"STRIPE_PUBLISHABLE_KEY", c.StripePublishableKey, "pk_test_123"},
		{"STRIPE_TIMEOUT", c.StripeTimeout.String(), "3s"},
		{"SECRETS_KEY", c.SecretsKey, key},
		{"SECRETS_KEY is not the dev key", c.SecretsKeyIsDev, false},
		{"RATE_LIMIT_PER_HOUR", c.RateLimitPerHour, 50},
		{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE (0: off)", c.UnknownKeysPerMinute, 0},
		{"API_TRUSTED_PROXIES", c.TrustedProxies, []string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"}},
		{"CHECKOUT_SESSION_TTL", c.CheckoutSessionTTL, 90 * time.Minute},
		{"PORTAL_SIGNING_KEY", c.PortalSigningKey, bytes.Repeat([]byte{7}, 48)},
		{"PORTAL_SIGNING_KEY is not the dev key", c.PortalSigningKeyIsDev, false},
		{"PORTAL_SESSION_TTL", c.PortalSessionTTL, 15 * time.Minute},
		{"WEBHOOK_RETRY_BASE", c.WebhookRetryBase, 2 * time.Second},
		{"WEBHOOK_ALLOW_PRIVATE_NETWORKS", c.WebhookAllowPrivateNetworks, true},
		{"WEBHOOK_TLS_INSECURE", c.WebhookTLSInsecure, true},
		{"CONTENT_BLOCKLIST_FILE", c.ContentBlocklistFile, blocklist},
		{"LOG_LEVEL", c.LogLevel, "debug"},
		{"SANDBOX_REFUND_LATENCY", c.SandboxRefundLatency, 5 * time.Second},
		{"QUEUE_COMPLETED_RETENTION (0s: none kept)", c.QueueCompletedRetention, time.Duration(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
}

// TestAdminAddrs checks the rule that lets one environment start all three
// processes on one host: per-process variables win; otherwise the api has
// ADMIN_ADDR and the worker and scheduler its port +1 and +2.
func TestAdminAddrs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]string
		want config.AdminAddrs
	}{
		{"defaults", nil, config.AdminAddrs{API: "127.0.0.1:8081", Worker: "127.0.0.1:8082", Scheduler: "127.0.0.1:8083"}},
		{"ADMIN_ADDR only", map[string]string{"ADMIN_ADDR": "0.0.0.0:9000"},
			config.AdminAddrs{API: "0.0.0.0:9000", Worker: "0.0.0.0:9001", Scheduler: "0.0.0.0:9002"}},
		{"ADMIN_ADDR without host", map[string]string{"ADMIN_ADDR": ":9000"},
			config.AdminAddrs{API: ":9000", Worker: ":9001", Scheduler: ":9002"}},
		{"IPv6 ADMIN_ADDR", map[string]string{"ADMIN_ADDR": "[::1]:9000"},
			config.AdminAddrs{API: "[::1]:9000", Worker: "[::1]:9001", Scheduler: "[::1]:9002"}},
		{"ADMIN_ADDR port 0: any free port for each", map[string]string{"ADMIN_ADDR": "127.0.0.1:0"},
			config.AdminAddrs{API: "127.0.0.1:0", Worker: "127.0.0.1:0", Scheduler: "127.0.0.1:0"}},
		{"per-process variables win", map[string]string{"ADMIN_ADDR": "127.0.0.1:9000",
			"API_ADMIN_ADDR": "0.0.0.0:7001", "WORKER_ADMIN_ADDR": "0.0.0.0:7002", "SCHEDULER_ADMIN_ADDR": "0.0.0.0:7003"},
			config.AdminAddrs{API: "0.0.0.0:7001", Worker: "0.0.0.0:7002", Scheduler: "0.0.0.0:7003"}},
		{"one per-process variable", map[string]string{"ADMIN_ADDR": "127.0.0.1:9000", "WORKER_ADMIN_ADDR": "0.0.0.0:8081"},
			config.AdminAddrs{API: "127.0.0.1:9000", Worker: "0.0.0.0:8081", Scheduler: "127.0.0.1:9002"}},
		{"API_ADMIN_ADDR does not move the others", map[string]string{"API_ADMIN_ADDR": "0.0.0.0:7001"},
			config.AdminAddrs{API: "0.0.0.0:7001", Worker: "127.0.0.1:8082", Scheduler: "127.0.0.1:8083"}},
		{"highest port with room", map[string]string{"ADMIN_ADDR": ":65533"},
			config.AdminAddrs{API: ":65533", Worker: ":65534", Scheduler: ":65535"}},
		{"no room, but both set", map[string]string{"ADMIN_ADDR": ":65535", "WORKER_ADMIN_ADDR": ":1", "SCHEDULER_ADMIN_ADDR": ":2"},
			config.AdminAddrs{API: ":65535", Worker: ":1", Scheduler: ":2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Load(env(tt.vars))
			if err != nil {
				t.Fatalf("Load(%v): got error %v, want nil", tt.vars, err)
			}
			if c.AdminAddrs != tt.want {
				t.Errorf("Load(%v): got %+v, want %+v", tt.vars, c.AdminAddrs, tt.want)
			}
			if c.AdminAddr != tt.want.API {
				t.Errorf("Load(%v): got AdminAddr %q, want the api's %q", tt.vars, c.AdminAddr, tt.want.API)
			}
			for process, want := range map[string]string{"api": tt.want.API, "worker": tt.want.Worker, "scheduler": tt.want.Scheduler, "cli": tt.want.API} {
				if got := c.AdminAddrs.For(process); got != want {
					t.Errorf("For(%q): got %q, want %q", process, got, want)
				}
			}
		})
	}
}

// TestLoadBadValues checks that each bad value alone is reported, naming the
// variable, and that nothing else is reported with it.
func TestLoadBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		vars map[string]string
		want string // the variable the error must name
	}{
		{"RATE_LIMIT_PER_HOUR zero", map[string]string{"RATE_LIMIT_PER_HOUR": "0"}, "RATE_LIMIT_PER_HOUR"},
		{"RATE_LIMIT_PER_HOUR negative", map[string]string{"RATE_LIMIT_PER_HOUR": "-5"}, "RATE_LIMIT_PER_HOUR"},
		{"RATE_LIMIT_PER_HOUR not a number", map[string]string{"RATE_LIMIT_PER_HOUR": "abc"}, "RATE_LIMIT_PER_HOUR"},
		{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE negative", map[string]string{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE": "-1"}, "RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE"},
		{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE not a number", map[string]string{"RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE": "many"}, "RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE"},
		{"API_TRUSTED_PROXIES a host name", map[string]string{"API_TRUSTED_PROXIES": "10.0.0.1,lb.internal"}, "API_TRUSTED_PROXIES"},
		{"API_TRUSTED_PROXIES a bad range", map[string]string{"API_TRUSTED_PROXIES": "10.0.0.0/33"}, "API_TRUSTED_PROXIES"},
		{"CHECKOUT_SESSION_TTL negative", map[string]string{"CHECKOUT_SESSION_TTL": "-1s"}, "CHECKOUT_SESSION_TTL"},
		{"CHECKOUT_SESSION_TTL not a duration", map[string]string{"CHECKOUT_SESSION_TTL": "xyz"}, "CHECKOUT_SESSION_TTL"},
		{"WEBHOOK_RETRY_BASE zero", map[string]string{"WEBHOOK_RETRY_BASE": "0s"}, "WEBHOOK_RETRY_BASE"},
		{"EVENT_RETENTION not a duration", map[string]string{"EVENT_RETENTION": "30d"}, "EVENT_RETENTION"},
		{"EVENT_RETENTION under an hour", map[string]string{"EVENT_RETENTION": "59m"}, "EVENT_RETENTION"},
		{"SANDBOX_REFUND_LATENCY negative", map[string]string{"SANDBOX_REFUND_LATENCY": "-1s"}, "SANDBOX_REFUND_LATENCY"},
		{"QUEUE_COMPLETED_RETENTION negative", map[string]string{"QUEUE_COMPLETED_RETENTION": "-1m"}, "QUEUE_COMPLETED_RETENTION"},
		{"QUEUE_COMPLETED_RETENTION over a day", map[string]string{"QUEUE_COMPLETED_RETENTION": "25h"}, "QUEUE_COMPLETED_RETENTION"},
		{"SANDBOX_REFUND_LATENCY above the task timeout", map[string]string{"SANDBOX_REFUND_LATENCY": "2m"}, "SANDBOX_REFUND_LATENCY"},
		{"WEBHOOK_ALLOW_PRIVATE_NETWORKS not a bool", map[string]string{"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "maybe"}, "WEBHOOK_ALLOW_PRIVATE_NETWORKS"},
		{"WEBHOOK_TLS_INSECURE not a bool", map[string]string{"WEBHOOK_TLS_INSECURE": "sometimes"}, "WEBHOOK_TLS_INSECURE"},
		{"SECRETS_KEY not base64", map[string]string{"SECRETS_KEY": "not base64 at all!!"}, "SECRETS_KEY"},
		{"SECRETS_KEY 16 bytes", map[string]string{"SECRETS_KEY": base64.StdEncoding.EncodeToString(make([]byte, 16))}, "SECRETS_KEY"},
		{"SECRETS_KEY 33 bytes", map[string]string{"SECRETS_KEY": base64.StdEncoding.EncodeToString(make([]byte, 33))}, "SECRETS_KEY"},
		{"PORTAL_SIGNING_KEY 16 bytes", map[string]string{"PORTAL_SIGNING_KEY": base64.StdEncoding.EncodeToString(make([]byte, 16))}, "PORTAL_SIGNING_KEY"},
		{"PORTAL_SIGNING_KEY not base64", map[string]string{"PORTAL_SIGNING_KEY": "plain text"}, "PORTAL_SIGNING_KEY"},
		{"PORTAL_SESSION_TTL zero", map[string]string{"PORTAL_SESSION_TTL": "0s"}, "PORTAL_SESSION_TTL"},
		{"PROCESSOR unknown", map[string]string{"PROCESSOR": "paypal"}, "PROCESSOR"},
		{"PROCESSOR stripe without key", map[string]string{"PROCESSOR": "stripe", "STRIPE_WEBHOOK_SECRET": "whsec_1"}, "STRIPE_SECRET_KEY"},
		{"PROCESSOR stripe without publishable key", map[string]string{"PROCESSOR": "stripe", "STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_1"}, "STRIPE_PUBLISHABLE_KEY"},
		{"PROCESSOR stripe keys of two modes", map[string]string{"PROCESSOR": "stripe", "STRIPE_SECRET_KEY": "sk_live_1", "STRIPE_PUBLISHABLE_KEY": "pk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_1"}, "STRIPE_PUBLISHABLE_KEY"},
		{"PROCESSOR stripe without webhook secret", map[string]string{"PROCESSOR": "stripe", "STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_PUBLISHABLE_KEY": "pk_test_1"}, "STRIPE_WEBHOOK_SECRET"},
		{"STRIPE_TEST_SECRET_KEY beside a test key", map[string]string{"PROCESSOR": "stripe", "STRIPE_SECRET_KEY": "sk_test_1", "STRIPE_PUBLISHABLE_KEY": "pk_test_1", "STRIPE_WEBHOOK_SECRET": "whsec_1", "STRIPE_TEST_SECRET_KEY": "sk_test_2", "STRIPE_TEST_PUBLISHABLE_KEY": "pk_test_2"}, "STRIPE_TEST_SECRET_KEY"},
		{"STRIPE_TIMEOUT too long", map[string]string{"STRIPE_TIMEOUT": "1h"}, "STRIPE_TIMEOUT"},
		{"ADMIN_USER without ADMIN_PASSWORD", map[string]string{"ADMIN_USER": "ops"}, "ADMIN_PASSWORD"},
		{"ADMIN_PASSWORD without ADMIN_USER", map[string]string{"ADMIN_PASSWORD": "pw"}, "ADMIN_USER"},
		{"API_ADDR not an address", map[string]string{"API_ADDR": "nonsense"}, "API_ADDR"},
		{"ADMIN_ADDR not an address", map[string]string{"ADMIN_ADDR": "nonsense"}, "ADMIN_ADDR"},
		{"ADMIN_ADDR named port", map[string]string{"ADMIN_ADDR": "127.0.0.1:http"}, "ADMIN_ADDR"},
		{"ADMIN_ADDR port out of range", map[string]string{"ADMIN_ADDR": "127.0.0.1:70000"}, "ADMIN_ADDR"},
		{"ADMIN_ADDR leaves no port for the scheduler", map[string]string{"ADMIN_ADDR": ":65534"}, "SCHEDULER_ADMIN_ADDR"},
		{"API_ADMIN_ADDR not an address", map[string]string{"API_ADMIN_ADDR": "nonsense"}, "API_ADMIN_ADDR"},
		{"WORKER_ADMIN_ADDR not an address", map[string]string{"WORKER_ADMIN_ADDR": "8082"}, "WORKER_ADMIN_ADDR"},
		{"SCHEDULER_ADMIN_ADDR not an address", map[string]string{"SCHEDULER_ADMIN_ADDR": "x:"}, "SCHEDULER_ADMIN_ADDR"},
		{"PUBLIC_BASE_URL ftp", map[string]string{"PUBLIC_BASE_URL": "ftp://x"}, "PUBLIC_BASE_URL"},
		{"PUBLIC_BASE_URL relative", map[string]string{"PUBLIC_BASE_URL": "/pay"}, "PUBLIC_BASE_URL"},
		{"DATABASE_URL mysql", map[string]string{"DATABASE_URL": "mysql://"}, "DATABASE_URL"},
		{"DATABASE_DIRECT_URL mysql", map[string]string{"DATABASE_DIRECT_URL": "mysql://"}, "DATABASE_DIRECT_URL"},
		{"API_SHUTDOWN_DELAY negative", map[string]string{"API_SHUTDOWN_DELAY": "-1s"}, "API_SHUTDOWN_DELAY"},
		{"WORKER_SHUTDOWN_TIMEOUT zero", map[string]string{"WORKER_SHUTDOWN_TIMEOUT": "0s"}, "WORKER_SHUTDOWN_TIMEOUT"},
		{"WORKER_BILLING_CONCURRENCY zero", map[string]string{"WORKER_BILLING_CONCURRENCY": "0"}, "WORKER_BILLING_CONCURRENCY"},
		{"DATABASE_POOL_MODE statement", map[string]string{"DATABASE_POOL_MODE": "statement"}, "DATABASE_POOL_MODE"},
		{"DATABASE_POOLER_PREPARED_STATEMENTS maybe", map[string]string{"DATABASE_POOLER_PREPARED_STATEMENTS": "maybe"}, "DATABASE_POOLER_PREPARED_STATEMENTS"},
		{"REDIS_URL http", map[string]string{"REDIS_URL": "http://127.0.0.1:6379"}, "REDIS_URL"},
		{"STRIPE_API_BASE relative", map[string]string{"STRIPE_API_BASE": "/v1"}, "STRIPE_API_BASE"},
		{"CONTENT_BLOCKLIST_FILE missing", map[string]string{"CONTENT_BLOCKLIST_FILE": "/nonexistent"}, "CONTENT_BLOCKLIST_FILE"},
		{"LOG_LEVEL unknown", map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(env(tt.vars))
			if err == nil {
				t.Fatalf("Load(%v): got nil error, want one naming %s", tt.vars, tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("Load(%v): got error %q, want it to name %s", tt.vars, msg, tt.want)
			}
			if n := len(strings.Split(strings.TrimSpace(msg), "\n")); n != 1 {
				t.Errorf("Load(%v): got %d problems reported (%q), want 1", tt.vars, n, msg)
			}
		})
	}
}

// TestLoadReportsEveryBadValue checks that several bad values are reported
// together, not only the first.
func TestLoadReportsEveryBadValue(t *testing.T) {
	t.Parallel()
	vars := map[string]string{
		"RATE_LIMIT_PER_HOUR":            "abc",
		"CHECKOUT_SESSION_TTL":           "-1s",
		"WEBHOOK_RETRY_BASE":             "0s",
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "maybe",
		"SECRETS_KEY":                    base64.StdEncoding.EncodeToString(make([]byte, 16)),
		"PROCESSOR":                      "paypal",
		"API_ADDR":                       "nonsense",
		"PUBLIC_BASE_URL":                "ftp://x",
		"DATABASE_URL":                   "mysql://",
		"CONTENT_BLOCKLIST_FILE":         "/nonexistent",
	}
	_, err := config.Load(env(vars))
	if err == nil {
		t.Fatal("Load: got nil error, want every bad variable reported")
	}
	msg := err.Error()
	for name := range vars {
		if !strings.Contains(msg, name) {
			t.Errorf("got error %q, want it to name %s", msg, name)
		}
	}
	if n := len(strings.Split(strings.TrimSpace(msg), "\n")); n != len(vars) {
		t.Errorf("got %d problems reported, want %d:\n%s", n, len(vars), msg)
	}
}
