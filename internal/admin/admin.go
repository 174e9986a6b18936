// Package admin is the operators' listener of every process: the Asynq
// dashboard at /queues, Prometheus /metrics, /healthz and /readyz.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is a readiness probe of one dependency.
type Check func(ctx context.Context) error

// Options configure the admin handler.
type Options struct {
	Redis    asynq.RedisConnOpt
	User     string // basic auth for /queues; when empty, /queues answers loopback clients only
	Password string
	Checks   map[string]Check // e.g. "postgres", "redis"
}

// Handler returns the admin listener's handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, out := http.StatusOK, map[string]string{}
		for name, check := range o.Checks {
			if err := check(ctx); err != nil {
				status, out[name] = http.StatusServiceUnavailable, "down"
				slog.WarnContext(ctx, "readiness check failed", "check", name, "error", err)
				continue
			}
			out[name] = "ok"
		}
		writeJSON(w, status, out)
	})
	mux.Handle("GET /metrics", promhttp.Handler())
	// Profiles name no secrets but can be costly: guarded like the dashboard.
	mux.Handle("/debug/pprof/", guard(o, http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", guard(o, http.HandlerFunc(pprof.Profile)))
	if o.Redis != nil {
		mon := asynqmon.New(asynqmon.Options{RootPath: "/queues", RedisConnOpt: o.Redis})
		mux.Handle("/queues/", guard(o, mon))
		mux.Handle("/queues", guard(o, mon))
	}
	return mux
}

// guard protects the dashboard, which can delete and retry tasks: with basic
// auth when configured, else to clients on the same host.
func guard(o Options, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.User != "" {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(o.User)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(o.Password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="paysvc admin"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		} else if !isLoopback(r.RemoteAddr) {
			http.Error(w, "the dashboard answers loopback clients only; set ADMIN_USER and ADMIN_PASSWORD", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve runs the admin listener until ctx ends.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	return ServeHTTP(ctx, srv, log, "admin")
}

// ServeHTTP runs srv until ctx ends, then shuts it down gracefully.
func ServeHTTP(ctx context.Context, srv *http.Server, log *slog.Logger, name string) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "listener", name, "addr", srv.Addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
