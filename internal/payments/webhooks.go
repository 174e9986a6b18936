package payments

import (
	"context"
	"fmt"
	"net/url"
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
}

// EndpointInput is the body of POST /v1/webhook-endpoints.
type EndpointInput struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Description *string  `json:"description"`
}

// EndpointObject is an endpoint as the API returns it; Secret only on create.
type EndpointObject struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Status      string   `json:"status"`
	Description *string  `json:"description"`
	Livemode    bool     `json:"livemode"`
	Created     int64    `json:"created"`
	Secret      string   `json:"secret,omitempty"`
}

// Object returns the endpoint's API shape (without its secret).
func (e Endpoint) Object() EndpointObject {
	return EndpointObject{ID: e.ID, URL: e.URL, Events: e.Events, Status: e.Status, Description: e.Description,
		Livemode: e.Live, Created: e.Created.Unix()}
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
	u, err := url.Parse(*in.URL)
	if err != nil || u.Host == "" {
		return Invalid("url", "must be an absolute URL")
	}
	if u.Scheme != "https" {
		return Errorf(WebhookURLMustBeHTTPS, "Webhook endpoint URLs must use https://.")
	}
	if utf8.RuneCountInString(*in.URL) > maxEndpointURL {
		return Invalid("url", "must be at most %d characters", maxEndpointURL)
	}
	if in.Events == nil {
		in.Events = []string{"*"}
	}
	if len(in.Events) == 0 {
		return Invalid("events", "must list at least one event type, or \"*\"")
	}
	seen := map[string]bool{}
	for i, ev := range in.Events {
		if ev != "*" && !knownEvent(ev) {
			return Invalid(fmt.Sprintf("events[%d]", i), "%q is not an event type", ev)
		}
		if seen[ev] {
			return Invalid(fmt.Sprintf("events[%d]", i), "%q is listed twice", ev)
		}
		seen[ev] = true
	}
	if seen["*"] && len(in.Events) > 1 {
		return Invalid("events", "\"*\" already subscribes to every event type")
	}
	return checkText("description", in.Description, false)
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
	if s.checkEndpoint != nil {
		if err := s.checkEndpoint(ctx, *in.URL); err != nil {
			return EndpointObject{}, Invalid("url", "is not allowed: %v", strings.TrimPrefix(err.Error(), "webhook: "))
		}
	}
	e := Endpoint{ID: NewID("we_"), Live: sc.Live, URL: *in.URL, Events: in.Events, Description: in.Description,
		Status: EndpointEnabled, Created: s.clock.Now(ctx, sc)}
	secret := "whsec_" + randomBase62(32)
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
