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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is a readiness probe of one dependency.
type Check func(ctx context.Context) error

// Options configure the admin handler.
type Options struct {
	Redis    asynq.RedisConnOpt
	User     string // basic auth for /queues; when empty, /queues answers loopback clients only
	Password string
	// Checks are the dependencies the process cannot serve without (e.g.
	// "postgres"): /readyz answers 503 while one fails.
	Checks map[string]Check
	// Optional are the dependencies the process serves without, degraded
	// (e.g. "redis"): /readyz reports them but stays 200.
	Optional map[string]Check
	// QueueDepth, when set, exports the size of each of Queues on /metrics
	// (paysvc_queue_tasks, paysvc_queue_oldest_pending_seconds): the
	// worker sets it.
	QueueDepth *asynq.Inspector
	Queues     []string
}

// readyTimeout bounds the checks of one /readyz or /metrics scrape, which
// run concurrently: /readyz answers within Kubernetes' default probe
// timeout (1 s) even while a dependency hangs or its client retries.
const readyTimeout = 800 * time.Millisecond

// Readiness statuses, the "status" of /readyz.
const (
	statusOK          = "ok"          // every dependency answers
	statusDegraded    = "degraded"    // an optional dependency is down: still ready
	statusUnavailable = "unavailable" // a required dependency is down: 503
)

// readiness runs every check concurrently with one deadline and returns the
// HTTP status, the overall status and each dependency's "ok" or "down".
func (o Options) readiness(ctx context.Context) (int, string, map[string]string) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		code   = http.StatusOK
		status = statusOK
		deps   = map[string]string{}
	)
	run := func(name string, check Check, required bool) {
		defer wg.Done()
		err := check(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			deps[name] = "ok"
			return
		}
		deps[name] = "down"
		if required {
			code, status = http.StatusServiceUnavailable, statusUnavailable
		} else if status == statusOK {
			status = statusDegraded
		}
		slog.WarnContext(ctx, "readiness check failed", "check", name, "required", required, "error", err)
	}
	for name, check := range o.Checks {
		wg.Add(1)
		go run(name, check, true)
	}
	for name, check := range o.Optional {
		wg.Add(1)
		go run(name, check, false)
	}
	wg.Wait()
	return code, status, deps
}

// dependencyUp is paysvc_dependency_up{dependency}: 1 when the dependency
// answers at scrape time, 0 when it does not. Its checks run on each scrape.
type dependencyUp struct{ o Options }

var dependencyUpDesc = prometheus.NewDesc("paysvc_dependency_up",
	"Whether a dependency answered its readiness check at scrape time (1) or not (0).", []string{"dependency"}, nil)

func (d dependencyUp) Describe(ch chan<- *prometheus.Desc) { ch <- dependencyUpDesc }

func (d dependencyUp) Collect(ch chan<- prometheus.Metric) {
	_, _, deps := d.o.readiness(context.Background())
	for name, state := range deps {
		v := 0.0
		if state == "ok" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(dependencyUpDesc, prometheus.GaugeValue, v, name)
	}
}

// Handler returns the admin listener's handler.
func Handler(o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// Ready means "can serve": 503 only when a required dependency is down;
	// {"status":"ok"|"degraded"|"unavailable","checks":{"postgres":"ok","redis":"down"}}.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		code, status, deps := o.readiness(r.Context())
		writeJSON(w, code, map[string]any{"status": status, "checks": deps})
	})
	// The process's metrics (default registry) and this handler's
	// dependency gauge, in a registry of its own so that handlers can be
	// made more than once in a process.
	deps := prometheus.NewRegistry()
	deps.MustRegister(dependencyUp{o})
	if o.QueueDepth != nil {
		deps.MustRegister(&queueDepth{insp: o.QueueDepth, queues: o.Queues})
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{prometheus.DefaultGatherer, deps}, promhttp.HandlerOpts{}))
	// Profiles name no secrets but can be costly: guarded like the dashboard.
	// /debug/pprof/ serves the named profiles too (heap, allocs, block,
	// mutex, goroutine, threadcreate): block and mutex stay empty until
	// their rates are set through /debug/pprof/rates.
	mux.Handle("/debug/pprof/", guard(o, http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", guard(o, http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/trace", guard(o, http.HandlerFunc(pprof.Trace)))
	mux.Handle("/debug/pprof/symbol", guard(o, http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/rates", guard(o, http.HandlerFunc(profileRates)))
	if o.Redis != nil {
		mon := asynqmon.New(asynqmon.Options{RootPath: "/queues", RedisConnOpt: o.Redis})
		mux.Handle("/queues/", guard(o, mon))
		mux.Handle("/queues", guard(o, mon))
	}
	return mux
}

// The block and mutex profiles' sampling, off by default (each costs a
// little on every blocking event or contended lock): set for the time of a
// profile and set back to 0 after.
var (
	ratesMu       sync.Mutex
	blockRate     int // runtime.SetBlockProfileRate: one sample per this many ns blocked; 0 off
	mutexFraction int // runtime.SetMutexProfileFraction: one in this many contentions; 0 off
)

// profileRates is /debug/pprof/rates: GET reports {"block":ns,"mutex":n};
// POST with block and/or mutex (query or form, integers >= 0) sets them,
// e.g. curl -X POST 'ADMIN/debug/pprof/rates?block=10000&mutex=10'.
func profileRates(w http.ResponseWriter, r *http.Request) {
	ratesMu.Lock()
	defer ratesMu.Unlock()
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		var block, mutex *int
		for name, dst := range map[string]**int{"block": &block, "mutex": &mutex} {
			v := r.FormValue(name)
			if v == "" {
				continue
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, name+" must be an integer >= 0", http.StatusBadRequest)
				return
			}
			*dst = &n
		}
		if block != nil {
			blockRate = *block
			runtime.SetBlockProfileRate(blockRate)
		}
		if mutex != nil {
			mutexFraction = *mutex
			runtime.SetMutexProfileFraction(mutexFraction)
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"block": blockRate, "mutex": mutexFraction})
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

// Timeouts bound how long a client may take: to send its headers, its
// whole request, to read the response, and to keep an idle connection.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are the admin listener's, the values of the public API
// server (cmd/api): a slow client is cut off instead of holding a
// connection open. Write leaves room for a 30 s CPU profile
// (/debug/pprof/profile).
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}

// NewServer returns an HTTP server for addr and h with timeouts t and
// headers limited to 64 KiB.
func NewServer(addr string, h http.Handler, t Timeouts) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    64 << 10,
	}
}

// Serve runs the admin listener until ctx ends, with DefaultTimeouts.
func Serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	return ServeHTTP(ctx, NewServer(addr, h, DefaultTimeouts), log, "admin")
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
