package payments

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Event types of the spec.
const (
	EventPaymentSucceeded = "payment_intent.succeeded"
	EventPaymentFailed    = "payment_intent.payment_failed"
	EventSessionCompleted = "checkout.session.completed"
	EventSessionExpired   = "checkout.session.expired"

	EventSubscriptionCreated = "customer.subscription.created"
	EventSubscriptionUpdated = "customer.subscription.updated"
	EventSubscriptionDeleted = "customer.subscription.deleted"
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
	return Event{ID: NewTimedID("evt_", now), Type: typ, Data: data, Created: now}
}

// EventRetention is how long events are kept by default (EVENT_RETENTION).
const EventRetention = 30 * 24 * time.Hour

// PartitionChanges is what a run of partition maintenance did (retention
// by partition: internal/postgres MaintainPartitions): the partitions it
// created and those it dropped, by name.
type PartitionChanges struct {
	Created []string
	Dropped []string
}

// StoredEvent is an event as it is delivered and as GET /v1/events returns
// it: Payload is the delivered body (id, type, created, livemode, data),
// built by one SQL expression for both (internal/postgres eventPayload).
type StoredEvent struct {
	ID      string `db:"id"`
	Type    string `db:"type"`
	Payload []byte `db:"payload"`
}

// Object returns the event's API shape: the delivered payload itself.
func (e StoredEvent) Object() json.RawMessage { return json.RawMessage(e.Payload) }

// EventFilter is the query of GET /v1/events: a page, newest first, of the
// events whose type is one of Types (nil: every type) and whose created is
// within [CreatedGTE, CreatedLTE] (Unix seconds; nil: open).
type EventFilter struct {
	ListParams
	Types      []string
	CreatedGTE *int64
	CreatedLTE *int64
}

// ParseEventType reads the type filter: one event type of the spec, or a
// "*"-suffixed prefix of one ("charge.*"), and returns the event types it
// matches: nil when it matches them all ("*"). A prefix becomes its list of
// types, not a pattern, so that the store reads each type's events from an
// index in order; every event written has one of EventTypes. Codes:
// validation_error naming type.
func ParseEventType(v string) ([]string, error) {
	if p, ok := strings.CutSuffix(v, "*"); ok {
		var types []string
		for _, t := range EventTypes {
			if strings.HasPrefix(t, p) {
				types = append(types, t)
			}
		}
		switch len(types) {
		case 0:
			return nil, Invalid("type", "%q is not the prefix of an event type followed by \"*\"", v)
		case len(EventTypes):
			return nil, nil
		}
		return types, nil
	}
	if !knownEvent(v) {
		return nil, Invalid("type", "%q is not an event type (or a prefix such as \"charge.*\")", v)
	}
	return []string{v}, nil
}

// Events returns a page of the scope's events, newest first. Codes:
// validation_error (unknown starting_after).
func (s *Service) Events(ctx context.Context, sc Scope, f EventFilter) (Page[StoredEvent], error) {
	return s.store.EventPage(ctx, sc, f)
}

// Event returns one of the scope's events. Codes: endpoint_not_found — the
// spec has no code for events; decisions.md §2 says to use the nearest
// listed one, and endpoint_not_found is both the spec's code for anything
// unknown at a path and the code of the webhook objects events belong to
// (payment_not_found would wrongly say a payment is missing).
func (s *Service) Event(ctx context.Context, sc Scope, id string) (StoredEvent, error) {
	return s.store.Event(ctx, sc, id)
}
