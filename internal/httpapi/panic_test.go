package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paysvc/internal/secrets"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/ratelimit"
	"paysvc/internal/testenv"
)

// panicEngine is the real engine of New (its middleware chain) with routes
// added that panic. The routes are outside /v1, so no dependency is used.
func panicEngine(t *testing.T, log *slog.Logger) *gin.Engine {
	t.Helper()
	box, err := secrets.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	h := New(Deps{Log: log, Secrets: box})
	eng, ok := h.(*gin.Engine)
	if !ok {
		t.Fatalf("New returned %T, want *gin.Engine", h)
	}
	return eng
}

func TestRecoverPanics(t *testing.T) {
	t.Parallel()
	const secret = "svc_live_SECRETdoNotLeak123"
	for _, c := range []struct {
		name  string
		value any
	}{
		{"string", "boom: " + secret},
		{"error", errors.New("db failed, password=" + secret)},
		{"nil map write", nil}, // a runtime error, see the handler
		{"struct", struct{ Key string }{secret}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var logs testenv.LogBuffer
			eng := panicEngine(t, slog.New(slog.NewJSONHandler(&logs, nil)))
			eng.POST("/test/panic", func(c2 *gin.Context) {
				if c.value == nil {
					var m map[string]string
					//lint:ignore SA5000 the runtime panic is what this case tests
					m[secret] = secret
				}
				panic(c.value)
			})
			srv := httptest.NewServer(eng)
			defer srv.Close()

			resp, err := http.Post(srv.URL+"/test/panic", "application/json", strings.NewReader(`{"name":"x"}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var raw bytes.Buffer
			if _, err := raw.ReadFrom(resp.Body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusInternalServerError {
				t.Errorf("got status %d, want 500", resp.StatusCode)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("got Content-Type %q, want application/json", ct)
			}
			var env struct {
				Success   *bool `json:"success"`
				Error     struct{ Code, Message string }
				RequestID string `json:"request_id"`
			}
			if err := json.Unmarshal(raw.Bytes(), &env); err != nil {
				t.Fatalf("got body %q, want the error envelope: %v", raw.String(), err)
			}
			if env.Success == nil || *env.Success || env.Error.Code != "internal_error" || env.Error.Message == "" {
				t.Errorf("got %s, want success false and an internal_error with a message", raw.String())
			}
			if _, err := uuid.Parse(env.RequestID); err != nil || resp.Header.Get("X-Request-Id") != env.RequestID {
				t.Errorf("got request_id %q and X-Request-Id %q, want the same UUID", env.RequestID, resp.Header.Get("X-Request-Id"))
			}
			for _, leak := range []string{secret, "panic", "goroutine", ".go:"} {
				if strings.Contains(raw.String(), leak) {
					t.Errorf("body %s contains %q", raw.String(), leak)
				}
			}
			for name, want := range map[string]string{
				"X-Content-Type-Options": "nosniff",
				"X-Frame-Options":        "DENY",
				"X-Api-Version":          APIVersion,
			} {
				if got := resp.Header.Get(name); got != want {
					t.Errorf("got %s %q, want %q", name, got, want)
				}
			}
			// The cause is logged, with the request id and the stack.
			log := logs.String()
			if !strings.Contains(log, env.RequestID) || !strings.Contains(log, "panic_test.go") {
				t.Errorf("got log %q, want the request id and the stack", log)
			}

			// The server survives: the next request is answered normally.
			next, err := http.Get(srv.URL + "/v1/nope")
			if err != nil {
				t.Fatal(err)
			}
			next.Body.Close()
			if next.StatusCode != http.StatusNotFound {
				t.Errorf("got %d after a panic, want 404", next.StatusCode)
			}
		})
	}
}

func TestRecoverPanicsAfterWrite(t *testing.T) {
	t.Parallel()
	eng := panicEngine(t, slog.New(slog.DiscardHandler))
	eng.GET("/test/late-panic", func(c *gin.Context) {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte(`{"success":true}`))
		panic("after the response")
	})
	w := httptest.NewRecorder()
	eng.ServeHTTP(w, httptest.NewRequest("GET", "/test/late-panic", nil))
	// What was written stands; no second envelope is appended to it.
	if w.Code != http.StatusOK || w.Body.String() != `{"success":true}` {
		t.Errorf("got %d %q, want the handler's own 200 response only", w.Code, w.Body.String())
	}
}

func TestRecoverPanicsRepanicsAbortHandler(t *testing.T) {
	t.Parallel()
	eng := panicEngine(t, slog.New(slog.DiscardHandler))
	eng.GET("/test/abort", func(c *gin.Context) { panic(http.ErrAbortHandler) })
	defer func() {
		if p := recover(); p != http.ErrAbortHandler {
			t.Errorf("got panic %v, want http.ErrAbortHandler passed on to net/http", p)
		}
	}()
	eng.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/test/abort", nil))
	t.Errorf("ServeHTTP returned, want the http.ErrAbortHandler panic")
}

// TestRecoverPanicsReleasesIdempotencyKey: a panic is a server-side failure,
// so like any 500 it must release the Idempotency-Key at once and a retry
// with the key must run again rather than wait for the claim to go stale.
func TestRecoverPanicsReleasesIdempotencyKey(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now)
	s := &Server{svc: svc, store: store, limiter: ratelimit.New(testenv.Redis(t), 1000), log: slog.New(slog.DiscardHandler), now: time.Now}
	_, k := merchantWithKey(t, svc, "Panics")

	// The chain of New, with a /v1 route that panics.
	r := gin.New()
	r.Use(s.edge, s.recoverPanics, metrics, s.limitBody)
	var calls atomic.Int32
	v1 := r.Group("/v1", s.authenticate, s.rateLimit, s.idempotency)
	v1.POST("/test/boom", s.wrap(func(c *gin.Context) (any, error) {
		calls.Add(1)
		panic("boom")
	}))
	srv := httptest.NewServer(r)
	defer srv.Close()

	client := &http.Client{Timeout: 5 * time.Second}
	for i := 1; i <= 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/test/boom", strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer "+k.Secret)
		req.Header.Set("Idempotency-Key", "panic-1")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("attempt %d: %v after %v, want a prompt 500", i, err, time.Since(start).Round(time.Millisecond))
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), `"internal_error"`) || strings.Contains(string(body), "boom") {
			t.Errorf("attempt %d: got %d %s, want 500 internal_error without the panic value", i, resp.StatusCode, body)
		}
		if got := calls.Load(); got != int32(i) {
			t.Errorf("attempt %d: handler ran %d times, want %d", i, got, i)
		}
	}
}

// merchantWithKey creates a merchant named name and a test-mode key of it.
func merchantWithKey(tb testing.TB, svc *payments.Service, name string) (payments.Merchant, payments.NewKey) {
	tb.Helper()
	ctx := context.Background()
	m, err := svc.CreateMerchant(ctx, name, "", payments.PlanFree)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := svc.CreateKey(ctx, m.ID, false, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return m, k
}
