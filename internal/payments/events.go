package payments

import "time"

// Event types of the spec.
const (
	EventPaymentSucceeded = "payment_intent.succeeded"
	EventPaymentFailed    = "payment_intent.payment_failed"
	EventSessionCompleted = "checkout.session.completed"
	EventSessionExpired   = "checkout.session.expired"
)

// Event is a change to tell the merchant about; it is written in the
// transaction of the change (transactional outbox). Data is the object as
// the API returns it, so data.id is its id and data.metadata its metadata.
type Event struct {
	ID      string
	Type    string
	Data    any
	Created time.Time
}

func newEvent(typ string, data any, now time.Time) Event {
	return Event{ID: NewID("evt_"), Type: typ, Data: data, Created: now}
}
