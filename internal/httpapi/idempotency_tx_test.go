package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
	"paysvc/internal/testenv"
)

// txStack is the chain of New with test routes that make a change through
// the service and then fail, panic or wait.
type txStack struct {
	url string
	key string
	db  interface {
		Get(any, string, ...any) error
	}
	mch     string
	release chan struct{} // closes the wait of /v1/test/slow
	entered chan struct{} // /v1/test/slow has made its change
}

func newTxStack(t *testing.T, wait time.Duration) *txStack {
	t.Helper()
	db := testenv.DB(t)
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now)
	box, err := secrets.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{svc: svc, store: store, limiter: ratelimit.New(testenv.Redis(t), 100000),
		log: slog.New(slog.DiscardHandler), now: time.Now, box: box, wait: wait}
	m, k := merchantWithKey(t, svc, "Tx")
	ts := &txStack{key: k.Secret, db: db, mch: m.ID, release: make(chan struct{}), entered: make(chan struct{}, 10)}

	r := gin.New()
	r.Use(s.edge, s.recoverPanics, metrics, s.limitBody)
	v1 := r.Group("/v1", s.authenticate, s.rateLimit, s.idempotency)
	email := "tx@example.com"
	create := func(c *gin.Context) (any, error) {
		cu, err := svc.CreateCustomer(c.Request.Context(), scope(c), payments.CustomerInput{Email: &email})
		return cu, err
	}
	v1.POST("/test/fail", s.wrap(func(c *gin.Context) (any, error) {
		if _, err := create(c); err != nil {
			return nil, err
		}
		return nil, errors.New("failed after the change")
	}))
	v1.POST("/test/panic", s.wrap(func(c *gin.Context) (any, error) {
		if _, err := create(c); err != nil {
			return nil, err
		}
		panic("after the change")
	}))
	v1.POST("/test/slow", s.wrap(func(c *gin.Context) (any, error) {
		cu, err := create(c)
		ts.entered <- struct{}{}
		<-ts.release
		return cu, err
	}))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	ts.url = srv.URL
	return ts
}

func (ts *txStack) post(t *testing.T, path, idem string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.url+path, strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+ts.key)
	req.Header.Set("Idempotency-Key", idem)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (ts *txStack) customers(t *testing.T) int {
	t.Helper()
	var n int
	if err := ts.db.Get(&n, `SELECT count(*) FROM customers WHERE merchant_id = $1`, ts.mch); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIdempotentServerErrorRollsBackTheChange: a 5xx or a panic after the
// handler made its change rolls back the change with the key's claim, so
// nothing is left half done and the retry runs again.
func TestIdempotentServerErrorRollsBackTheChange(t *testing.T) {
	t.Parallel()
	ts := newTxStack(t, time.Second)
	for _, path := range []string{"/v1/test/fail", "/v1/test/panic"} {
		t.Run(path, func(t *testing.T) {
			for i := 1; i <= 2; i++ {
				status, h, body := ts.post(t, path, "boom"+path)
				if status != http.StatusInternalServerError || !strings.Contains(body, `"internal_error"`) {
					t.Errorf("attempt %d: got %d %s, want 500 internal_error", i, status, body)
				}
				if h.Get("Idempotent-Replayed") != "" {
					t.Errorf("attempt %d: got a replay of a 500, want the request run again", i)
				}
			}
		})
	}
	if n := ts.customers(t); n != 0 {
		t.Errorf("got %d customers after failed requests, want 0 (their changes rolled back)", n)
	}
}

// TestIdempotentRepeatWaitsThenAnswers429: a repeat of an in-flight request
// waits for it on the key's row; past the wait it gets 429 with
// Retry-After, not a 500, and the first request still completes once;
// then the repeat replays it.
func TestIdempotentRepeatWaitsThenAnswers429(t *testing.T) {
	t.Parallel()
	ts := newTxStack(t, 300*time.Millisecond)
	type result struct {
		status int
		body   string
	}
	first := make(chan result, 1)
	go func() {
		status, _, body := ts.post(t, "/v1/test/slow", "slow-1")
		first <- result{status, body}
	}()
	<-ts.entered

	start := time.Now()
	status, h, body := ts.post(t, "/v1/test/slow", "slow-1")
	if status != http.StatusTooManyRequests || !strings.Contains(body, `"rate_limit_exceeded"`) || h.Get("Retry-After") != "1" {
		t.Errorf("repeat during the first: got %d %s (Retry-After %q), want 429 rate_limit_exceeded with Retry-After 1", status, body, h.Get("Retry-After"))
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("repeat answered after %v, want it to wait for the first request (300ms)", d)
	}
	if n := ts.customers(t); n != 0 {
		t.Errorf("got %d customers committed while the first request runs, want 0", n)
	}

	close(ts.release)
	r := <-first
	if r.status != http.StatusOK {
		t.Fatalf("first: got %d %s, want 200", r.status, r.body)
	}
	status, h, body = ts.post(t, "/v1/test/slow", "slow-1")
	if status != http.StatusOK || body != r.body || h.Get("Idempotent-Replayed") != "true" {
		t.Errorf("repeat after the first: got %d %s (replayed %q), want the replay of %s", status, body, h.Get("Idempotent-Replayed"), r.body)
	}
	if n := ts.customers(t); n != 1 {
		t.Errorf("got %d customers, want 1", n)
	}
}

// TestIdempotencyAAD: the sealed responses' associated data stays what
// earlier versions wrote ("idempotency\x00<merchant>\x00<livemode>\x00<key>"),
// so records stored before a deploy still open after it.
func TestIdempotencyAAD(t *testing.T) {
	for _, c := range []struct {
		sc  payments.Scope
		key string
	}{
		{payments.Scope{MerchantID: "acct_1", Live: false}, "order-42"},
		{payments.Scope{MerchantID: "acct_Zz9", Live: true}, "ü\x00%s%t"},
		{payments.Scope{}, ""},
	} {
		want := fmt.Sprintf("idempotency\x00%s\x00%t\x00%s", c.sc.MerchantID, c.sc.Live, c.key)
		if got := string(idempotencyAAD(c.sc, c.key)); got != want {
			t.Errorf("idempotencyAAD(%+v, %q): got %q, want %q", c.sc, c.key, got, want)
		}
	}
}
