// Package payments is the domain: its types, rules, error codes and the
// Service that the API, the CLI and the worker call. It knows nothing of HTTP,
// SQL, Redis or a particular card processor.
package payments

import (
	"context"
	"time"
)

// Store is the persistence the Service needs. Every method that touches
// merchant data takes the Scope and filters on it; not-found results are
// returned as the resource's *Error.
type Store interface {
	CreateMerchant(ctx context.Context, m Merchant) error
	UnsuspendMerchant(ctx context.Context, id string, now time.Time) (Merchant, error)
	CreateKey(ctx context.Context, k APIKey, hash []byte, check func(KeyCounts) error) error
	RevokeKey(ctx context.Context, id string, now time.Time) (APIKey, error)
	KeyByHash(ctx context.Context, hash []byte) (KeyAuth, error)
	// RecordViolation stores a content violation and suspends the merchant
	// when, counting it, at least threshold happened since `since`.
	RecordViolation(ctx context.Context, sc Scope, field string, now, since time.Time, threshold int) (suspended bool, err error)

	CreateProduct(ctx context.Context, sc Scope, p Product) error
	Product(ctx context.Context, sc Scope, id string) (Product, error)
	Products(ctx context.Context, sc Scope, lp ListParams) (Page[Product], error)
	// UpdateProduct runs fn on the locked product and saves it; a DefaultPrice
	// with a new id is inserted as a new price.
	UpdateProduct(ctx context.Context, sc Scope, id string, fn func(*Product) error) (Product, error)

	CreateCustomer(ctx context.Context, sc Scope, c Customer) error
	Customer(ctx context.Context, sc Scope, id string) (Customer, error)
	Customers(ctx context.Context, sc Scope, lp ListParams) (Page[Customer], error)
	UpdateCustomer(ctx context.Context, sc Scope, id string, fn func(*Customer) error) (Customer, error)
	DeleteCustomer(ctx context.Context, sc Scope, id string, now time.Time) error
}

// Service holds the use cases.
type Service struct {
	store     Store
	blocklist *Blocklist
	now       Clock
}

// NewService returns a Service on store, screening content with blocklist.
func NewService(store Store, blocklist *Blocklist, now Clock) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, blocklist: blocklist, now: now}
}

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

// Deleted is the answer to a delete.
type Deleted struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}
