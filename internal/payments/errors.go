package payments

import (
	"errors"
	"fmt"
)

// Code is an error code of the API's error envelope. The HTTP status that goes
// with each code is chosen in one place, internal/httpapi/errors.go.
type Code string

// The error codes of the spec, one per row of its Errors table.
const (
	Unauthorized              Code = "unauthorized"
	KeyRevoked                Code = "key_revoked"
	KeyExpired                Code = "key_expired"
	RateLimitExceeded         Code = "rate_limit_exceeded"
	ValidationError           Code = "validation_error"
	InvalidURL                Code = "invalid_url"
	InvalidInterval           Code = "invalid_interval"
	ProductNotFound           Code = "product_not_found"
	CustomerNotFound          Code = "customer_not_found"
	SessionNotFound           Code = "session_not_found"
	PaymentNotFound           Code = "payment_not_found"
	SubscriptionNotFound      Code = "subscription_not_found"
	RefundNotAllowed          Code = "refund_not_allowed"
	AlreadyRefunded           Code = "already_refunded"
	RefundAmountTooLarge      Code = "refund_amount_too_large"
	InsufficientBalance       Code = "insufficient_balance"
	BalanceVerificationFailed Code = "balance_verification_failed"
	EndpointNotFound          Code = "endpoint_not_found"
	ProcessorError            Code = "processor_error"
	InternalError             Code = "internal_error"
	PayloadTooLarge           Code = "payload_too_large"
	ProhibitedContent         Code = "prohibited_content"
	WebhookURLMustBeHTTPS     Code = "webhook_url_must_be_https"
	KeyCreationRateExceeded   Code = "key_creation_rate_exceeded"
	MaxKeysReached            Code = "max_keys_reached"
)

// Codes lists every Code above, for the test that each has an HTTP status
// (internal/httpapi); a test of this package checks that it lists them all.
var Codes = []Code{
	Unauthorized, KeyRevoked, KeyExpired, RateLimitExceeded, ValidationError, InvalidURL, InvalidInterval,
	ProductNotFound, CustomerNotFound, SessionNotFound, PaymentNotFound, SubscriptionNotFound,
	RefundNotAllowed, AlreadyRefunded, RefundAmountTooLarge, InsufficientBalance, BalanceVerificationFailed,
	EndpointNotFound, ProcessorError, InternalError, PayloadTooLarge, ProhibitedContent, WebhookURLMustBeHTTPS,
	KeyCreationRateExceeded, MaxKeysReached,
}

// Error is a failure the client can act on: its Code and Msg are sent in the
// error envelope; Err, the cause, is only logged.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a client-safe formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Invalid returns a validation_error whose message names the field.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: ValidationError, Msg: field + " " + fmt.Sprintf(format, args...)}
}

// NotFound returns the not-found error of a resource, naming the id asked for.
func NotFound(code Code, id string) *Error {
	what := map[Code]string{
		ProductNotFound:      "product",
		CustomerNotFound:     "customer",
		SessionNotFound:      "checkout session",
		PaymentNotFound:      "payment",
		SubscriptionNotFound: "subscription",
	}[code]
	if what == "" {
		what = "object"
	}
	return &Error{Code: code, Msg: fmt.Sprintf("No such %s: '%s'", what, id)}
}

// NotFoundOf is the not-found error of an object the spec has no code of
// its own for (a refund, a dispute): payment_not_found is the nearest, as
// each is about a payment. The message names what was asked for.
func NotFoundOf(what, id string) *Error {
	return &Error{Code: PaymentNotFound, Msg: fmt.Sprintf("No such %s: '%s'", what, id)}
}

// ErrorCode returns the code of err if it is (or wraps) an *Error, else "".
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
