package payments

import (
	"context"
	"errors"
	"slices"
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
	EventCreated time.Time // the event's created_at: the partition of its rows
	Payload      []byte
	EndpointID   string
	URL          string
	SecretSealed []byte
	EndpointOK   bool // enabled and not deleted
	// PreviousSecretSealed is the secret a rotation replaced, during its
	// grace period (nil otherwise): deliveries are signed with both.
	PreviousSecretSealed []byte
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

// DeliveryRecord is one delivery as the delivery log shows it.
type DeliveryRecord struct {
	ID               string
	Live             bool
	EndpointID       string
	EventID          string
	EventType        string
	Status           string
	Attempts         int
	LastHTTPStatus   *int
	LastResponseBody *string // the start of the last attempt's response (MaxAttemptResponse)
	LastError        *string
	NextAttemptAt    time.Time // meaningful while pending
	Created          time.Time
	DeliveredAt      *time.Time
	// Log is every attempt, oldest first; read only for one delivery.
	Log []AttemptRecord
}

// AttemptRecord is one attempt of a delivery, as kept in webhook_attempts.
type AttemptRecord struct {
	At           time.Time
	HTTPStatus   *int
	ResponseBody string
	Error        *string
}

// DeliveryObject is a delivery as the API returns it.
type DeliveryObject struct {
	ID               string  `json:"id"`
	Endpoint         string  `json:"endpoint"`
	Event            string  `json:"event"`
	EventType        string  `json:"event_type"`
	Status           string  `json:"status"`
	Attempts         int     `json:"attempts"`
	LastHTTPStatus   *int    `json:"last_http_status"`
	LastResponseBody *string `json:"last_response_body"`
	LastError        *string `json:"last_error"`
	// NextRetryAt is when the next attempt is due, while pending; null
	// once it succeeded or failed.
	NextRetryAt *int64 `json:"next_retry_at"`
	Created     int64  `json:"created"`
	DeliveredAt *int64 `json:"delivered_at"`
	Livemode    bool   `json:"livemode"`
	// AttemptLog is every attempt, oldest first: only on the one-delivery
	// read (GET …/deliveries/{delivery}).
	AttemptLog *[]AttemptObject `json:"attempt_log,omitempty"`
}

// AttemptObject is one attempt as the API returns it.
type AttemptObject struct {
	Created      int64   `json:"created"`
	HTTPStatus   *int    `json:"http_status"`
	ResponseBody string  `json:"response_body"`
	Error        *string `json:"error"`
}

// Object returns the delivery's API shape; its attempt log when it was read.
func (d DeliveryRecord) Object() DeliveryObject {
	o := DeliveryObject{ID: d.ID, Endpoint: d.EndpointID, Event: d.EventID, EventType: d.EventType, Status: d.Status,
		Attempts: d.Attempts, LastHTTPStatus: d.LastHTTPStatus, LastResponseBody: d.LastResponseBody, LastError: d.LastError,
		Created: d.Created.Unix(), DeliveredAt: unixPtr(d.DeliveredAt), Livemode: d.Live}
	if d.Status == DeliveryPending {
		// Round up: asynq runs a retry within the second after its time.
		next := d.NextAttemptAt.Add(time.Second - 1).Unix()
		o.NextRetryAt = &next
	}
	if d.Log != nil {
		log := make([]AttemptObject, 0, len(d.Log))
		for _, a := range d.Log {
			log = append(log, AttemptObject{Created: a.At.Unix(), HTTPStatus: a.HTTPStatus, ResponseBody: a.ResponseBody, Error: a.Error})
		}
		o.AttemptLog = &log
	}
	return o
}

// DeliveryFilter is the query of an endpoint's delivery log: a page, newest
// first, optionally only the deliveries of one status.
type DeliveryFilter struct {
	ListParams
	Status string // "" for all
}

// ParseDeliveryStatus reads the status filter of the delivery log.
// Codes: validation_error naming status.
func ParseDeliveryStatus(v string) (string, error) {
	switch v {
	case DeliveryPending, DeliverySucceeded, DeliveryFailed:
		return v, nil
	}
	return "", Invalid("status", "must be %q, %q or %q", DeliveryPending, DeliverySucceeded, DeliveryFailed)
}

// EndpointDeliveries returns a page of an endpoint's delivery log, newest
// first. Codes: endpoint_not_found, validation_error (unknown
// starting_after).
func (s *Service) EndpointDeliveries(ctx context.Context, sc Scope, endpointID string, f DeliveryFilter) (Page[DeliveryRecord], error) {
	return s.store.EndpointDeliveries(ctx, sc, endpointID, f)
}

// EndpointDelivery returns one delivery of an endpoint with every attempt.
// Codes: endpoint_not_found (for the endpoint or the delivery).
func (s *Service) EndpointDelivery(ctx context.Context, sc Scope, endpointID, deliveryID string) (DeliveryObject, error) {
	d, err := s.store.EndpointDelivery(ctx, sc, endpointID, deliveryID)
	if err != nil {
		return DeliveryObject{}, err
	}
	return d.Object(), nil
}

// ResendInput is the body of POST /v1/events/{id}/resend.
type ResendInput struct {
	Endpoint *string `json:"endpoint"`
}

// ResendEvent makes a new delivery of an event (same event id, same
// payload) to one endpoint, through the same queue and retries as the
// first; its signatures are made when it is sent. The endpoint must be
// enabled and subscribed to the event's type. This is how a merchant
// recovers events an endpoint missed (down past the retries, or disabled).
// An event pruned by retention meanwhile is not found; while the new
// delivery is pending the event is kept. Codes: endpoint_not_found (event
// or endpoint), validation_error.
func (s *Service) ResendEvent(ctx context.Context, sc Scope, eventID string, in ResendInput) (DeliveryObject, error) {
	if in.Endpoint == nil || *in.Endpoint == "" {
		return DeliveryObject{}, Invalid("endpoint", "is required")
	}
	d, err := s.store.ResendEvent(ctx, sc, eventID, *in.Endpoint, s.clock.Base(), func(eventType string, e Endpoint) error {
		if e.Status != EndpointEnabled {
			return Invalid("endpoint", "%s is disabled; re-enable it (status \"enabled\") first", e.ID)
		}
		if !slices.Contains(e.Events, "*") && !slices.Contains(e.Events, eventType) {
			return Invalid("endpoint", "%s does not receive %s events", e.ID, eventType)
		}
		return nil
	})
	if err != nil {
		return DeliveryObject{}, err
	}
	return d.Object(), nil
}
