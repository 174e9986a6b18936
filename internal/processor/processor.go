// Package processor declares what the service needs from a card processor.
// Implementations: sandbox (the built-in emulator) and stripe. It
// speaks the service's own terms: ids are ours, amounts are minor units, and
// no adapter type leaks out.
package processor

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Account identifies the merchant and mode a call acts for.
type Account struct {
	MerchantID string
	Live       bool
}

// CheckoutSession is what a processor needs to host a checkout page.
type CheckoutSession struct {
	ID            string // our cs_ id, also the idempotency key
	Currency      string
	AmountTotal   int64 // what the customer pays: the lines, plus fees passed on
	Lines         []CheckoutLine
	CustomerEmail string // prefilled on the page when known
	SuccessURL    string
	CancelURL     string
	ExpiresAt     time.Time
	// Subscription is a subscription's first checkout (its line recurs).
	Subscription bool
}

// CheckoutLine is a line of a checkout page.
type CheckoutLine struct {
	Name       string
	UnitAmount int64
	Quantity   int64
}

// HostedCheckout is the processor's answer: where to send the customer.
type HostedCheckout struct {
	URL string
}

// PaymentIntent is what a processor needs to take an embedded payment.
type PaymentIntent struct {
	ID       string // our pi_ id, also the idempotency key
	Amount   int64
	Currency string
}

// ClientValues are what the browser needs to confirm an embedded payment.
// ClientSecret is shown once to the merchant's server and never stored.
type ClientValues struct {
	ClientSecret   string
	PublishableKey string
	AccountID      string
}

// Processor is a card processor. Every method returns *Error for a failure
// the processor reported, which the API answers with 502 processor_error.
type Processor interface {
	CreateCheckoutSession(ctx context.Context, acct Account, s CheckoutSession) (HostedCheckout, error)
	CreatePaymentIntent(ctx context.Context, acct Account, pi PaymentIntent) (ClientValues, error)
	// Refund returns money from a payment. RefundRequest.ID is the
	// idempotency key: asking again for the same refund (a retry after a
	// crash) returns the first answer and moves no money twice.
	Refund(ctx context.Context, acct Account, r RefundRequest) (RefundResult, error)
	// SubmitDisputeEvidence sends a dispute's evidence; the processor may
	// decide at once (the sandbox does) or later.
	SubmitDisputeEvidence(ctx context.Context, acct Account, e DisputeEvidence) (DisputeDecision, error)
	// ChargeCard charges a card saved for later charges (a subscription's
	// renewal, dunning retry or proration), without the customer present.
	// CardCharge.Key is the idempotency key: asking again with the same key
	// (a retry after a crash) returns the first answer and moves no money
	// twice. A decline is an Outcome, not an error.
	ChargeCard(ctx context.Context, acct Account, c CardCharge) (Outcome, error)
	// Account describes the merchant's account at the processor in acct's
	// mode (GET /v1/account). Bank details are masked by the processor:
	// only the bank's name and last four digits ever cross this boundary.
	Account(ctx context.Context, acct Account) (ConnectedAccount, error)
}

// ConnectedAccount is the merchant's account at the processor: whether it
// can take charges and receive payouts, and its masked payout bank.
type ConnectedAccount struct {
	ID              string // acct_…
	ChargesEnabled  bool
	PayoutsEnabled  bool
	BankName        string // empty when no payout bank is set
	BankLast4       string
	Country         string // ISO 3166-1 alpha-2, upper case
	DefaultCurrency string // ISO 4217, lower case
}

// CardCharge is a charge of a saved card.
type CardCharge struct {
	Key        string // our charge id and attempt: the idempotency key
	CardID     string // the processor's reference of the saved card
	CustomerID string
	Amount     int64
	Currency   string
}

// RefundRequest is a refund to execute.
type RefundRequest struct {
	ID              string // our re_ id, also the idempotency key
	PaymentIntentID string
	SessionID       string // the payment's checkout session, when it has one
	Amount          int64
	Currency        string
}

// RefundResult is the processor's answer to a refund: succeeded, failed
// (FailureReason), or Pending when the processor settles it later and
// reports the outcome as a processor event (payments.ProcessorRefundUpdated).
type RefundResult struct {
	Succeeded     bool
	Pending       bool
	FailureReason string // when neither Succeeded nor Pending
}

// DisputeEvidence is a dispute's submitted evidence.
type DisputeEvidence struct {
	ID              string // our dp_ id
	PaymentIntentID string // the disputed payment
	SessionID       string // the payment's checkout session, when it has one
	Evidence        map[string]string
}

// DisputeDecision is the processor's answer to evidence: won, lost, or
// under_review while it has not decided.
type DisputeDecision struct {
	Status string
}

// IntervalChecker is implemented by processors that cannot bill every
// interval the service accepts (Stripe: at most 3 years).
// payments.Service.CheckProcessorInterval asks it.
type IntervalChecker interface {
	// SupportsInterval reports whether the processor can bill every
	// months months (or days days; one of the two is zero).
	SupportsInterval(months, days int) bool
}

// Error is a failure reported by (or on the way to) the processor.
type Error struct {
	Op          string
	Retryable   bool   // a later retry may succeed (timeouts, 5xx, rate limits)
	Code        string // the processor's code, for logs
	DeclineCode string // a card decline's reason, when the processor gave one
	RequestID   string // the processor's id of the failed request, for its support
	Err         error  // safe to log: never the processor's free text
}

func (e *Error) Error() string {
	if e.RequestID != "" {
		return fmt.Sprintf("processor %s: %s (request %s): %v", e.Op, e.Code, e.RequestID, e.Err)
	}
	return fmt.Sprintf("processor %s: %s: %v", e.Op, e.Code, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Outcome of a card charge, as the processor reports it.
type Outcome struct {
	Succeeded   bool
	DeclineCode string // card_declined, insufficient_funds, invalid_number …
	Last4       string
	// DisputeReason, set on a charge that succeeded, says the cardholder
	// disputes it (with this reason): the sandbox's dispute card. The
	// dispute is recorded with the charge, as a processor event for a
	// worker to apply. A real processor reports disputes by webhook.
	DisputeReason string
}

// ErrBadClientCredentials is a browser's confirmation whose publishable key
// or client secret does not belong to the payment.
var ErrBadClientCredentials = errors.New("invalid publishable key or client secret")
