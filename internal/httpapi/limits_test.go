package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
)

// TestRateLimitRedisDown: with the limiter's Redis refusing connections a
// request goes through unlimited (no X-RateLimit-* headers) within the
// limiter's short budget, not after go-redis's retries (about 1.7 s), and
// counts in paysvc_ratelimit_unavailable_total.
func TestRateLimitRedisDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused
	rdb := redis.NewClient(&redis.Options{Addr: down})
	defer rdb.Close()
	h := newHarness(t, harnessOpts{limiterRedis: rdb})
	key := h.testKey()
	before := unavailableCount(t)
	for i := range 3 {
		start := time.Now()
		r := h.do("GET", "/v1/products", key, nil)
		took := time.Since(start)
		wantOK(t, r)
		if got := r.Header.Get("X-RateLimit-Limit"); got != "" {
			t.Errorf("request %d: got X-RateLimit-Limit %q with the limiter down, want none", i, got)
		}
		if took > 700*time.Millisecond {
			t.Errorf("request %d with Redis down took %v, want well under a second", i, took)
		}
	}
	if got := unavailableCount(t) - before; got < 3 {
		t.Errorf("paysvc_ratelimit_unavailable_total grew by %v, want at least 3", got)
	}
}

func unavailableCount(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "paysvc_ratelimit_unavailable_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ratePerHour: 5})
	m := h.merchant(payments.PlanFree)
	first, second, live := h.key(m, false), h.key(m, false), h.key(m, true)

	for i := 1; i <= 5; i++ {
		method, body := "GET", any(nil)
		if i%2 == 0 {
			method, body = "POST", productBody
		}
		r := h.do(method, "/v1/products", first, body)
		wantOK(t, r)
		if got, want := r.Header.Get("X-RateLimit-Limit"), "5"; got != want {
			t.Errorf("request %d: got X-RateLimit-Limit %q, want %q", i, got, want)
		}
		if got, want := r.Header.Get("X-RateLimit-Remaining"), strconv.Itoa(5-i); got != want {
			t.Errorf("request %d: got X-RateLimit-Remaining %q, want %q", i, got, want)
		}
	}

	for _, method := range []string{"GET", "POST"} {
		r := h.do(method, "/v1/products", first, productBody)
		wantError(t, r, http.StatusTooManyRequests, "rate_limit_exceeded")
		ra := r.Header.Get("Retry-After")
		secs, err := strconv.Atoi(ra)
		if err != nil || secs < 1 || secs > 3600 {
			t.Errorf("%s: got Retry-After %q, want an integer number of seconds in [1, 3600]", method, ra)
		}
		if got := r.Header.Get("X-RateLimit-Remaining"); got != "0" {
			t.Errorf("%s: got X-RateLimit-Remaining %q on a 429, want 0", method, got)
		}
	}
	// A refused request creates nothing: two products from the two POSTs above.
	if got := countRows(t, h, "products", m); got != 2 {
		t.Errorf("got %d products, want 2", got)
	}

	// Every key has a budget of its own, whatever its merchant or mode.
	for _, c := range []struct{ name, key string }{{"second test key", second}, {"live key", live}} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("GET", "/v1/products", c.key, nil)
			wantOK(t, r)
			if got := r.Header.Get("X-RateLimit-Remaining"); got != "4" {
				t.Errorf("got X-RateLimit-Remaining %q, want 4", got)
			}
		})
	}
}

func TestRateLimitSkipsRejectedRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ratePerHour: 5})
	m := h.merchant(payments.PlanFree)
	k := h.newKey(m, false, 0)
	ctx := context.Background()

	remaining := func(want string) {
		t.Helper()
		r := h.do("GET", "/v1/products", k.Secret, nil)
		wantOK(t, r)
		if got := r.Header.Get("X-RateLimit-Remaining"); got != want {
			t.Errorf("got X-RateLimit-Remaining %q, want %q", got, want)
		}
	}
	rejected := func(code string) {
		t.Helper()
		for i := 0; i < 6; i++ {
			r := h.do("GET", "/v1/products", k.Secret, nil)
			wantError(t, r, http.StatusUnauthorized, code)
			for _, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "Retry-After"} {
				if got := r.Header.Get(name); got != "" {
					t.Errorf("got %s %q on a 401, want none", name, got)
				}
			}
		}
	}

	remaining("4")

	// Revoked: six refused requests, then the key is restored.
	if _, err := h.svc.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	rejected("key_revoked")
	if _, err := h.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = NULL WHERE id = $1`, k.ID); err != nil {
		t.Fatal(err)
	}
	remaining("3")

	// Suspended merchant: the same.
	if _, err := h.db.ExecContext(ctx, `UPDATE merchants SET suspended_at = now() WHERE id = $1`, m); err != nil {
		t.Fatal(err)
	}
	rejected("key_revoked")
	if _, err := h.svc.UnsuspendMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	remaining("2")

	// Requests without a valid key carry no rate-limit headers either.
	r := h.withAuth("GET", "/v1/products", "Bearer svc_test_unknown", "")
	wantError(t, r, http.StatusUnauthorized, "unauthorized")
	if got := r.Header.Get("X-RateLimit-Remaining"); got != "" {
		t.Errorf("got X-RateLimit-Remaining %q on a 401, want none", got)
	}
}

// countRows counts a merchant's rows in table (both modes).
func countRows(t *testing.T, h *harness, table, merchantID string) int {
	t.Helper()
	var n int
	if err := h.db.GetContext(context.Background(), &n, `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, merchantID); err != nil {
		t.Fatal(err)
	}
	return n
}

const mib = 1 << 20

// productOfSize is a product create body of exactly size bytes: valid JSON
// whose description is padded (and so too long to be accepted).
func productOfSize(t *testing.T, size int) []byte {
	t.Helper()
	const head, tail = `{"name":"Padded","description":"`, `"}`
	pad := size - len(head) - len(tail)
	if pad < 0 {
		t.Fatalf("size %d is too small", size)
	}
	b := []byte(head + strings.Repeat("a", pad) + tail)
	if !json.Valid(b) || len(b) != size {
		t.Fatalf("built a %d-byte body, want %d bytes of valid JSON", len(b), size)
	}
	return b
}

// gatedBody yields data, then holds the request body open until release is
// closed (when the response is in, or after gateTimeout) and ends it with
// errGateClosed. The server answers an oversized body without reading all of
// it and closes the connection; holding the rest back means the client is
// never caught writing into a closed connection before it has read the
// answer, and it shows that the server answers once it has seen too much,
// without waiting for more.
type gatedBody struct {
	r       *bytes.Reader
	release chan struct{}
	once    sync.Once
}

var errGateClosed = errors.New("request body withheld until the response")

const gateTimeout = 5 * time.Second

func newGatedBody(data []byte) *gatedBody {
	return &gatedBody{r: bytes.NewReader(data), release: make(chan struct{})}
}

func (g *gatedBody) Read(p []byte) (int, error) {
	if g.r.Len() > 0 {
		return g.r.Read(p)
	}
	select {
	case <-g.release:
	case <-time.After(gateTimeout):
	}
	return 0, errGateClosed
}

func (g *gatedBody) Close() error {
	g.once.Do(func() { close(g.release) })
	return nil
}

// wireRecorder is a client whose connections record what the client wrote.
type wireRecorder struct {
	mu  sync.Mutex
	out bytes.Buffer
}

// client returns a client of its own: its first connection is the one
// recorded. It keeps connections alive, as clients do: a client that sends
// "Connection: close" gets the socket closed at once after the answer (no
// lingering), and may see a reset before it has read a 413.
func (w *wireRecorder) client(t *testing.T) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &recordingConn{Conn: c, w: w}, nil
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// head returns the request line and headers written so far.
func (w *wireRecorder) head() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, _, _ := strings.Cut(w.out.String(), "\r\n\r\n")
	return s
}

type recordingConn struct {
	net.Conn
	w *wireRecorder
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	if c.w.out.Len() < 64<<10 {
		c.w.out.Write(p)
	}
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

// readResponse is the second half of h.send: the response must match the
// OpenAPI description and carry the envelope.
func readResponse(t *testing.T, req *http.Request, resp *http.Response) *response {
	t.Helper()
	defer resp.Body.Close()
	if err := validator.Response(req, resp); err != nil {
		t.Errorf("%s %s: response does not match openapi.yaml: %v", req.Method, req.URL.Path, err)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := &response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("%s %s: body is not JSON: %q", req.Method, req.URL.Path, raw)
	}
	checkEnvelope(t, r)
	return r
}

// isConnError reports a connection reset or closed under the client.
func isConnError(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	exact, over := productOfSize(t, mib), productOfSize(t, mib+1)
	for _, c := range []struct {
		name string
		// body is what the client sends; length the Content-Length it
		// declares (-1: chunked); gated holds the body open after data.
		body    []byte
		length  int64
		gated   bool
		idemKey string
		status  int
		code    string
	}{
		{name: "exactly 1 MiB", body: exact, length: mib, status: 400, code: "validation_error"},
		{name: "exactly 1 MiB chunked", body: exact, length: -1, status: 400, code: "validation_error"},
		{name: "1 MiB + 1", body: over, length: mib + 1, gated: true, status: 413, code: "payload_too_large"},
		{name: "1 MiB + 1 chunked, sent whole", body: over, length: -1, status: 413, code: "payload_too_large"},
		{name: "1 MiB + 1 chunked with Idempotency-Key", body: over, length: -1, idemKey: "big-1", status: 413, code: "payload_too_large"},
		{name: "1 MiB + 1 chunked, rest held back", body: over, length: -1, gated: true, status: 413, code: "payload_too_large"},
		{name: "Content-Length claims 1 MiB + 1", body: exact[:64<<10], length: mib + 1, gated: true, status: 413, code: "payload_too_large"},
		{name: "Content-Length claims 1 GiB", body: exact[:64<<10], length: 1 << 30, gated: true, status: 413, code: "payload_too_large"},
	} {
		t.Run(c.name, func(t *testing.T) {
			send := func() (*http.Request, *wireRecorder, *http.Response, error) {
				var body io.ReadCloser = io.NopCloser(io.MultiReader(bytes.NewReader(c.body)))
				if c.gated {
					g := newGatedBody(c.body)
					t.Cleanup(func() { g.Close() })
					body = g
				}
				req, err := http.NewRequest("POST", h.url+"/v1/products", body)
				if err != nil {
					t.Fatal(err)
				}
				// For a client request an unknown length is 0 or -1 with
				// a body; -1 says so explicitly.
				req.ContentLength = c.length
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+key)
				if c.idemKey != "" {
					req.Header.Set("Idempotency-Key", c.idemKey)
				}
				wire := &wireRecorder{}
				resp, err := wire.client(t).Do(req)
				return req, wire, resp, err
			}
			// The gate makes a write error before the answer unlikely; should
			// one happen anyway the answer was never seen, so send again.
			req, wire, resp, err := send()
			for attempt := 2; err != nil && attempt <= 3 && isConnError(err); attempt++ {
				t.Logf("attempt %d: %v; sending again", attempt-1, err)
				req, wire, resp, err = send()
			}
			if errors.Is(err, errGateClosed) {
				t.Fatalf("POST /v1/products: no answer %v after the body went past 1 MiB: the server waits for more of the body before it answers 413", gateTimeout)
			}
			if err != nil {
				t.Fatalf("POST /v1/products: %v", err)
			}
			r := readResponse(t, req, resp)
			wantError(t, r, c.status, c.code)
			if c.code == "validation_error" && r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, "description") {
				t.Errorf("got message %q, want it to name description", r.Body.Error.Message)
			}

			head := strings.ToLower(wire.head())
			if c.length == -1 {
				if req.ContentLength != -1 {
					t.Errorf("got req.ContentLength %d, want -1", req.ContentLength)
				}
				if !strings.Contains(head, "\r\ntransfer-encoding: chunked") || strings.Contains(head, "\r\ncontent-length:") {
					t.Errorf("request was not sent chunked:\n%s", head)
				}
			} else if want := "\r\ncontent-length: " + strconv.FormatInt(c.length, 10); !strings.Contains(head, want) {
				t.Errorf("request head lacks %q:\n%s", want, head)
			}
		})
	}
	if got := countRows(t, h, "products", m); got != 0 {
		t.Errorf("got %d products, want 0", got)
	}
	// The 413 with an Idempotency-Key was not stored: the key is still free.
	r := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "big-1")
	wantOK(t, r)
	if got := r.Header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("got Idempotent-Replayed %q, want none", got)
	}
}

func TestStrictJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	r := h.do("POST", "/v1/products", key, productBody)
	wantOK(t, r)
	var existing struct{ ID string }
	r.data(t, &existing)
	r = h.do("POST", "/v1/customers", key, `{"email":"a@example.com"}`)
	wantOK(t, r)
	var customer struct{ ID string }
	r.data(t, &customer)

	for _, c := range []struct {
		name, method, path, body string
		mention                  string // the message must contain it
	}{
		{"unclosed object", "POST", "/v1/products", `{`, ""},
		{"missing value", "POST", "/v1/products", `{"name":}`, ""},
		{"trailing comma", "POST", "/v1/products", `{"name":"a",}`, ""},
		{"single quotes", "POST", "/v1/products", `{'name':'a'}`, ""},
		{"trailing garbage", "POST", "/v1/products", `{"name":"a"} x`, ""},
		{"two objects", "POST", "/v1/products", `{"name":"a"}{"name":"b"}`, ""},
		{"top-level array", "POST", "/v1/products", `[{"name":"a"}]`, ""},
		{"null", "POST", "/v1/products", `null`, ""},
		{"string", "POST", "/v1/products", `"name"`, ""},
		{"number", "POST", "/v1/products", `42`, ""},
		{"empty body", "POST", "/v1/products", ``, ""},
		{"whitespace body", "POST", "/v1/products", " \n\t ", ""},
		{"invalid UTF-8", "POST", "/v1/products", "{\"name\":\"\xff\xfe\"}", ""},
		{"unknown field", "POST", "/v1/products", `{"name":"a","colour":"red"}`, "colour"},
		{"unknown nested field", "POST", "/v1/products", `{"name":"a","price":{"amount":100,"currency":"usd","x":1}}`, "price.x"},
		{"case-mismatched field", "POST", "/v1/products", `{"NAME":"a"}`, "NAME"},
		{"case-mismatched nested field", "POST", "/v1/products", `{"name":"a","price":{"Amount":100,"currency":"usd"}}`, "price.Amount"},
		{"name is a number", "POST", "/v1/products", `{"name":1}`, "name"},
		{"amount is a string", "POST", "/v1/products", `{"name":"a","price":{"amount":"100","currency":"usd"}}`, "price.amount"},
		{"amount is fractional", "POST", "/v1/products", `{"name":"a","price":{"amount":1.5,"currency":"usd"}}`, "price.amount"},
		{"amount overflows int64", "POST", "/v1/products", `{"name":"a","price":{"amount":99999999999999999999,"currency":"usd"}}`, "price.amount"},
		{"price is an array", "POST", "/v1/products", `{"name":"a","price":[]}`, "price"},
		{"images is a string", "POST", "/v1/products", `{"name":"a","images":"https://img.example/a.png"}`, "images"},
		{"active is a string", "POST", "/v1/products", `{"name":"a","active":"true"}`, "active"},
		{"metadata value is a number", "POST", "/v1/products", `{"name":"a","metadata":{"k":1}}`, "metadata"},
		{"metadata value is null", "POST", "/v1/products", `{"name":"a","metadata":{"k":null}}`, "metadata.k"},
		{"metadata is an array", "POST", "/v1/products", `{"name":"a","metadata":["k"]}`, "metadata"},
		{"duplicate metadata key", "POST", "/v1/products", `{"name":"a","metadata":{"k":"x","k":"y"}}`, "metadata.k"},
		{"duplicate field", "POST", "/v1/products", `{"name":"a","name":"b"}`, "name"},
		{"duplicate nested field", "POST", "/v1/products", `{"name":"a","price":{"amount":1,"amount":2,"currency":"usd"}}`, "price.amount"},
		{"update with unknown field", "PUT", "/v1/products/" + existing.ID, `{"nme":"b"}`, "nme"},
		{"update with wrong type", "PUT", "/v1/products/" + existing.ID, `{"shippable":"yes"}`, "shippable"},
		{"customer unknown field", "POST", "/v1/customers", `{"email":"b@example.com","mail":"x"}`, "mail"},
		{"customer case-mismatched field", "POST", "/v1/customers", `{"Email":"b@example.com"}`, "Email"},
		{"customer duplicate field", "POST", "/v1/customers", `{"email":"b@example.com","email":"c@example.com"}`, "email"},
		{"customer wrong type", "PUT", "/v1/customers/" + customer.ID, `{"metadata":[]}`, "metadata"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do(c.method, c.path, key, c.body)
			wantError(t, r, http.StatusBadRequest, "validation_error")
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, c.mention) {
				t.Errorf("got message %q, want it to name %q", r.Body.Error.Message, c.mention)
			}
		})
	}
	if got := countRows(t, h, "products", m); got != 1 {
		t.Errorf("got %d products, want only the first", got)
	}
	if got := countRows(t, h, "customers", m); got != 1 {
		t.Errorf("got %d customers, want only the first", got)
	}
	r = h.do("GET", "/v1/products/"+existing.ID, key, nil)
	wantOK(t, r)
	var p struct {
		Name      string
		Shippable *bool
	}
	r.data(t, &p)
	if p.Name != "Mug" || p.Shippable != nil {
		t.Errorf("got %+v after refused updates, want name Mug and shippable null", p)
	}
}
