package payments

import (
	"errors"
	"strings"
	"time"
)

// Delivery statuses: pending until an attempt succeeds, or until the last
// retry fails or the endpoint goes away.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// Delivery is one event on its way to one endpoint, with what sending it
// takes: the exact bytes to sign and POST, and the endpoint's URL and
// sealed secret.
type Delivery struct {
	ID           string
	MerchantID   string
	Live         bool
	Status       string
	Attempts     int
	EventID      string
	EventType    string
	Payload      []byte
	EndpointID   string
	URL          string
	SecretSealed []byte
	EndpointOK   bool // enabled and not deleted
}

// ErrDeliveryNotFound is a delivery task whose row does not exist.
var ErrDeliveryNotFound = errors.New("no such delivery")

// DeliveryAttempt is one POST of a delivery and what came of it. Every
// attempt is kept, for the delivery log.
type DeliveryAttempt struct {
	ID           string // wha_
	At           time.Time
	HTTPStatus   int    // 0 when no response came
	ResponseBody string // the start of the response, see AttemptResponse
	Error        string // short, for operators; never a secret; empty on success
	NextAttempt  time.Time
	Final        bool // no retry follows: a failure is the delivery's last
}

// OK reports whether the attempt delivered the event.
func (a DeliveryAttempt) OK() bool { return a.Error == "" }

// MaxAttemptResponse bounds the response body kept with an attempt.
const MaxAttemptResponse = 1024

// AttemptResponse is the part of a receiver's response body kept with an
// attempt: at most MaxAttemptResponse bytes, as valid UTF-8 without NUL
// (what a text column and the delivery log can hold).
func AttemptResponse(body []byte) string {
	if len(body) > MaxAttemptResponse {
		body = body[:MaxAttemptResponse]
	}
	return strings.ReplaceAll(strings.ToValidUTF8(string(body), "\uFFFD"), "\x00", "\uFFFD")
}

// MaxConsecutiveFailures is how many failed attempts in a row, across its
// deliveries, disable an endpoint; a successful attempt starts the count
// again.
const MaxConsecutiveFailures = 10

// DisableReason is the domain's rule for disabling an endpoint after a
// failed attempt a, its run of failed attempts now numbering
// consecutiveFailures: DisabledGone at once when the receiver answered 410
// Gone (it says the URL will never work again), DisabledFailures after
// MaxConsecutiveFailures in a row, else "" (stays enabled).
func DisableReason(a DeliveryAttempt, consecutiveFailures int) string {
	switch {
	case a.HTTPStatus == 410:
		return DisabledGone
	case consecutiveFailures >= MaxConsecutiveFailures:
		return DisabledFailures
	}
	return ""
}
