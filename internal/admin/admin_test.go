package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

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

func TestReadyz(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	redisUp := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	down := func(context.Context) error { return errors.New("connection refused") }
	tests := []struct {
		name       string
		checks     map[string]admin.Check
		wantStatus int
		wantBody   map[string]string
	}{
		{
			name:       "all pass",
			checks:     map[string]admin.Check{"redis": redisUp, "postgres": func(context.Context) error { return nil }},
			wantStatus: http.StatusOK,
			wantBody:   map[string]string{"redis": "ok", "postgres": "ok"},
		},
		{
			name:       "postgres fails",
			checks:     map[string]admin.Check{"redis": redisUp, "postgres": down},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   map[string]string{"redis": "ok", "postgres": "down"},
		},
		{
			name:       "redis fails",
			checks:     map[string]admin.Check{"redis": down, "postgres": func(context.Context) error { return nil }},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   map[string]string{"redis": "down", "postgres": "ok"},
		},
		{
			name: "check honours the deadline",
			checks: map[string]admin.Check{"slow": func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}},
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   map[string]string{"slow": "down"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(admin.Handler(admin.Options{Checks: tt.checks}))
			defer srv.Close()
			status, _, body := get(t, srv.URL, "/readyz")
			if status != tt.wantStatus {
				t.Errorf("GET /readyz: got status %d, want %d (body %s)", status, tt.wantStatus, body)
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatalf("GET /readyz: body %q is not JSON: %v", body, err)
			}
			if !reflect.DeepEqual(got, tt.wantBody) {
				t.Errorf("GET /readyz: got %v, want %v", got, tt.wantBody)
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
