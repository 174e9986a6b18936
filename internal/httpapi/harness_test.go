package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/apispec/validate"
	"paysvc/internal/clientaddr"
	"paysvc/internal/hosted"
	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
	"paysvc/internal/testenv"
	"paysvc/internal/webhook"
)

// harness is a real API server over httptest, on a real PostgreSQL database
// and a real Redis, whose every response is checked against the OpenAPI
// description.
type harness struct {
	t      *testing.T
	url    string
	engine *gin.Engine // what url serves, for the fuzz targets that drive it directly
	db     *sqlx.DB
	store  *postgres.Store
	svc    *payments.Service
}

type harnessOpts struct {
	ratePerHour int
	blocklist   string        // terms, one per line; empty = built-in list
	sessionTTL  time.Duration // checkout session lifetime; 0 = 24h
	// allowPrivateWebhooks lets endpoints point at loopback receivers.
	allowPrivateWebhooks bool
	// stripeWebhook, when set, is given the service and receives POST
	// /stripe/webhook (PROCESSOR=stripe).
	stripeWebhook func(db *sqlx.DB, svc *payments.Service) httpapi.StripeWebhook
	// limiterRedis is the rate limiter's Redis; nil = this binary's test database.
	limiterRedis redis.UniversalClient
	// processor, when set, replaces the sandbox as the service's processor
	// (PROCESSOR=stripe tests).
	processor func(db *sqlx.DB) processor.Processor
	// callsInTx bounds the processor calls inside a transaction
	// (payments.WithProcessorCallsInTx); 0 = no bound.
	callsInTx int
	// authCacheTTL is the service's auth cache TTL; 0 = no cache.
	authCacheTTL time.Duration
	// unknownKeys, when set, limits each client address's unknown keys
	// (httpapi.Deps.UnknownKeys); trustedProxies names the proxies whose
	// X-Forwarded-For names the client.
	unknownKeys    func(rdb redis.UniversalClient) *ratelimit.Strikes
	trustedProxies []string
}

// testPortalKey signs portal URLs in tests.
var testPortalKey = bytes.Repeat([]byte{7}, 32)

// testBox seals stored responses in tests with a fixed key.
var testBox, _ = secrets.New(bytes.Repeat([]byte{42}, 32))

var (
	validatorOnce sync.Once
	validator     *validate.Validator
	validatorErr  error
)

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	h := newStack(t, o)
	h.t = t
	return h
}

// newStack builds the server for any test or fuzz target; the caller sets h.t.
func newStack(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.ratePerHour == 0 {
		o.ratePerHour = 100000
	}
	db := testenv.DB(t)
	store := postgres.New(db)
	bl, err := payments.LoadBlocklist("")
	if o.blocklist != "" {
		bl, err = payments.ParseBlocklist(strings.NewReader(o.blocklist))
	}
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox needs the server's URL for hosted pages, so the handler is
	// set after the server starts.
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	sb := sandbox.New(db, srv.URL).WithRequests(store.InRequest) // as app.Env.Processor wires it
	var proc processor.Processor = sb
	if o.processor != nil {
		proc = o.processor(db)
	}
	ttl := o.sessionTTL
	if ttl == 0 {
		ttl = 24 * time.Hour
	}
	// No auth cache unless asked: tests change keys behind the service's
	// back (SQL); the cache has its own test in internal/payments.
	svc := payments.NewService(store, bl, time.Now, payments.WithProcessor(proc), payments.WithSessionTTL(ttl), payments.WithAuthCacheTTL(o.authCacheTTL), payments.WithSandboxClocks(),
		payments.WithSecrets(testBox), payments.WithEndpointCheck(func(ctx context.Context, u string) error {
			return webhook.CheckURL(ctx, u, o.allowPrivateWebhooks)
		}), payments.WithPortal(testPortalKey, time.Hour, srv.URL), payments.WithProcessorCallsInTx(o.callsInTx))
	var limiterRedis redis.UniversalClient = testenv.Redis(t)
	if o.limiterRedis != nil {
		limiterRedis = o.limiterRedis
	}
	clients, err := clientaddr.New(o.trustedProxies)
	if err != nil {
		t.Fatal(err)
	}
	var unknownKeys *ratelimit.Strikes
	if o.unknownKeys != nil {
		unknownKeys = o.unknownKeys(limiterRedis)
	}
	handler = httpapi.New(httpapi.Deps{
		Clients:     clients,
		UnknownKeys: unknownKeys,
		Service:     svc,
		Store:       store,
		Limiter:     ratelimit.New(limiterRedis, o.ratePerHour),
		Pages:       hosted.New(svc, sb.Cards(svc), nil),
		Secrets:     testBox,
		StripeWebhook: func() httpapi.StripeWebhook {
			if o.stripeWebhook == nil {
				return nil
			}
			return o.stripeWebhook(db, svc)
		}(),
	})
	engine, ok := handler.(*gin.Engine)
	if !ok {
		t.Fatalf("httpapi.New returned %T, want *gin.Engine", handler)
	}
	validatorOnce.Do(func() { validator, validatorErr = validate.New() })
	if validatorErr != nil {
		t.Fatalf("openapi validator: %v", validatorErr)
	}
	return &harness{url: srv.URL, engine: engine, db: db, store: store, svc: svc}
}

// merchant creates a merchant and returns its id.
func (h *harness) merchant(plan payments.Plan) string {
	h.t.Helper()
	m, err := h.svc.CreateMerchant(context.Background(), "Test merchant", "", plan)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.ID
}

// key creates an API key for the merchant and returns the secret.
func (h *harness) key(merchantID string, live bool) string {
	h.t.Helper()
	k, err := h.svc.CreateKey(context.Background(), merchantID, live, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return k.Secret
}

// testKey returns a test-mode key of a fresh merchant.
func (h *harness) testKey() string {
	h.t.Helper()
	return h.key(h.merchant(payments.PlanFree), false)
}

// response is a decoded API response.
type response struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   struct {
		Success   bool            `json:"success"`
		Data      json.RawMessage `json:"data"`
		Error     *struct{ Code, Message string }
		RequestID string `json:"request_id"`
	}
}

// code is the error code, or "" for a success.
func (r *response) code() string {
	if r.Body.Error == nil {
		return ""
	}
	return r.Body.Error.Code
}

// data decodes the success payload into v.
func (r *response) data(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body.Data, v); err != nil {
		t.Fatalf("decode data %s: %v", r.Body.Data, err)
	}
}

// do sends a request; body may be nil, a string (sent as is) or a value
// (JSON-encoded). The response must match the OpenAPI description.
func (h *harness) do(method, path, key string, body any, headers ...string) *response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return h.send(req)
}

func (h *harness) send(req *http.Request) *response {
	h.t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if err := validator.Response(req, resp); err != nil {
		h.t.Errorf("%s %s: response does not match openapi.yaml: %v", req.Method, req.URL.Path, err)
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	r := &response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		h.t.Fatalf("%s %s: body is not JSON: %q", req.Method, req.URL.Path, raw)
	}
	checkEnvelope(h.t, r)
	return r
}

// checkEnvelope asserts what every response carries: the envelope matching
// the status, a UUID request_id equal to X-Request-Id, and the headers.
func checkEnvelope(t *testing.T, r *response) {
	t.Helper()
	if r.Body.Success != (r.Status == http.StatusOK) {
		t.Errorf("status %d with success=%v: %s", r.Status, r.Body.Success, r.Raw)
	}
	if r.Status != http.StatusOK && (r.Body.Error == nil || r.Body.Error.Code == "" || r.Body.Error.Message == "") {
		t.Errorf("status %d without error code and message: %s", r.Status, r.Raw)
	}
	if len(r.Body.RequestID) != 36 || r.Header.Get("X-Request-Id") != r.Body.RequestID {
		t.Errorf("request_id %q, X-Request-Id %q: want the same UUID", r.Body.RequestID, r.Header.Get("X-Request-Id"))
	}
	for name, want := range map[string]string{
		"X-Content-Type-Options": "nosniff",
		"X-Frame-Options":        "DENY",
		"X-Api-Version":          "2025-01-01",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.HasPrefix(r.Header.Get("Strict-Transport-Security"), "max-age=") {
		t.Errorf("Strict-Transport-Security = %q", r.Header.Get("Strict-Transport-Security"))
	}
	// Every body's length is sent ahead, long ones (list pages) too, never
	// chunked.
	if got, want := r.Header.Get("Content-Length"), strconv.Itoa(len(r.Raw)); got != want {
		t.Errorf("Content-Length = %q for a body of %s bytes", got, want)
	}
}

// wantError asserts an error response's status and code.
func wantError(t *testing.T, r *response, status int, code string) {
	t.Helper()
	if r.Status != status || r.code() != code {
		t.Errorf("got %d %s (%s), want %d %s", r.Status, r.code(), r.Raw, status, code)
	}
}

// wantOK asserts a success.
func wantOK(t *testing.T, r *response) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", r.Status, r.Raw)
	}
}
