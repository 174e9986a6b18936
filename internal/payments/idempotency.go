package payments

import "errors"

// StoredResponse is the first response to a POST with an Idempotency-Key,
// as stored under the key (the body sealed), for a repeat to replay.
type StoredResponse struct {
	RequestHash []byte // of the first request's method, path and body
	Status      int
	Body        []byte
	RequestID   string
}

// ErrKeyInFlight is a repeat of a POST whose first request with the same
// Idempotency-Key is still running after the repeat waited for it.
var ErrKeyInFlight = errors.New("a request with this idempotency key is still in flight")
