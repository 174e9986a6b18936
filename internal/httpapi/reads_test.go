package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/ratelimit"
	"paysvc/internal/testenv"
)

// readsStack is New's chain on a real database and Redis, with a test
// route registered as a read: GET /v1/test/read.
type readsStack struct {
	srv   *httptest.Server
	key   string
	reads atomic.Int32 // runs of the read route's handler
}

func newReadsStack(t *testing.T, rdb redis.UniversalClient, perHour int, read handler) *readsStack {
	t.Helper()
	db := testenv.DB(t)
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now)
	s := &Server{svc: svc, store: store, limiter: ratelimit.New(rdb, perHour), log: slog.New(slog.DiscardHandler), now: time.Now}
	_, k := merchantWithKey(t, svc, "Reads")
	st := &readsStack{key: k.Secret}
	r := gin.New()
	r.Use(s.edge, s.recoverPanics, metrics, s.limitBody)
	reads := r.Group("/v1", s.authenticate, s.rateLimitRead) // as New's read routes
	reads.GET("/test/read", s.wrap(func(c *gin.Context) (any, error) {
		st.reads.Add(1)
		return read(c)
	}))
	st.srv = httptest.NewServer(r)
	t.Cleanup(st.srv.Close)
	return st
}

func (st *readsStack) get(t *testing.T, path string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, st.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+st.key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env map[string]any
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("GET %s: %d %q is not JSON: %v", path, resp.StatusCode, b, err)
	}
	return resp, env
}

// heldScripts holds every Redis script call (the limiter's) until release
// is closed, or its context ends.
type heldScripts struct{ release chan struct{} }

func (h heldScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h heldScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h heldScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(ctx, cmds)
		return next(ctx, cmds)
	}
}

func (h heldScripts) hold(ctx context.Context, cmds []redis.Cmder) {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			select {
			case <-h.release:
			case <-ctx.Done():
			}
			return
		}
	}
}

// TestReadRunsWhileTheLimiterDecides: a read route's handler runs while the
// limiter's Redis call is in flight. Here that call is held until the
// handler has run; a handler run only after the decision would find the
// limiter past its budget, and the request would go through unlimited,
// without X-RateLimit headers.
func TestReadRunsWhileTheLimiterDecides(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	held := heldScripts{release: make(chan struct{})}
	rdb.AddHook(held)
	st := newReadsStack(t, rdb, 1000, func(c *gin.Context) (any, error) {
		close(held.release) // the limiter's call may answer now
		return map[string]string{"ok": "read"}, nil
	})
	before := unavailableTotal(t)
	resp, env := st.get(t, "/v1/test/read")
	if resp.StatusCode != http.StatusOK || env["success"] != true {
		t.Fatalf("GET /v1/test/read: got %d %v, want 200", resp.StatusCode, env)
	}
	if got := resp.Header.Get("X-RateLimit-Remaining"); got == "" {
		t.Error("no X-RateLimit-Remaining: the limiter did not decide within its budget, so the handler ran after its call")
	}
	if d := unavailableTotal(t) - before; d != 0 {
		t.Errorf("paysvc_ratelimit_unavailable_total grew by %v, want 0", d)
	}
}

// TestRefusedReadIsDropped: a read refused by the limiter answers 429 in
// the error envelope, and nothing of the read's response is sent. Once the
// key is refused, its next read is decided before the handler runs: a
// client over its limit does not make the database work.
func TestRefusedReadIsDropped(t *testing.T) {
	t.Parallel()
	const secret = "the-read's-data"
	st := newReadsStack(t, testenv.Redis(t), 1, func(c *gin.Context) (any, error) {
		return map[string]string{"data": secret}, nil
	})
	if resp, env := st.get(t, "/v1/test/read"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first GET: got %d %v, want 200", resp.StatusCode, env)
	}
	for i := 2; i <= 3; i++ {
		resp, env := st.get(t, "/v1/test/read")
		errBody, _ := env["error"].(map[string]any)
		if resp.StatusCode != http.StatusTooManyRequests || errBody["code"] != string(payments.RateLimitExceeded) {
			t.Fatalf("GET %d over the limit of 1: got %d %v, want 429 rate_limit_exceeded", i, resp.StatusCode, env)
		}
		if b, _ := json.Marshal(env); strings.Contains(string(b), secret) {
			t.Errorf("GET %d: the refused response carries the read's data: %s", i, b)
		}
		if resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("GET %d: Retry-After %q, X-RateLimit-Remaining %q; want both", i, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"))
		}
	}
	// The first refusal ran beside its read; the second was decided first.
	if got := st.reads.Load(); got != 2 {
		t.Errorf("the read's handler ran %d times for 1 allowed and 2 refused requests, want 2", got)
	}
}

// TestPanickingReadAnswers500: a read's panic, with its response held, is
// answered in the error envelope on the real writer.
func TestPanickingReadAnswers500(t *testing.T) {
	t.Parallel()
	st := newReadsStack(t, testenv.Redis(t), 1000, func(c *gin.Context) (any, error) {
		panic("boom")
	})
	resp, env := st.get(t, "/v1/test/read")
	errBody, _ := env["error"].(map[string]any)
	if resp.StatusCode != http.StatusInternalServerError || errBody["code"] != string(payments.InternalError) {
		t.Errorf("GET of a panicking read: got %d %v, want 500 internal_error", resp.StatusCode, env)
	}
}

func unavailableTotal(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := rateLimitUnavailable.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
