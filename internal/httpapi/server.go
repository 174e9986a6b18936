// Package httpapi is the public REST API: the Gin engine, the edge every
// request crosses (request id, headers, body limit, auth, rate limit,
// idempotency), and thin handlers that call payments.Service.
package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"paysvc/internal/apispec"
	"paysvc/internal/clientaddr"
	"paysvc/internal/hosted"
	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
)

// APIVersion is sent in X-API-Version on every response.
const APIVersion = "2025-01-01"

// maxBody is the request body limit, counted on the bytes actually read.
const maxBody = 1 << 20

// Store is what the API needs of storage besides the Service: the one
// transaction of an idempotent POST, in which the key is claimed, the
// change is made (the store's methods called with the returned ctx join
// it) and the response is stored. postgres.Store implements it.
type Store interface {
	// BeginIdempotent opens the request's transaction and claims key in it:
	// a nil record means the claim is the caller's, and ctx carries the
	// transaction; else the key's stored response comes back and nothing
	// stays open. payments.ErrKeyInFlight: another request still holds the
	// key after wait.
	BeginIdempotent(ctx context.Context, sc payments.Scope, key string, hash []byte, now time.Time, ttl, wait time.Duration) (context.Context, *payments.StoredResponse, error)
	// SaveIdempotent writes the claimed key's response in ctx's transaction.
	SaveIdempotent(ctx context.Context, sc payments.Scope, key string, status int, body []byte, requestID string) error
	// EndRequest commits ctx's transaction or rolls it back.
	EndRequest(ctx context.Context, commit bool) error
}

// Deps are what the API needs.
type Deps struct {
	Service *payments.Service
	Store   Store // idempotency records
	Limiter *ratelimit.Limiter
	Log     *slog.Logger
	Pages   *hosted.Pages // hosted checkout and sandbox pages, when served
	Secrets *secrets.Box  // seals stored idempotent responses (they may hold a client secret)
	// StripeWebhook, with PROCESSOR=stripe, receives Stripe's webhooks at
	// POST /stripe/webhook.
	StripeWebhook StripeWebhook
	// Crash, for tests only, is called at each crash point of an idempotent
	// request (CrashAfterChange …) and may kill the process there; nil
	// costs one comparison.
	Crash func(point string)
	// UnknownKeys, when set, counts per client address the authentications
	// whose key the database does not hold, and refuses a client past its
	// budget with 429 (before reading another key for it).
	UnknownKeys *ratelimit.Strikes
	// Clients names a request's client address (nil: its peer's).
	Clients *clientaddr.Resolver
}

// StripeWebhook verifies and stores one Stripe webhook
// (stripe.Inbound): kept reports whether the event was stored for the
// worker; a bad signature is a validation_error.
type StripeWebhook interface {
	Receive(ctx context.Context, payload []byte, signature string) (kept bool, err error)
}

// Server holds the handlers' dependencies.
type Server struct {
	svc     *payments.Service
	store   Store
	limiter *ratelimit.Limiter
	log     *slog.Logger
	now     func() time.Time // idempotency records' time: base time, no merchant's
	box     *secrets.Box
	pages   *hosted.Pages
	crash   func(point string)
	wait    time.Duration // idempotencyWait; shorter in tests
	stripe  StripeWebhook
	// unknownKeys and clients: Deps.UnknownKeys and Deps.Clients.
	unknownKeys *ratelimit.Strikes
	clients     *clientaddr.Resolver
	// limitValue caches X-RateLimit-Limit's value.
	limitValue atomic.Pointer[limitValue]
}

// New returns the API's http.Handler.
func New(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Secrets == nil {
		panic("httpapi: Deps.Secrets is required")
	}
	s := &Server{svc: d.Service, store: d.Store, limiter: d.Limiter, log: d.Log, now: time.Now, box: d.Secrets, pages: d.Pages, crash: d.Crash, wait: idempotencyWait, stripe: d.StripeWebhook,
		unknownKeys: d.UnknownKeys, clients: d.Clients}
	if d.Service != nil {
		s.now = d.Service.Clock().Base
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	// Unknown paths, methods and trailing slashes all get the 404 envelope,
	// never a redirect or a 405 without a body.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = false
	r.ContextWithFallback = true

	r.Use(s.edge, s.recoverPanics, metrics, s.limitBody, s.gate)
	r.NoRoute(func(c *gin.Context) {
		s.abortWith(c, payments.EndpointNotFound, "Unrecognized request URL ("+c.Request.Method+" "+c.Request.URL.Path+").")
	})

	r.GET("/v1/openapi.yaml", func(c *gin.Context) {
		c.Data(http.StatusOK, "application/yaml", apispec.YAML)
	})

	v1 := r.Group("/v1", s.authenticate, s.rateLimit, s.idempotency)
	// read registers a GET that only reads this service's database (not
	// the processor's): it runs while the rate limiter decides
	// (rateLimitRead). A GET takes no Idempotency-Key.
	reads := r.Group("/v1", s.authenticate, s.rateLimitRead)
	read := func(path string, h handler) { reads.GET(path, s.wrap(h)) }
	v1.POST("/products", s.wrap(s.createProduct))
	read("/products", s.listProducts)
	read("/products/:id", s.getProduct)
	v1.PUT("/products/:id", s.wrap(s.updateProduct))
	v1.DELETE("/products/:id", s.wrap(s.deleteProduct))
	v1.POST("/subscription-products", s.wrap(s.createSubscriptionProduct))
	read("/subscription-products", s.listSubscriptionProducts)
	v1.POST("/subscription-sessions", s.wrap(s.createSubscriptionSession))
	read("/subscriptions", s.listSubscriptions)
	read("/subscriptions/:id", s.getSubscription)
	v1.POST("/subscriptions/:id/cancel", s.wrap(s.cancelSubscription))
	v1.POST("/subscriptions/:id/resume", s.wrap(s.resumeSubscription))
	v1.PATCH("/subscriptions/:id/quantity", s.wrap(s.changeQuantity))
	v1.POST("/subscriptions/:id/quantity/preview", s.wrap(s.previewQuantity))
	v1.POST("/subscriptions/:id/portal-session", s.wrap(s.createPortalSession))

	v1.POST("/customers", s.wrap(s.createCustomer))
	read("/customers", s.listCustomers)
	read("/customers/:id", s.getCustomer)
	v1.PUT("/customers/:id", s.wrap(s.updateCustomer))
	v1.DELETE("/customers/:id", s.wrap(s.deleteCustomer))

	v1.POST("/payment-sessions", s.wrap(s.createSession))
	read("/payment-sessions/:id", s.getSession)
	v1.POST("/payment-intents", s.wrap(s.createIntent))
	read("/test-payments", s.listTestPayments)

	v1.POST("/refunds", s.wrap(s.createRefund))
	read("/refunds/:id", s.getRefund)
	read("/balance", s.getBalance)
	v1.GET("/account", s.wrap(s.getAccount))
	read("/disputes", s.listDisputes)
	read("/disputes/:id", s.getDispute)
	v1.POST("/disputes/:id/evidence", s.wrap(s.updateEvidence))

	v1.POST("/webhook-endpoints", s.wrap(s.createEndpoint))
	read("/webhook-endpoints", s.listEndpoints)
	read("/webhook-endpoints/:id", s.getEndpoint)
	v1.POST("/webhook-endpoints/:id", s.wrap(s.updateEndpoint))
	v1.DELETE("/webhook-endpoints/:id", s.wrap(s.deleteEndpoint))
	v1.POST("/webhook-endpoints/:id/rotate-secret", s.wrap(s.rotateEndpointSecret))
	read("/webhook-endpoints/:id/deliveries", s.listEndpointDeliveries)
	read("/webhook-endpoints/:id/deliveries/:delivery", s.getEndpointDelivery)
	read("/events", s.listEvents)
	read("/events/:id", s.getEvent)
	v1.POST("/events/:id/resend", s.wrap(s.resendEvent))

	if d.StripeWebhook != nil {
		// Outside /v1: Stripe authenticates by signature, not an API key.
		r.POST("/stripe/webhook", s.wrap(s.stripeWebhook))
	}
	if d.Pages != nil {
		d.Pages.Register(r)
	}
	return r
}

// handler is what the API's handlers are: they return a payload or an error
// and never write the response themselves.
type handler func(c *gin.Context) (any, error)

// wrap writes a handler's result in the success or error envelope.
func (s *Server) wrap(h handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		data, err := h(c)
		if err != nil {
			s.writeError(c, err)
			return
		}
		writeJSON(c, http.StatusOK, successEnvelope{Success: true, Data: data, RequestID: requestID(c)})
	}
}

func writeJSON(c *gin.Context, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types reach here; a failure is a bug.
		status = http.StatusInternalServerError
		b, _ = json.Marshal(errorEnvelope{Error: errorBody{Code: payments.InternalError, Message: internalMessage}, RequestID: requestID(c)})
	}
	c.Data(status, "application/json; charset=utf-8", b)
}

// scope is the merchant and mode the authenticated key acts for.
func scope(c *gin.Context) payments.Scope {
	r := requestOf(c)
	if !r.authd {
		panic("httpapi: scope of an unauthenticated request")
	}
	return r.scope
}
