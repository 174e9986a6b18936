// Package payments is the domain: its types, rules, error codes and the
// Service that the API, the CLI and the worker call. It knows nothing of HTTP,
// SQL, Redis or a particular card processor.
package payments

import (
	"context"
	"time"

	"paysvc/internal/processor"
)

// Store is the persistence the Service needs. Every method that touches
// merchant data takes the Scope and filters on it; not-found results are
// returned as the resource's *Error.
type Store interface {
	CreateMerchant(ctx context.Context, m Merchant) error
	UnsuspendMerchant(ctx context.Context, id string, now time.Time) (Merchant, error)
	CreateKey(ctx context.Context, k APIKey, hash []byte, check func(KeyCounts) error) error
	RevokeKey(ctx context.Context, id string, now time.Time) (APIKey, error)
	// KeyByHash reads a key with its merchant's suspension and the offset
	// of its scope's sandbox clock.
	KeyByHash(ctx context.Context, hash []byte) (KeyAuth, error)
	ClockOffsets
	// AdvanceClock moves the scope's sandbox clock forward and returns its
	// new offset from real time.
	AdvanceClock(ctx context.Context, sc Scope, by time.Duration) (time.Duration, error)
	// ClockTally counts the scope's rows that advance-clock reports on.
	ClockTally(ctx context.Context, sc Scope) (ClockTally, error)
	// RecordViolation stores a content violation and suspends the merchant
	// when, counting it, at least threshold happened since `since`.
	RecordViolation(ctx context.Context, sc Scope, field string, now, since time.Time, threshold int) (suspended bool, err error)

	CreateProduct(ctx context.Context, sc Scope, p Product) error
	Product(ctx context.Context, sc Scope, id string) (Product, error)
	Products(ctx context.Context, sc Scope, lp ListParams) (Page[Product], error)
	// UpdateProduct runs fn on the locked product and saves it with fn's
	// effects; a DefaultPrice with a new id is inserted as a new price.
	UpdateProduct(ctx context.Context, sc Scope, id string, fn func(*Product) (Effects, error)) (Product, error)

	CreateCustomer(ctx context.Context, sc Scope, c Customer) error
	Customer(ctx context.Context, sc Scope, id string) (Customer, error)
	Customers(ctx context.Context, sc Scope, lp ListParams) (Page[Customer], error)
	// UpdateCustomer runs fn on the locked customer and saves it with fn's effects.
	UpdateCustomer(ctx context.Context, sc Scope, id string, fn func(*Customer) (Effects, error)) (Customer, error)
	DeleteCustomer(ctx context.Context, sc Scope, id string, now time.Time) error

	MerchantPlan(ctx context.Context, merchantID string) (Plan, error)
	// PriceForSale returns an active price of an active product.
	PriceForSale(ctx context.Context, sc Scope, priceID string) (SaleablePrice, error)
	CreateSession(ctx context.Context, sc Scope, cs CheckoutSession) error
	Session(ctx context.Context, sc Scope, id string) (CheckoutSession, error)
	// SessionByID is the one unscoped read, for the public hosted page.
	SessionByID(ctx context.Context, id string) (CheckoutSession, error)
	// PayCheckout locks the session and its payment (zero when it has none
	// yet), runs fn and saves both with fn's events, in one transaction.
	PayCheckout(ctx context.Context, sessionID string, fn func(sc Scope, plan Plan, cs *CheckoutSession, pi *PaymentIntent) (Effects, error)) (CheckoutSession, error)
	// ExpireSessions runs fn on open sessions whose expiry has come on
	// their scope's clock (now, the clock's base, plus the scope's sandbox
	// offset), passing fn that time, and saves them with fn's events.
	ExpireSessions(ctx context.Context, now time.Time, limit int, fn func(cs *CheckoutSession, now time.Time) (Effects, error)) (int, error)

	CreateIntent(ctx context.Context, sc Scope, pi PaymentIntent) error
	// UpdateIntentByID locks a payment found by id alone (the sandbox's
	// confirm endpoint has no API key), runs fn and saves it with fn's events.
	UpdateIntentByID(ctx context.Context, id string, fn func(sc Scope, plan Plan, pi *PaymentIntent) (Effects, error)) (PaymentIntent, error)
	Payments(ctx context.Context, sc Scope, lp ListParams) (Page[PaymentIntent], error)
	// IntentByID reads a payment by id alone, with its scope.
	IntentByID(ctx context.Context, id string) (Scope, PaymentIntent, error)

	// CreateRefund locks the payment ref names (payment_not_found unless it
	// is the scope's and succeeded), runs fn, and inserts the refund fn
	// fills in, with fn's effects and its amount reserved from the balance
	// of its currency:
	// insufficient_balance when the available amount cannot cover it,
	// balance_verification_failed when the balance cannot be read. A refund
	// already made under ref.IdempotencyKey is returned instead.
	CreateRefund(ctx context.Context, sc Scope, ref PaymentRef, fn func(pi PaymentIntent, r *Refund) (Effects, error)) (Refund, error)
	Refund(ctx context.Context, sc Scope, id string) (Refund, error)
	// FinishRefund locks the refund and its payment, runs fn and saves both
	// with fn's effects.
	FinishRefund(ctx context.Context, sc Scope, id string, fn func(r *Refund, pi *PaymentIntent) (Effects, error)) (Refund, error)
	// Payout locks the balance of currency (the scope's only one when
	// empty), runs fn and writes its effects; it returns what fn's ledger
	// entries take out of the balance.
	Payout(ctx context.Context, sc Scope, currency string, fn func(Balance) (Effects, error)) (Money, error)
	Balances(ctx context.Context, sc Scope) ([]Balance, error)

	Dispute(ctx context.Context, sc Scope, id string) (Dispute, error)
	Disputes(ctx context.Context, sc Scope, lp ListParams) (Page[Dispute], error)
	UpdateDispute(ctx context.Context, sc Scope, id string, fn func(d *Dispute) (Effects, error)) (Dispute, error)
	// RecordEvidenceSent locks the dispute, marks its evidence sent, runs fn
	// and saves it with fn's effects.
	RecordEvidenceSent(ctx context.Context, sc Scope, id string, fn func(d *Dispute) (Effects, error)) (Dispute, error)
	// CloseOverdueDisputes runs fn on disputes needing a response whose
	// evidence was due before their scope's time (now, the clock's base,
	// plus the scope's sandbox offset), passing fn that time, and saves them
	// with fn's effects.
	CloseOverdueDisputes(ctx context.Context, now time.Time, limit int, fn func(d *Dispute, now time.Time) (Effects, error)) (int, error)
	// ProcessorEvent reads a stored processor event and whether it was
	// applied; one that is not the scope's reads as applied (nothing to do).
	ProcessorEvent(ctx context.Context, sc Scope, id string) (ev ProcessorEvent, applied bool, err error)
	// OpenDispute locks the payment, runs fn, inserts the dispute fn
	// returns (if any) and saves the payment with fn's effects.
	OpenDispute(ctx context.Context, sc Scope, paymentID string, fn func(pi *PaymentIntent) (*Dispute, Effects)) error
	// MarkProcessorEvent marks a stored event applied with no other change.
	MarkProcessorEvent(ctx context.Context, sc Scope, ev ProcessorEvent) error
	// ReceiveProcessorEvent stores an event for a worker to apply, with
	// its job; one whose ExternalID was received before is not stored
	// again (false).
	ReceiveProcessorEvent(ctx context.Context, sc Scope, ev ProcessorEvent) (bool, error)

	// CreateEndpoint inserts an endpoint unless the scope has max already.
	CreateEndpoint(ctx context.Context, sc Scope, e Endpoint, sealedSecret []byte, max int) error
	Endpoints(ctx context.Context, sc Scope) ([]Endpoint, error)
	// Endpoint is one of the scope's endpoints (endpoint_not_found otherwise).
	Endpoint(ctx context.Context, sc Scope, id string) (Endpoint, error)
	// UpdateEndpoint locks the endpoint, runs fn and saves it; disabling
	// it fails its pending deliveries.
	UpdateEndpoint(ctx context.Context, sc Scope, id string, fn func(*Endpoint) error) (Endpoint, error)
	// RotateEndpointSecret makes sealed the endpoint's secret and keeps
	// the one it replaces signing for grace (wall time).
	RotateEndpointSecret(ctx context.Context, sc Scope, id string, sealed []byte, grace time.Duration) (Endpoint, error)
	// DeleteEndpoint marks it deleted and fails its pending deliveries.
	DeleteEndpoint(ctx context.Context, sc Scope, id string, now time.Time) error
	// EndpointDeliveries is a page of an endpoint's deliveries, newest first.
	EndpointDeliveries(ctx context.Context, sc Scope, endpointID string, f DeliveryFilter) (Page[DeliveryRecord], error)
	// EndpointDelivery is one delivery of an endpoint with its attempts.
	EndpointDelivery(ctx context.Context, sc Scope, endpointID, deliveryID string) (DeliveryRecord, error)
	// ResendEvent locks the event and the endpoint, runs check and inserts
	// a pending delivery of the event to the endpoint, enqueued after
	// commit.
	ResendEvent(ctx context.Context, sc Scope, eventID, endpointID string, now time.Time, check func(eventType string, e Endpoint) error) (DeliveryRecord, error)

	// EventPage is a page of the scope's events, newest first, filtered.
	EventPage(ctx context.Context, sc Scope, f EventFilter) (Page[StoredEvent], error)
	// Event is one of the scope's events (endpoint_not_found otherwise).
	Event(ctx context.Context, sc Scope, id string) (StoredEvent, error)

	SubscriptionStore
	SubscriptionRecords
	DashboardStore
	SubscriptionCharges
	QuantityStore
	PortalSessions
}

// Service holds the use cases.
type Service struct {
	store      Store
	blocklist  *Blocklist
	clock      *Clock
	proc       processor.Processor
	sessionTTL time.Duration
	portal     portal
	sealer     Sealer
	auth       *authCache
	// checkEndpoint vets a webhook URL at registration (SSRF); nil allows all.
	checkEndpoint func(ctx context.Context, rawURL string) error
	// callsInTx are the slots of processor calls made inside a
	// transaction (WithProcessorCallsInTx); nil: no bound.
	callsInTx chan struct{}
}

// Option configures a Service.
type Option func(*Service)

// WithProcessor sets the card processor.
func WithProcessor(p processor.Processor) Option { return func(s *Service) { s.proc = p } }

// WithSessionTTL sets how long checkout sessions stay open (default 24h).
func WithSessionTTL(d time.Duration) Option { return func(s *Service) { s.sessionTTL = d } }

// WithSandboxClocks gives every merchant and mode its own clock, real time
// plus the offset the store keeps for it (see Clock); for the sandbox
// processor only.
func WithSandboxClocks() Option { return func(s *Service) { s.clock.offsets = s.store } }

// NewService returns a Service on store, screening content with blocklist.
// base is the time of its Clock (time.Now when nil; tests inject theirs).
func NewService(store Store, blocklist *Blocklist, base func() time.Time, opts ...Option) *Service {
	s := &Service{store: store, blocklist: blocklist, clock: NewClock(base, nil), sessionTTL: 24 * time.Hour, auth: &authCache{ttl: time.Second}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Clock returns the Service's clock, for the hosted pages, the worker and
// the scheduler: one clock per process.
func (s *Service) Clock() *Clock { return s.clock }

// Now returns the scope's time on the Service's clock.
func (s *Service) Now(ctx context.Context, sc Scope) time.Time { return s.clock.Now(ctx, sc) }

// ListParams are the cursor parameters of a paged list.
type ListParams struct {
	Limit         int
	StartingAfter string
}

// DefaultLimit and MaxLimit bound a page.
const (
	DefaultLimit = 10
	MaxLimit     = 100
)

// Page is one page of a list, newest first.
type Page[T any] struct {
	Data    []T
	HasMore bool
}

// List is a page as the API returns it: the List shape of the spec.
type List[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"has_more"`
}

// ListOf returns the API shape of a page, each item converted by object
// (an Object method: payments.Customer.Object).
func ListOf[S, T any](p Page[S], object func(S) T) List[T] {
	out := List[T]{Data: make([]T, 0, len(p.Data)), HasMore: p.HasMore}
	for _, item := range p.Data {
		out.Data = append(out.Data, object(item))
	}
	return out
}

// Deleted is the answer to a delete.
type Deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}
