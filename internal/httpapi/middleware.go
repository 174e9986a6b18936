package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"paysvc/internal/breaker"
	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
)

// Context keys: the request's state, set by the edge, and its body once read.
const (
	ctxRequest = "paysvc.request"
	ctxBody    = "paysvc.body"
)

// request is what the edge and authentication learn of a request, kept
// under one context key: one entry in gin's map of any instead of three
// (each boxed on its own) on every request.
type request struct {
	id    string
	authd bool // scope and keyID are set
	scope payments.Scope
	keyID string
	reads keyReads // authentication's KeyReads, when Deps.UnknownKeys is set
}

// requestOf is the request's state (every route passes the edge), made
// empty for a context the edge did not see: a test's bare gin.Context.
func requestOf(c *gin.Context) *request {
	if r, ok := c.Get(ctxRequest); ok {
		return r.(*request)
	}
	r := &request{}
	c.Set(ctxRequest, r)
	return r
}

func requestID(c *gin.Context) string { return requestOf(c).id }

// edgeHeaders are the fixed headers of every response, by canonical name.
// Their values are shared by every response's header map, without a copy
// per request: each has capacity 1, so an Add appends to a new array, and
// Set replaces the slice; nothing writes into them.
var edgeHeaders = func() map[string][]string {
	m := map[string][]string{}
	for _, kv := range [][2]string{
		{"X-API-Version", APIVersion},
		{"X-Content-Type-Options", "nosniff"},
		{"X-Frame-Options", "DENY"},
		{"Strict-Transport-Security", "max-age=63072000; includeSubDomains"},
		{"Cache-Control", "no-store"},
	} {
		m[http.CanonicalHeaderKey(kv[0])] = []string{kv[1]}[:1:1]
	}
	return m
}()

// edge gives every response its request id and the headers of the spec.
func (s *Server) edge(c *gin.Context) {
	id := uuid.NewString()
	c.Set(ctxRequest, &request{id: id})
	h := c.Writer.Header()
	h["X-Request-Id"] = []string{id}
	for k, v := range edgeHeaders {
		h[k] = v
	}
	c.Next()
}

// recoverPanics turns a panic into the 500 envelope and logs the stack.
func (s *Server) recoverPanics(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.ErrorContext(c.Request.Context(), "panic", append(logAttrs(c), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))...)
			if !c.Writer.Written() {
				s.writeError(c, fmt.Errorf("panic: %v", p))
			}
			c.Abort()
		}
	}()
	c.Next()
}

// limitBody caps the body at 1 MiB counted on the bytes read, so a chunked
// body or a lying Content-Length cannot get past it.
func (s *Server) limitBody(c *gin.Context) {
	if c.Request.ContentLength > maxBody {
		s.abortWith(c, payments.PayloadTooLarge, "Request body exceeds 1 MiB.")
		return
	}
	// A request without a body (net/http's NoBody: every GET the API
	// serves) keeps it, so the gate sees there is nothing to read instead
	// of reading and keeping an empty body on each of them.
	if c.Request.Body == nil || c.Request.Body == http.NoBody {
		c.Next()
		return
	}
	// MaxBytesReader tells net/http the limit was hit only through its own
	// ResponseWriter; then the server answers at once and closes, instead of
	// first reading on to drain the rest of a chunked body.
	var w http.ResponseWriter = c.Writer
	if u, ok := w.(interface{ Unwrap() http.ResponseWriter }); ok {
		w = u.Unwrap()
	}
	c.Request.Body = http.MaxBytesReader(w, c.Request.Body, maxBody)
	c.Next()
}

// readBody reads the whole body once (within the limit) and keeps it for
// later readers in the chain.
func readBody(c *gin.Context) ([]byte, error) {
	if b, ok := c.Get(ctxBody); ok {
		return b.([]byte), nil
	}
	b, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, payments.Errorf(payments.PayloadTooLarge, "Request body exceeds 1 MiB.")
		}
		return nil, payments.Errorf(payments.ValidationError, "The request body could not be read.")
	}
	c.Set(ctxBody, b)
	return b, nil
}

// authenticate resolves the bearer key to a scope.
func (s *Server) authenticate(c *gin.Context) {
	raw, ok := bearer(c.GetHeader("Authorization"))
	if !ok {
		s.writeError(c, payments.ErrUnauthorized())
		return
	}
	r := requestOf(c)
	var reads payments.KeyReads // a nil interface, not a nil *keyReads
	if s.unknownKeys != nil {
		r.reads = keyReads{s: s, c: c}
		reads = &r.reads
	}
	sc, key, err := s.svc.Authenticate(c.Request.Context(), raw, reads)
	if err != nil {
		s.writeError(c, err)
		return
	}
	r.authd, r.scope, r.keyID = true, sc, key.ID
	c.Next()
}

// keyReads admits a request's read of a key no cache holds: refused with
// 429 while its client address is past its budget of unknown keys
// (Deps.UnknownKeys), and a strike against it when the read finds none.
// A client sending made-up keys (each a database read) is so held to the
// budget's rate of reads, and the keys cached meanwhile still work.
type keyReads struct {
	s      *Server
	c      *gin.Context
	client string // the request's client address, once asked
}

func (k *keyReads) address() string {
	if k.client == "" {
		k.client = k.s.clients.Of(k.c.Request)
	}
	return k.client
}

func (k *keyReads) Admit() error {
	left, refused := k.s.unknownKeys.Refusing(k.address())
	if !refused {
		return nil
	}
	return payments.Errorf(payments.RateLimitExceeded,
		"Too many requests with unknown API keys from this address; retry after %s.", retryAfter(k.c, left))
}

// Missed strikes the client, even when the request has ended (its client
// gone), within limiterBudget. Without Redis the strike is counted in this
// process alone (ratelimit.Strikes). A new refusal of an address is
// logged, once per refusal and API process.
func (k *keyReads) Missed(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limiterBudget)
	defer cancel()
	fresh, err := k.s.unknownKeys.Strike(ctx, k.address())
	if err != nil {
		rateLimitUnavailable.Inc()
	}
	if fresh {
		unknownKeyRefusals.Inc()
		k.s.log.WarnContext(ctx, "client address refused: too many requests with unknown API keys",
			"client", k.address(), "request_id", requestID(k.c))
	}
}

// retryAfter sets the Retry-After header for a wait of d (whole seconds,
// at least one) and says it in words for the error message.
func retryAfter(c *gin.Context, d time.Duration) string {
	secs := max(int((d+time.Second-1)/time.Second), 1)
	c.Header("Retry-After", strconv.Itoa(secs))
	if secs == 1 {
		return "1 second"
	}
	return strconv.Itoa(secs) + " seconds"
}

// bearer returns the credentials of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110, section 11.1).
func bearer(h string) (string, bool) {
	scheme, cred, _ := strings.Cut(strings.TrimSpace(h), " ")
	cred = strings.TrimSpace(cred)
	return cred, strings.EqualFold(scheme, "Bearer") && cred != ""
}

// limiterBudget bounds the rate limiter's check: its Redis call takes under
// a millisecond when Redis answers, or none (a lease decides); a check
// refused while another replica's lease of the key may come back waits for
// it (tens of milliseconds), and is answered within this budget.
const limiterBudget = 150 * time.Millisecond

// rateLimit spends one request of the key's hourly budget. When Redis cannot
// answer the request goes through: the limiter guards capacity, and an
// outage of it should not take the payment API down with it.
//
// The check gets limiterBudget: with Redis down go-redis retries a command
// for about 2 s, and during a Sentinel failover it waits for the new
// master; a payment request should not. Each request let through that way
// counts in paysvc_ratelimit_unavailable_total.
func (s *Server) rateLimit(c *gin.Context) {
	if s.allowed(c, s.limiter.Start(c.Request.Context(), requestOf(c).keyID, limiterBudget)) {
		c.Next()
	}
}

// rateLimitRead is rateLimit for a read route: the read runs while Redis
// decides, so its request waits for the longer of the two, not for both
// one after the other; its response is held until the decision, and
// dropped for the 429 if refused. A check decided at once (from this
// process's lease of the key's budget) needs no holding. A key this
// process saw refused within its Retry-After is decided first, as
// rateLimit does, so a client over its limit does not make the database
// work for nothing.
func (s *Server) rateLimitRead(c *gin.Context) {
	key := requestOf(c).keyID
	if s.limiter.Refusing(key) {
		s.rateLimit(c)
		return
	}
	check := s.limiter.Start(c.Request.Context(), key, limiterBudget)
	if check.Decided() {
		if s.allowed(c, check) {
			c.Next()
		}
		return
	}
	w := &captureWriter{ResponseWriter: c.Writer}
	c.Writer = w
	defer func() { c.Writer = w.ResponseWriter }() // a panic is answered on the real writer
	c.Next()
	c.Writer = w.ResponseWriter // allowed answers a refusal on it
	if s.allowed(c, check) {
		w.ResponseWriter.WriteHeader(w.Status())
		w.ResponseWriter.Write(w.buf.Bytes()) //nolint:errcheck // the client may have gone
	}
}

// allowed waits for check and reports whether the request may go on; if
// not, it has answered 429.
func (s *Server) allowed(c *gin.Context, check ratelimit.Check) bool {
	res, err := check.Wait()
	if err != nil {
		rateLimitUnavailable.Inc()
		if !breaker.Refused(err) {
			// Logged once a failure; while Redis is down, once by the
			// breaker, and each request is counted.
			s.log.WarnContext(c.Request.Context(), "rate limiter unavailable, allowing request", append(logAttrs(c), "error", err)...)
		}
		return true
	}
	h := c.Writer.Header()
	h["X-Ratelimit-Limit"] = s.limitHeader(res.Limit)
	h["X-Ratelimit-Remaining"] = []string{strconv.Itoa(res.Remaining)}
	if !res.Allowed {
		s.abortWith(c, payments.RateLimitExceeded, "Too many requests; retry after "+retryAfter(c, res.RetryAfter)+".")
		return false
	}
	return true
}

// limitHeader is X-RateLimit-Limit's value, the same on every response:
// made once and shared (capacity 1, as edgeHeaders).
func (s *Server) limitHeader(limit int) []string {
	if v := s.limitValue.Load(); v != nil && v.n == limit {
		return v.value
	}
	v := &limitValue{n: limit, value: []string{strconv.Itoa(limit)}[:1:1]}
	s.limitValue.Store(v)
	return v.value
}

type limitValue struct {
	n     int
	value []string
}

// Idempotency-Key handling (Stripe's behaviour).
const (
	idempotencyTTL = payments.IdempotencyTTL
	// idempotencyWait bounds how long a repeat waits for an in-flight
	// first request with its key; then it is told to retry (429). A first
	// request takes milliseconds, a slow processor call seconds.
	idempotencyWait = 15 * time.Second
)

// Crash points of an idempotent request, where Deps.Crash is called.
const (
	CrashAfterChange = "after-change" // the change made, its response not stored
	CrashAfterStore  = "after-store"  // the response stored, not committed
	CrashAfterCommit = "after-commit" // committed, the response not sent
)

// idempotentMethod: the methods that change something take an
// Idempotency-Key (POST, and PATCH for a subscription's quantity).
func idempotentMethod(m string) bool { return m == http.MethodPost || m == http.MethodPatch }

// idempotency makes a POST or PATCH with an Idempotency-Key run at most once: a repeat
// with the same body replays the first response, a concurrent repeat waits
// for it, and the same key with another body or path is a validation_error.
// The request runs in one database transaction that claims the key, holds
// the change and stores the response (Store.BeginIdempotent), so the key
// commits with its response or not at all.
func (s *Server) idempotency(c *gin.Context) {
	key := c.GetHeader("Idempotency-Key")
	if !idempotentMethod(c.Request.Method) || key == "" {
		c.Next()
		return
	}
	body, err := readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	sc := scope(c)
	hash := requestHash(c.Request.Method, c.Request.URL.Path, body)
	ctx, rec, err := s.store.BeginIdempotent(c.Request.Context(), sc, key, hash, s.now(), idempotencyTTL, s.wait)
	switch {
	case errors.Is(err, payments.ErrKeyInFlight):
		// Not a 500: nothing failed, the first request is still running,
		// and a retry a moment later gets its response.
		c.Writer.Header().Set("Retry-After", "1")
		s.abortWith(c, payments.RateLimitExceeded, "A request with this Idempotency-Key is still in progress; retry after 1 second.")
	case err != nil:
		s.writeError(c, err)
	case rec == nil:
		s.runOwned(c, ctx, sc, key)
	case !bytes.Equal(rec.RequestHash, hash):
		s.abortWith(c, payments.ValidationError, "Keys for idempotent requests can only be used with the same parameters they were first used with.")
	default:
		body, err := s.box.Open(rec.Body, idempotencyAAD(sc, key))
		if err != nil {
			s.writeError(c, fmt.Errorf("open stored idempotent response: %w", err))
			return
		}
		h := c.Writer.Header()
		h.Set("Idempotent-Replayed", "true")
		if rec.RequestID != "" {
			h.Set("X-Request-Id", rec.RequestID)
		}
		c.Data(rec.Status, "application/json; charset=utf-8", body)
		c.Abort()
	}
}

// runOwned runs the request that claimed the key, in the request's
// transaction (ctx), holding its response back: a response below 500 is
// stored under the key in that transaction, which then commits, and only
// then is it sent. A 5xx or a panic rolls everything back — the change and
// the claim — so the client's retry runs again.
func (s *Server) runOwned(c *gin.Context, ctx context.Context, sc payments.Scope, key string) {
	w := &captureWriter{ResponseWriter: c.Writer}
	c.Writer = w
	c.Request = c.Request.WithContext(ctx)
	ended := false
	defer func() {
		if ended {
			return
		}
		// A panic: roll back and let recoverPanics answer on the real
		// writer, to which nothing was written.
		c.Writer = w.ResponseWriter
		if err := s.store.EndRequest(ctx, false); err != nil {
			s.log.ErrorContext(ctx, "idempotent request not rolled back", append(logAttrs(c), "error", err)...)
		}
	}()
	c.Next()
	if s.crash != nil {
		s.crash(CrashAfterChange)
	}
	status := w.Status()
	var err error
	if status < 500 {
		sealed := s.box.Seal(w.buf.Bytes(), idempotencyAAD(sc, key))
		err = s.store.SaveIdempotent(ctx, sc, key, status, sealed, requestID(c))
		if err == nil && s.crash != nil {
			s.crash(CrashAfterStore)
		}
		if err == nil {
			err = s.store.EndRequest(ctx, true)
		}
	}
	ended = true
	c.Writer = w.ResponseWriter
	if status >= 500 || err != nil {
		if rerr := s.store.EndRequest(ctx, false); rerr != nil {
			s.log.ErrorContext(ctx, "idempotent request not rolled back", append(logAttrs(c), "error", rerr)...)
		}
	}
	if err != nil {
		// Nothing was committed: answer 500, never the response that
		// could not be stored with its change.
		s.writeError(c, fmt.Errorf("idempotent request: %w", err))
		return
	}
	if s.crash != nil && status < 500 {
		s.crash(CrashAfterCommit)
	}
	w.ResponseWriter.WriteHeader(status)
	w.ResponseWriter.Write(w.buf.Bytes()) //nolint:errcheck // the client may have gone; the outcome is stored
}

// idempotencyAAD binds a sealed response to its merchant, mode and key.
func idempotencyAAD(sc payments.Scope, key string) []byte {
	b := make([]byte, 0, len("idempotency\x00\x00false\x00")+len(sc.MerchantID)+len(key))
	b = append(b, "idempotency\x00"...)
	b = append(b, sc.MerchantID...)
	b = append(b, 0)
	b = strconv.AppendBool(b, sc.Live)
	b = append(b, 0)
	return append(b, key...)
}

// requestHash identifies a request by method, path and body; JSON bodies
// are compacted so whitespace alone does not make two requests differ.
func requestHash(method, path string, body []byte) []byte {
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, path)
	h.Write(body)
	return h.Sum(nil)
}

// captureWriter holds the response back: the body is kept, not sent, until
// runOwned knows whether the transaction that stores it committed. Headers
// go to the real writer's header map, to be sent with the body.
type captureWriter struct {
	gin.ResponseWriter
	status int
	wrote  bool
	buf    bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	if code > 0 && !w.wrote {
		w.status = code
	}
}

func (w *captureWriter) WriteHeaderNow() { w.wrote = true }

func (w *captureWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.buf.Write(b)
}

func (w *captureWriter) WriteString(s string) (int, error) {
	w.wrote = true
	return w.buf.WriteString(s)
}

func (w *captureWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *captureWriter) Size() int {
	if !w.wrote {
		return -1
	}
	return w.buf.Len()
}

func (w *captureWriter) Written() bool { return w.wrote }

// Flush sends nothing: the response waits for the commit.
func (w *captureWriter) Flush() {}
