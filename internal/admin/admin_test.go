package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/admin"
	"paysvc/internal/testenv"
)

// get sends a GET to the server at base and returns the status and body.
func get(t *testing.T, base, path string, auth ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", path, err)
	}
	return res.StatusCode, res.Header, string(b)
}

// realChecks are readiness checks against the real Redis of this test process.
func realChecks(t *testing.T) map[string]admin.Check {
	rdb := testenv.Redis(t)
	return map[string]admin.Check{
		"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
	}
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(admin.Handler(admin.Options{Redis: testenv.RedisOpt(t), Checks: realChecks(t)}))
	defer srv.Close()

	status, hdr, body := get(t, srv.URL, "/healthz")
	if status != http.StatusOK {
		t.Fatalf("GET /healthz: got status %d, want 200 (body %s)", status, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET /healthz: got Content-Type %q, want application/json", ct)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("GET /healthz: body %q is not JSON: %v", body, err)
	}
	if want := map[string]string{"status": "ok"}; !reflect.DeepEqual(got, want) {
		t.Errorf("GET /healthz: got %v, want %v", got, want)
	}
}

// readyBody is the JSON of /readyz.
type readyBody struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	redisUp := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	up := func(context.Context) error { return nil }
	down := func(context.Context) error { return errors.New("connection refused") }
	tests := []struct {
		name       string
		required   map[string]admin.Check
		optional   map[string]admin.Check
		wantStatus int
		wantBody   readyBody
	}{
		{
			name:       "all pass",
			required:   map[string]admin.Check{"postgres": up},
			optional:   map[string]admin.Check{"redis": redisUp},
			wantStatus: http.StatusOK,
			wantBody:   readyBody{"ok", map[string]string{"redis": "ok", "postgres": "ok"}},
		},
		{
			name:       "required fails",
			required:   map[string]admin.Check{"postgres": down},
			optional:   map[string]admin.Check{"redis": redisUp},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   readyBody{"unavailable", map[string]string{"redis": "ok", "postgres": "down"}},
		},
		{
			name:       "optional fails: degraded, still ready",
			required:   map[string]admin.Check{"postgres": up},
			optional:   map[string]admin.Check{"redis": down},
			wantStatus: http.StatusOK,
			wantBody:   readyBody{"degraded", map[string]string{"redis": "down", "postgres": "ok"}},
		},
		{
			name:       "both fail",
			required:   map[string]admin.Check{"postgres": down},
			optional:   map[string]admin.Check{"redis": down},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   readyBody{"unavailable", map[string]string{"redis": "down", "postgres": "down"}},
		},
		{
			name: "check honours the deadline",
			required: map[string]admin.Check{"slow": func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   readyBody{"unavailable", map[string]string{"slow": "down"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(admin.Handler(admin.Options{Checks: tt.required, Optional: tt.optional}))
			defer srv.Close()
			status, _, body := get(t, srv.URL, "/readyz")
			if status != tt.wantStatus {
				t.Errorf("GET /readyz: got status %d, want %d (body %s)", status, tt.wantStatus, body)
			}
			var got readyBody
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("GET /readyz: body %q is not JSON: %v", body, err)
			}
			if !reflect.DeepEqual(got, tt.wantBody) {
				t.Errorf("GET /readyz: got %+v, want %+v", got, tt.wantBody)
			}
		})
	}
}

// TestReadyzRealDependenciesDown points real clients at closed ports: Redis
// down is degraded (200, and paysvc_dependency_up{dependency="redis"} 0),
// PostgreSQL down is unavailable (503).
func TestReadyzRealDependenciesDown(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	deadDB, err := sqlx.Open("postgres", "postgres://postgres@"+testenv.FreeAddr(t)+"/payments?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer deadDB.Close()
	rdb := testenv.Redis(t)
	deadRedis := redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t)}) // default retries, as the processes have
	defer deadRedis.Close()
	pg := func(db *sqlx.DB) admin.Check { return func(ctx context.Context) error { return db.PingContext(ctx) } }
	rd := func(c *redis.Client) admin.Check { return func(ctx context.Context) error { return c.Ping(ctx).Err() } }

	tests := []struct {
		name        string
		opts        admin.Options
		wantStatus  int
		wantBody    readyBody
		wantMetrics []string
	}{
		{
			name:        "both up",
			opts:        admin.Options{Checks: map[string]admin.Check{"postgres": pg(db)}, Optional: map[string]admin.Check{"redis": rd(rdb)}},
			wantStatus:  http.StatusOK,
			wantBody:    readyBody{"ok", map[string]string{"postgres": "ok", "redis": "ok"}},
			wantMetrics: []string{`paysvc_dependency_up{dependency="postgres"} 1`, `paysvc_dependency_up{dependency="redis"} 1`},
		},
		{
			name:        "redis down",
			opts:        admin.Options{Checks: map[string]admin.Check{"postgres": pg(db)}, Optional: map[string]admin.Check{"redis": rd(deadRedis)}},
			wantStatus:  http.StatusOK,
			wantBody:    readyBody{"degraded", map[string]string{"postgres": "ok", "redis": "down"}},
			wantMetrics: []string{`paysvc_dependency_up{dependency="postgres"} 1`, `paysvc_dependency_up{dependency="redis"} 0`},
		},
		{
			name:        "postgres down",
			opts:        admin.Options{Checks: map[string]admin.Check{"postgres": pg(deadDB)}, Optional: map[string]admin.Check{"redis": rd(rdb)}},
			wantStatus:  http.StatusServiceUnavailable,
			wantBody:    readyBody{"unavailable", map[string]string{"postgres": "down", "redis": "ok"}},
			wantMetrics: []string{`paysvc_dependency_up{dependency="postgres"} 0`, `paysvc_dependency_up{dependency="redis"} 1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(admin.Handler(tt.opts))
			defer srv.Close()
			start := time.Now()
			status, _, body := get(t, srv.URL, "/readyz")
			// Kubernetes' probes time out after 1 s by default; the Redis
			// client alone retries its dials for longer than that.
			if d := time.Since(start); d > time.Second {
				t.Errorf("GET /readyz: took %v, want under 1s (a probe's default timeout)", d)
			}
			if status != tt.wantStatus {
				t.Errorf("GET /readyz: got status %d, want %d (body %s)", status, tt.wantStatus, body)
			}
			var got readyBody
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("GET /readyz: body %q is not JSON: %v", body, err)
			}
			if !reflect.DeepEqual(got, tt.wantBody) {
				t.Errorf("GET /readyz: got %+v, want %+v", got, tt.wantBody)
			}
			_, _, metrics := get(t, srv.URL, "/metrics")
			for _, want := range tt.wantMetrics {
				if !strings.Contains(metrics, want) {
					t.Errorf("GET /metrics: got no line %q, want it", want)
				}
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(admin.Handler(admin.Options{Redis: testenv.RedisOpt(t)}))
	defer srv.Close()
	status, hdr, body := get(t, srv.URL, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: got status %d, want 200", status)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics: got Content-Type %q, want the Prometheus text format (text/plain…)", ct)
	}
	for _, want := range []string{"# HELP go_goroutines", "# TYPE go_goroutines gauge", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /metrics: got a body without %q, want the default registry's metrics", want)
		}
	}
}

// serve runs h on one request from remote and returns the status.
func serve(h http.Handler, path, remote string, auth ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = remote
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestQueuesWithoutCredentials(t *testing.T) {
	t.Parallel()
	h := admin.Handler(admin.Options{Redis: testenv.RedisOpt(t)})

	t.Run("loopback client over a real connection", func(t *testing.T) {
		srv := httptest.NewServer(h) // listens on 127.0.0.1
		defer srv.Close()
		for _, path := range []string{"/queues", "/queues/", "/queues/api/queues"} {
			status, _, body := get(t, srv.URL, path)
			if status != http.StatusOK {
				t.Errorf("GET %s from loopback: got status %d, want 200 (body %.200s)", path, status, body)
			}
		}
		// The dashboard API answers JSON about the real Redis.
		_, _, body := get(t, srv.URL, "/queues/api/queues")
		var v map[string]any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("GET /queues/api/queues: got %q, want JSON: %v", body, err)
		}
	})

	tests := []struct {
		name   string
		remote string
		want   int
	}{
		{"IPv4 loopback", "127.0.0.1:5555", http.StatusOK},
		{"IPv6 loopback", "[::1]:5555", http.StatusOK},
		{"public IPv4", "203.0.113.5:1234", http.StatusForbidden},
		{"private IPv4", "10.0.0.7:1234", http.StatusForbidden},
		{"public IPv6", "[2001:db8::1]:1234", http.StatusForbidden},
		{"garbage", "not-an-address", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/queues", "/queues/api/queues"} {
				if got := serve(h, path, tt.remote).Code; got != tt.want {
					t.Errorf("GET %s from %s: got status %d, want %d", path, tt.remote, got, tt.want)
				}
			}
		})
	}

	t.Run("other endpoints stay open to any client", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/metrics"} {
			if got := serve(h, path, "203.0.113.5:1234").Code; got != http.StatusOK {
				t.Errorf("GET %s from 203.0.113.5: got status %d, want 200", path, got)
			}
		}
	})
}

func TestQueuesWithCredentials(t *testing.T) {
	t.Parallel()
	h := admin.Handler(admin.Options{Redis: testenv.RedisOpt(t), User: "ops", Password: "correct horse"})
	tests := []struct {
		name   string
		remote string
		auth   []string
		want   int
	}{
		{"no credentials, loopback", "127.0.0.1:5555", nil, http.StatusUnauthorized},
		{"no credentials, remote", "203.0.113.5:1234", nil, http.StatusUnauthorized},
		{"wrong password", "203.0.113.5:1234", []string{"ops", "wrong"}, http.StatusUnauthorized},
		{"wrong user", "203.0.113.5:1234", []string{"root", "correct horse"}, http.StatusUnauthorized},
		{"password prefix", "203.0.113.5:1234", []string{"ops", "correct"}, http.StatusUnauthorized},
		{"empty credentials", "203.0.113.5:1234", []string{"", ""}, http.StatusUnauthorized},
		{"right credentials, remote", "203.0.113.5:1234", []string{"ops", "correct horse"}, http.StatusOK},
		{"right credentials, loopback", "127.0.0.1:5555", []string{"ops", "correct horse"}, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/queues", "/queues/api/queues"} {
				w := serve(h, path, tt.remote, tt.auth...)
				if w.Code != tt.want {
					t.Errorf("GET %s: got status %d, want %d", path, w.Code, tt.want)
				}
				if tt.want == http.StatusUnauthorized {
					if got := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic ") {
						t.Errorf("GET %s: got WWW-Authenticate %q, want a Basic challenge", path, got)
					}
				}
			}
		})
	}

	t.Run("over a real connection", func(t *testing.T) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		if status, _, _ := get(t, srv.URL, "/queues"); status != http.StatusUnauthorized {
			t.Errorf("GET /queues without auth: got status %d, want 401", status)
		}
		if status, _, _ := get(t, srv.URL, "/queues", "ops", "correct horse"); status != http.StatusOK {
			t.Errorf("GET /queues with auth: got status %d, want 200", status)
		}
	})
}

func TestDefaultTimeouts(t *testing.T) {
	t.Parallel()
	want := admin.Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 120 * time.Second}
	if admin.DefaultTimeouts != want {
		t.Errorf("got DefaultTimeouts %+v, want %+v (the public server's)", admin.DefaultTimeouts, want)
	}
	srv := admin.NewServer("127.0.0.1:0", http.NotFoundHandler(), admin.DefaultTimeouts)
	got := admin.Timeouts{ReadHeader: srv.ReadHeaderTimeout, Read: srv.ReadTimeout, Write: srv.WriteTimeout, Idle: srv.IdleTimeout}
	if got != want {
		t.Errorf("got NewServer timeouts %+v, want %+v", got, want)
	}
}

// TestSlowClientsAreCutOff runs the admin handler on NewServer with short
// timeouts and checks that a client trickling its headers, or its body, or
// idling, loses its connection within the timeout instead of holding it.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	const readHeader, read, idle = 300 * time.Millisecond, 600 * time.Millisecond, 600 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := admin.NewServer(l.Addr().String(), admin.Handler(admin.Options{}),
		admin.Timeouts{ReadHeader: readHeader, Read: read, Write: time.Second, Idle: idle})
	srv.ErrorLog = log.New(io.Discard, "", 0)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })

	tests := []struct {
		name  string
		first string // sent at once
		drip  string // then one byte every 50 ms, repeated
		limit time.Duration
	}{
		{"slow headers", "GET /healthz HTTP/1.1\r\nHost: admin\r\n", "X", readHeader},
		{"slow body", "POST /healthz HTTP/1.1\r\nHost: admin\r\nContent-Length: 100000\r\n\r\n", "x", read},
		{"slow body to the dashboard", "POST /queues/api/queues HTTP/1.1\r\nHost: admin\r\nContent-Length: 100000\r\n\r\n", "x", read},
		{"idle after a request", "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n", "", idle},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, tt.first); err != nil {
				t.Fatal(err)
			}
			closed := make(chan time.Duration, 1)
			go func() {
				_, _ = io.Copy(io.Discard, conn) // until the server closes it
				closed <- time.Since(start)
			}()
			// Four times the limit: the connection must be gone well before.
			deadline := time.After(4 * tt.limit)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case d := <-closed:
					if d < tt.limit/2 {
						t.Errorf("connection closed after %v, want about %v (the timeout)", d, tt.limit)
					}
					return
				case <-deadline:
					t.Fatalf("connection still open after %v, want it closed after about %v", 4*tt.limit, tt.limit)
				case <-tick.C:
					if tt.drip != "" {
						_, _ = io.WriteString(conn, tt.drip)
					}
				}
			}
		})
	}
}

// TestQueueDepthMetrics: with QueueDepth set, /metrics has each queue's
// tasks by state and the age of its oldest pending task, read from Redis
// (zeros for a queue nothing was enqueued on); with Redis gone the series
// are left out and the scrape still answers within a second or so.
func TestQueueDepthMetrics(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()
	for i := range 3 {
		if _, err := client.Enqueue(asynq.NewTask("depth:test", nil), asynq.Queue("depth_a"), asynq.TaskID(fmt.Sprint("p", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Enqueue(asynq.NewTask("depth:test", nil), asynq.Queue("depth_a"), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the oldest pending task is over a second old
	srv := httptest.NewServer(admin.Handler(admin.Options{QueueDepth: asynq.NewInspectorFromRedisClient(rdb), Queues: []string{"depth_a", "depth_never"}}))
	defer srv.Close()
	_, _, body := get(t, srv.URL, "/metrics")
	for _, want := range []string{
		`paysvc_queue_tasks{queue="depth_a",state="pending"} 3`,
		`paysvc_queue_tasks{queue="depth_a",state="scheduled"} 1`,
		`paysvc_queue_tasks{queue="depth_a",state="active"} 0`,
		`paysvc_queue_tasks{queue="depth_a",state="retry"} 0`,
		`paysvc_queue_tasks{queue="depth_never",state="pending"} 0`,
		`paysvc_queue_oldest_pending_seconds{queue="depth_never"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("GET /metrics: got no line %q", want)
		}
	}
	m := regexp.MustCompile(`paysvc_queue_oldest_pending_seconds\{queue="depth_a"\} (\S+)`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("GET /metrics: no paysvc_queue_oldest_pending_seconds for depth_a")
	}
	if age, _ := strconv.ParseFloat(m[1], 64); age < 1 || age > 30 {
		t.Errorf("oldest pending age of depth_a: got %v s, want about 1 s", age)
	}

	dead := redis.NewClient(&redis.Options{Addr: testenv.FreeAddr(t)})
	defer dead.Close()
	srv2 := httptest.NewServer(admin.Handler(admin.Options{QueueDepth: asynq.NewInspectorFromRedisClient(dead), Queues: []string{"depth_a"}}))
	defer srv2.Close()
	start := time.Now()
	status, _, body := get(t, srv2.URL, "/metrics")
	if took := time.Since(start); status != http.StatusOK || took > 2*time.Second {
		t.Errorf("GET /metrics with Redis gone: got %d after %v, want 200 within about a second", status, took)
	}
	if strings.Contains(body, "paysvc_queue_tasks{") {
		t.Errorf("GET /metrics with Redis gone: got queue series, want them left out")
	}
}

// TestProfiles: the CPU, allocation, block and mutex profiles are served to
// loopback clients, and the block and mutex rates are set and read back
// through /debug/pprof/rates (not parallel: the rates are the process's).
func TestProfiles(t *testing.T) {
	h := admin.Handler(admin.Options{})
	for _, path := range []string{"/debug/pprof/allocs?debug=1", "/debug/pprof/heap?debug=1", "/debug/pprof/block?debug=1",
		"/debug/pprof/mutex?debug=1", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		if w := serve(h, path, "127.0.0.1:5000"); w.Code != http.StatusOK || w.Body.Len() == 0 {
			t.Errorf("GET %s: got %d with %d bytes, want 200 with a profile", path, w.Code, w.Body.Len())
		}
		if w := serve(h, path, "203.0.113.9:5000"); w.Code != http.StatusForbidden {
			t.Errorf("GET %s from another host: got %d, want 403", path, w.Code)
		}
	}
	rates := func(method, query string) (int, map[string]int) {
		req := httptest.NewRequest(method, "/debug/pprof/rates"+query, nil)
		req.RemoteAddr = "127.0.0.1:5000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var got map[string]int
		if w.Code == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("%s /debug/pprof/rates%s: %v (%s)", method, query, err, w.Body)
			}
		}
		return w.Code, got
	}
	t.Cleanup(func() { rates(http.MethodPost, "?block=0&mutex=0") })
	if code, got := rates(http.MethodPost, "?block=10000&mutex=5"); code != 200 || got["block"] != 10000 || got["mutex"] != 5 {
		t.Errorf("POST rates: got %d %v, want 200 block 10000 mutex 5", code, got)
	}
	if got := runtime.SetMutexProfileFraction(-1); got != 5 {
		t.Errorf("mutex profile fraction: got %d, want 5", got)
	}
	if code, got := rates(http.MethodPost, "?mutex=0"); code != 200 || got["block"] != 10000 || got["mutex"] != 0 {
		t.Errorf("POST rates mutex=0: got %d %v, want 200 block 10000 (unchanged) mutex 0", code, got)
	}
	if code, got := rates(http.MethodGet, ""); code != 200 || got["block"] != 10000 || got["mutex"] != 0 {
		t.Errorf("GET rates: got %d %v, want 200 block 10000 mutex 0", code, got)
	}
	for _, q := range []string{"?block=-1", "?mutex=x"} {
		if code, _ := rates(http.MethodPost, q); code != http.StatusBadRequest {
			t.Errorf("POST rates%s: got %d, want 400", q, code)
		}
	}
}
