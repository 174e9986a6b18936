package payments

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EventTypes are the event types of the spec an endpoint may subscribe to.
var EventTypes = []string{
	"payment_intent.succeeded", "payment_intent.payment_failed", "checkout.session.completed",
	"checkout.session.expired", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed",
	"customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
	"charge.refunded", "charge.dispute.created", "charge.dispute.closed",
}

// Endpoint statuses.
const (
	EndpointEnabled  = "enabled"
	EndpointDisabled = "disabled"
)

// Why an endpoint is disabled (its disabled_reason).
const (
	// DisabledFailures: MaxConsecutiveFailures failed attempts in a row.
	DisabledFailures = "consecutive_failures"
	// DisabledGone: the receiver answered 410 Gone, which says the URL is
	// gone for good; retrying it would only fail again.
	DisabledGone = "gone"
	// DisabledManual: the merchant disabled it (status "disabled").
	DisabledManual = "manual"
)

// MaxEndpoints is how many endpoints a merchant may have per mode.
const MaxEndpoints = 16

// maxEndpointURL bounds an endpoint's URL, in characters.
const maxEndpointURL = 2048

// Endpoint is a webhook endpoint. Its secret exists in clear only in the
// create response; storage keeps it sealed with SECRETS_KEY.
type Endpoint struct {
	ID          string
	Live        bool
	URL         string
	Events      []string
	Description *string
	Status      string
	Created     time.Time
	// FailureCount is the run of failed attempts since the last success
	// (consecutive_failures); re-enabling starts it again.
	FailureCount   int
	DisabledReason *string // one of the Disabled* reasons; nil while enabled
	DisabledAt     *time.Time
	LastDeliveryAt *time.Time // the last successful delivery, to the second
	// PreviousSecretExpiresAt: during a rotation's grace period, until when
	// the replaced secret still signs deliveries; nil otherwise.
	PreviousSecretExpiresAt *time.Time
}

// EndpointInput is the body of POST /v1/webhook-endpoints.
type EndpointInput struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Description *string  `json:"description"`
}

// EndpointObject is an endpoint as the API returns it; Secret only on
// create and rotate-secret.
type EndpointObject struct {
	ID             string   `json:"id"`
	URL            string   `json:"url"`
	Events         []string `json:"events"`
	Status         string   `json:"status"`
	Description    *string  `json:"description"`
	Livemode       bool     `json:"livemode"`
	Created        int64    `json:"created"`
	FailureCount   int      `json:"failure_count"`
	DisabledReason *string  `json:"disabled_reason"`
	DisabledAt     *int64   `json:"disabled_at"`
	LastDeliveryAt *int64   `json:"last_delivery_at"`
	// PreviousSecretExpiresAt is set during a rotation's grace period: until
	// then deliveries carry a signature with the previous secret as well.
	PreviousSecretExpiresAt *int64 `json:"previous_secret_expires_at"`
	Secret                  string `json:"secret,omitempty"`
}

// Object returns the endpoint's API shape (without its secret).
func (e Endpoint) Object() EndpointObject {
	return EndpointObject{ID: e.ID, URL: e.URL, Events: e.Events, Status: e.Status, Description: e.Description,
		Livemode: e.Live, Created: e.Created.Unix(), FailureCount: e.FailureCount, DisabledReason: e.DisabledReason,
		DisabledAt: unixPtr(e.DisabledAt), LastDeliveryAt: unixPtr(e.LastDeliveryAt),
		PreviousSecretExpiresAt: unixPtr(e.PreviousSecretExpiresAt)}
}

// Sealer seals secrets at rest (internal/secrets.Box).
type Sealer interface {
	Seal(plaintext, aad []byte) []byte
	Open(sealed, aad []byte) ([]byte, error)
}

// EndpointAAD binds a sealed signing secret to its endpoint.
func EndpointAAD(id string) []byte { return []byte("webhook_endpoint\x00" + id) }

// WithSecrets sets the sealer of webhook signing secrets.
func WithSecrets(s Sealer) Option { return func(sv *Service) { sv.sealer = s } }

// WithEndpointCheck sets the registration check of endpoint URLs (SSRF).
func WithEndpointCheck(fn func(ctx context.Context, rawURL string) error) Option {
	return func(sv *Service) { sv.checkEndpoint = fn }
}

func (in *EndpointInput) validate() error {
	if in.URL == nil || *in.URL == "" {
		return Invalid("url", "is required")
	}
	if err := checkEndpointURL(*in.URL); err != nil {
		return err
	}
	if in.Events == nil {
		in.Events = []string{"*"}
	}
	if err := checkEndpointEvents(in.Events); err != nil {
		return err
	}
	return checkText("description", in.Description, false)
}

// checkEndpointURL is the syntax of an endpoint URL: absolute, https, bounded.
func checkEndpointURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Invalid("url", "must be an absolute URL")
	}
	if u.Scheme != "https" {
		return Errorf(WebhookURLMustBeHTTPS, "Webhook endpoint URLs must use https://.")
	}
	if utf8.RuneCountInString(raw) > maxEndpointURL {
		return Invalid("url", "must be at most %d characters", maxEndpointURL)
	}
	if u.Hostname() == "" {
		return Invalid("url", "must name a host")
	}
	// url.Parse takes any digits as a port: one no request can reach
	// would only fail every delivery until the endpoint is disabled.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return Invalid("url", "has a port outside 1 to 65535")
		}
	}
	return nil
}

// checkEndpointEvents checks an endpoint's event types: known, each once,
// or "*" alone.
func checkEndpointEvents(events []string) error {
	if len(events) == 0 {
		return Invalid("events", "must list at least one event type, or \"*\"")
	}
	seen := map[string]bool{}
	for i, ev := range events {
		if ev != "*" && !knownEvent(ev) {
			return Invalid(fmt.Sprintf("events[%d]", i), "%q is not an event type", ev)
		}
		if seen[ev] {
			return Invalid(fmt.Sprintf("events[%d]", i), "%q is listed twice", ev)
		}
		seen[ev] = true
	}
	if seen["*"] && len(events) > 1 {
		return Invalid("events", "\"*\" already subscribes to every event type")
	}
	return nil
}

func knownEvent(t string) bool {
	for _, e := range EventTypes {
		if e == t {
			return true
		}
	}
	return false
}

// CreateEndpoint registers a webhook endpoint and returns it with its signing
// secret, shown this once. Codes: validation_error (also for a URL on a
// private network), webhook_url_must_be_https.
func (s *Service) CreateEndpoint(ctx context.Context, sc Scope, in EndpointInput) (EndpointObject, error) {
	if err := in.validate(); err != nil {
		return EndpointObject{}, err
	}
	if err := s.vetEndpointURL(ctx, *in.URL); err != nil {
		return EndpointObject{}, err
	}
	e := Endpoint{ID: NewID("we_"), Live: sc.Live, URL: *in.URL, Events: in.Events, Description: in.Description,
		Status: EndpointEnabled, Created: s.clock.Now(ctx, sc)}
	secret := newSigningSecret()
	sealed := s.sealer.Seal([]byte(secret), EndpointAAD(e.ID))
	if err := s.store.CreateEndpoint(ctx, sc, e, sealed, MaxEndpoints); err != nil {
		return EndpointObject{}, err
	}
	o := e.Object()
	o.Secret = secret
	return o, nil
}

// Endpoints lists the scope's endpoints that are not deleted.
func (s *Service) Endpoints(ctx context.Context, sc Scope) ([]EndpointObject, error) {
	es, err := s.store.Endpoints(ctx, sc)
	if err != nil {
		return nil, err
	}
	out := make([]EndpointObject, 0, len(es))
	for _, e := range es {
		out = append(out, e.Object())
	}
	return out, nil
}

// DeleteEndpoint deletes an endpoint: no more deliveries go to it, pending
// ones included. Codes: endpoint_not_found (the spec's nearest code for an
// unknown webhook endpoint).
func (s *Service) DeleteEndpoint(ctx context.Context, sc Scope, id string) (Deleted, error) {
	if err := s.store.DeleteEndpoint(ctx, sc, id, s.clock.Now(ctx, sc)); err != nil {
		return Deleted{}, err
	}
	return Deleted{ID: id, Deleted: true}, nil
}

// vetEndpointURL is the registration check of an endpoint URL (SSRF).
// Codes: validation_error naming url.
func (s *Service) vetEndpointURL(ctx context.Context, rawURL string) error {
	if s.checkEndpoint == nil {
		return nil
	}
	if err := s.checkEndpoint(ctx, rawURL); err != nil {
		return Invalid("url", "is not allowed: %v", strings.TrimPrefix(err.Error(), "webhook: "))
	}
	return nil
}

// Endpoint returns one of the scope's endpoints (without its secret).
// Codes: endpoint_not_found.
func (s *Service) Endpoint(ctx context.Context, sc Scope, id string) (EndpointObject, error) {
	e, err := s.store.Endpoint(ctx, sc, id)
	if err != nil {
		return EndpointObject{}, err
	}
	return e.Object(), nil
}

// EndpointUpdate is the body of POST /v1/webhook-endpoints/{id}: every
// field optional; an absent field is left as it is.
type EndpointUpdate struct {
	URL    *string  `json:"url"`
	Events []string `json:"events"`
	// Description "" clears it.
	Description *string `json:"description"`
	// Status "enabled" re-enables a disabled endpoint and starts its run of
	// failures again; "disabled" stops deliveries to it (reason "manual").
	Status *string `json:"status"`
}

func (in EndpointUpdate) validate() error {
	if in.URL != nil {
		if err := checkEndpointURL(*in.URL); err != nil {
			return err
		}
	}
	if in.Events != nil {
		if err := checkEndpointEvents(in.Events); err != nil {
			return err
		}
	}
	if err := checkText("description", in.Description, false); err != nil {
		return err
	}
	if in.Status != nil && *in.Status != EndpointEnabled && *in.Status != EndpointDisabled {
		return Invalid("status", "must be %q or %q", EndpointEnabled, EndpointDisabled)
	}
	return nil
}

// UpdateEndpoint changes an endpoint's url, events, description or status.
// Re-enabling (status "enabled" on a disabled endpoint) resets its failure
// count and clears disabled_reason; deliveries flow again for events from
// then on. Events that occurred while it was disabled got no delivery:
// the merchant finds them with GET /v1/events and sends them again with
// ResendEvent. Disabling it (status "disabled") fails its pending deliveries
// with "endpoint disabled", the policy of every disabled endpoint.
// Codes: endpoint_not_found, validation_error, webhook_url_must_be_https.
func (s *Service) UpdateEndpoint(ctx context.Context, sc Scope, id string, in EndpointUpdate) (EndpointObject, error) {
	if err := in.validate(); err != nil {
		return EndpointObject{}, err
	}
	if in.URL != nil {
		if err := s.vetEndpointURL(ctx, *in.URL); err != nil {
			return EndpointObject{}, err
		}
	}
	now := s.clock.Base() // disabled_at is real time, like the attempts that disable
	e, err := s.store.UpdateEndpoint(ctx, sc, id, func(e *Endpoint) error {
		if in.URL != nil {
			e.URL = *in.URL
		}
		if in.Events != nil {
			e.Events = in.Events
		}
		if in.Description != nil {
			e.Description = in.Description
			if *in.Description == "" {
				e.Description = nil
			}
		}
		if in.Status == nil || *in.Status == e.Status {
			return nil
		}
		e.Status = *in.Status
		if e.Status == EndpointEnabled {
			e.FailureCount, e.DisabledReason, e.DisabledAt = 0, nil, nil
			return nil
		}
		reason := DisabledManual
		e.DisabledReason, e.DisabledAt = &reason, &now
		return nil
	})
	if err != nil {
		return EndpointObject{}, err
	}
	return e.Object(), nil
}

// newSigningSecret returns a new signing secret in the Standard Webhooks
// form: whsec_ and the standard base64 of 32 random bytes, which the
// official libraries decode to the HMAC key of webhook-signature
// (webhook.StandardKey). X-Service-Signature is keyed with the whole string,
// as before. (Secrets made before were whsec_ and 32 base62 characters,
// which is valid base64 too: they keep verifying both ways.)
func newSigningSecret() string {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// Secret rotation grace period: how long deliveries are also signed with
// the replaced secret, so that receivers can switch without missing one.
const (
	DefaultRotationGrace = 24 * time.Hour
	MaxRotationGrace     = 7 * 24 * time.Hour
)

// RotateInput is the body of POST /v1/webhook-endpoints/{id}/rotate-secret.
type RotateInput struct {
	// GracePeriod in seconds, 0 to 604800 (7 days); default 86400 (24 h).
	// 0 retires the old secret at once.
	GracePeriod *int64 `json:"grace_period"`
}

// RotateEndpointSecret gives an endpoint a new signing secret and returns
// the endpoint with it, shown this once. Until the grace period ends,
// every delivery's webhook-signature carries a signature with the new and
// one with the old secret, so receivers holding either verify it;
// X-Service-Signature is made with the new secret. Rotating again during a
// grace period retires the older secret at once: only the last two are
// ever in force. Codes: endpoint_not_found, validation_error.
func (s *Service) RotateEndpointSecret(ctx context.Context, sc Scope, id string, in RotateInput) (EndpointObject, error) {
	grace := DefaultRotationGrace
	if in.GracePeriod != nil {
		if *in.GracePeriod < 0 || *in.GracePeriod > int64(MaxRotationGrace/time.Second) {
			return EndpointObject{}, Invalid("grace_period", "must be a number of seconds from 0 to %d (7 days)", int64(MaxRotationGrace/time.Second))
		}
		grace = time.Duration(*in.GracePeriod) * time.Second
	}
	secret := newSigningSecret()
	e, err := s.store.RotateEndpointSecret(ctx, sc, id, s.sealer.Seal([]byte(secret), EndpointAAD(id)), grace)
	if err != nil {
		return EndpointObject{}, err
	}
	o := e.Object()
	o.Secret = secret
	return o, nil
}
