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

	"paysvc/internal/payments"
)

// Context keys set by the edge.
const (
	ctxRequestID = "paysvc.request_id"
	ctxScope     = "paysvc.scope"
	ctxKeyID     = "paysvc.key_id"
	ctxBody      = "paysvc.body"
)

func requestID(c *gin.Context) string { return c.GetString(ctxRequestID) }

// edge gives every response its request id and the headers of the spec.
func (s *Server) edge(c *gin.Context) {
	id := uuid.NewString()
	c.Set(ctxRequestID, id)
	h := c.Writer.Header()
	h.Set("X-Request-Id", id)
	h.Set("X-API-Version", APIVersion)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
	h.Set("Cache-Control", "no-store")
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
	sc, key, err := s.svc.Authenticate(c.Request.Context(), raw)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Set(ctxScope, sc)
	c.Set(ctxKeyID, key.ID)
	c.Next()
}

// bearer returns the credentials of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110, section 11.1).
func bearer(h string) (string, bool) {
	scheme, cred, _ := strings.Cut(strings.TrimSpace(h), " ")
	cred = strings.TrimSpace(cred)
	return cred, strings.EqualFold(scheme, "Bearer") && cred != ""
}

// rateLimit spends one request of the key's hourly budget. When Redis cannot
// answer the request goes through: the limiter guards capacity, and an
// outage of it should not take the payment API down with it.
func (s *Server) rateLimit(c *gin.Context) {
	res, err := s.limiter.Allow(c.Request.Context(), c.GetString(ctxKeyID))
	if err != nil {
		s.log.WarnContext(c.Request.Context(), "rate limiter unavailable, allowing request", append(logAttrs(c), "error", err)...)
		c.Next()
		return
	}
	h := c.Writer.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(res.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
	if !res.Allowed {
		secs := int((res.RetryAfter + time.Second - 1) / time.Second)
		if secs < 1 {
			secs = 1
		}
		h.Set("Retry-After", strconv.Itoa(secs))
		s.abortWith(c, payments.RateLimitExceeded, fmt.Sprintf("Too many requests; retry after %d seconds.", secs))
		return
	}
	c.Next()
}

// Idempotency-Key handling (Stripe's behaviour).
const (
	idempotencyTTL   = payments.IdempotencyTTL
	idempotencyStale = 30 * time.Second // an in-flight claim older than this belongs to a dead process
	idempotencyWait  = idempotencyStale + 5*time.Second
)

// idempotency makes a POST with an Idempotency-Key run at most once: a repeat
// with the same body replays the first response, a concurrent repeat waits
// for it, and the same key with another body or path is a validation_error.
func (s *Server) idempotency(c *gin.Context) {
	key := c.GetHeader("Idempotency-Key")
	if c.Request.Method != http.MethodPost || key == "" {
		c.Next()
		return
	}
	body, err := readBody(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	ctx, sc := c.Request.Context(), scope(c)
	hash := requestHash(c.Request.Method, c.Request.URL.Path, body)
	deadline := s.now().Add(idempotencyWait)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 100*time.Millisecond) {
		rec, err := s.store.BeginIdempotent(ctx, sc, key, hash, s.now(), idempotencyTTL, idempotencyStale)
		if err != nil {
			s.writeError(c, err)
			return
		}
		switch {
		case rec.Owned:
			s.runOwned(c, sc, key)
			return
		case rec.RequestHash != nil && !bytes.Equal(rec.RequestHash, hash):
			s.abortWith(c, payments.ValidationError, "Keys for idempotent requests can only be used with the same parameters they were first used with.")
			return
		case rec.Status.Valid:
			body, err := s.box.Open(rec.Response, idempotencyAAD(sc, key))
			if err != nil {
				s.writeError(c, fmt.Errorf("open stored idempotent response: %w", err))
				return
			}
			h := c.Writer.Header()
			h.Set("Idempotent-Replayed", "true")
			if rec.RequestID.Valid {
				h.Set("X-Request-Id", rec.RequestID.String)
			}
			c.Data(int(rec.Status.Int32), "application/json; charset=utf-8", body)
			c.Abort()
			return
		}
		// In flight elsewhere (or just released): wait and look again.
		if s.now().After(deadline) {
			s.writeError(c, errors.New("idempotent request still in flight after wait"))
			return
		}
		select {
		case <-ctx.Done():
			c.Abort()
			return
		case <-time.After(wait):
		}
	}
}

// runOwned runs the request that owns the key and stores its response; a
// server-side failure releases the key so the client's retry runs again.
func (s *Server) runOwned(c *gin.Context, sc payments.Scope, key string) {
	w := &captureWriter{ResponseWriter: c.Writer}
	c.Writer = w
	// Store even when the client has gone: its retry must see the outcome.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 5*time.Second)
	defer cancel()
	defer func() {
		// A panic below answers 500 further up the chain; release the key
		// first, or every retry would wait on a request that is gone.
		if p := recover(); p != nil {
			if err := s.store.ReleaseIdempotent(ctx, sc, key); err != nil {
				s.log.ErrorContext(ctx, "idempotency key not released", append(logAttrs(c), "error", err)...)
			}
			panic(p)
		}
	}()
	c.Next()
	var err error
	if status := w.Status(); status >= 500 {
		err = s.store.ReleaseIdempotent(ctx, sc, key)
	} else {
		sealed := s.box.Seal(w.buf.Bytes(), idempotencyAAD(sc, key))
		err = s.store.CompleteIdempotent(ctx, sc, key, status, sealed, requestID(c))
	}
	if err != nil {
		s.log.ErrorContext(ctx, "idempotency record not saved", append(logAttrs(c), "error", err)...)
	}
}

// idempotencyAAD binds a sealed response to its merchant, mode and key.
func idempotencyAAD(sc payments.Scope, key string) []byte {
	return []byte(fmt.Sprintf("idempotency\x00%s\x00%t\x00%s", sc.MerchantID, sc.Live, key))
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

// captureWriter keeps a copy of the response body.
type captureWriter struct {
	gin.ResponseWriter
	buf bytes.Buffer
}

func (w *captureWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *captureWriter) WriteString(s string) (int, error) {
	w.buf.WriteString(s)
	return w.ResponseWriter.WriteString(s)
}
