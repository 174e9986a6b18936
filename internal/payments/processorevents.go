package payments

import (
	"context"
	"errors"
	"time"
)

// ProcessorEvent is something the processor reported: a charge's outcome, a
// checkout's completion, a dispute. Every outcome reaches the domain this
// way, whichever processor reports it: the sandbox's pages hand their events
// to RecordProcessorEvent, which applies them at once because the page must
// answer with the result; events stored for later (a dispute that follows a
// charge, or an inbound processor webhook) are applied by a worker through
// ApplyProcessorEvent. Each type is applied by one function
// (processorAppliers), and an event is applied once: it is marked applied
// in the transaction of its change, and its ExternalID is unique.
type ProcessorEvent struct {
	ID              string // our pev_ id
	ExternalID      string // the processor's id of the event: a redelivery is dropped
	Type            string
	PaymentIntentID string // the payment it is about, when known
	Data            ProcessorEventData
	Created         time.Time
}

// ProcessorEventData is what an event reports; each type uses the fields
// its applier names. Stored as JSON.
type ProcessorEventData struct {
	SessionID   string           `json:"checkout_session,omitempty"`
	CardLast4   string           `json:"card_last4,omitempty"`
	DeclineCode string           `json:"decline_code,omitempty"`
	Reason      string           `json:"reason,omitempty"` // of a dispute
	RefundID    string           `json:"refund,omitempty"`
	Status      string           `json:"status,omitempty"` // a refund's or a closed dispute's
	Email       string           `json:"email,omitempty"`
	Name        string           `json:"name,omitempty"`
	Shipping    *ShippingDetails `json:"shipping,omitempty"`
	Billing     *Address         `json:"billing,omitempty"`
	// Card is the card the processor saved for later charges (a
	// subscription's checkout), never its number.
	Card *SavedCard `json:"card,omitempty"`
	// Subscription is the processor's subscription, for a processor that
	// bills subscriptions itself (subscription_billing.go): its whole
	// state, or for a subscription checkout's completion its id alone.
	Subscription *ProcessorSubscription `json:"subscription,omitempty"`
	// Invoice is an invoice of the processor's subscription.
	Invoice *ProcessorInvoice `json:"invoice,omitempty"`
}

// Processor event types.
const (
	// ProcessorCheckoutCompleted: a hosted checkout session was paid
	// (Data: SessionID, the customer's details, CardLast4).
	ProcessorCheckoutCompleted = "checkout.completed"
	// ProcessorCheckoutFailed: a card was declined on a hosted checkout page
	// (Data: SessionID, the customer's details, CardLast4, DeclineCode).
	ProcessorCheckoutFailed = "checkout.payment_failed"
	// ProcessorChargeSucceeded: an embedded payment was charged
	// (PaymentIntentID; Data: CardLast4).
	ProcessorChargeSucceeded = "charge.succeeded"
	// ProcessorChargeFailed: an embedded payment's card was declined
	// (PaymentIntentID; Data: CardLast4, DeclineCode).
	ProcessorChargeFailed = "charge.failed"
	// ProcessorDisputeCreated: the cardholder disputed a payment
	// (PaymentIntentID; Data: Reason).
	ProcessorDisputeCreated = "dispute.created"
	// ProcessorDisputeClosed: the card network decided a dispute
	// (PaymentIntentID, or Data.SessionID for a checkout's payment;
	// Data: Status won or lost).
	ProcessorDisputeClosed = "dispute.closed"
	// ProcessorRefundUpdated: a refund the processor answered pending was
	// settled (Data: RefundID, Status succeeded or failed, DeclineCode the
	// failure reason).
	ProcessorRefundUpdated = "refund.updated"
)

// ErrEventApplied is returned by a store when the processor event a change
// applies was applied already (or its ExternalID was received before): the
// change is rolled back and the event is a no-op.
var ErrEventApplied = errors.New("processor event applied already")

// application is one processor event being applied: what its applier needs
// besides the event.
type application struct {
	ev ProcessorEvent
	// sc is the event's scope when it was stored with one (worker); nil
	// when the processor's page reports it, and the object's scope is used.
	sc    *Scope
	later []ProcessorEvent
}

// effects adds to a change's effects what applying the event writes: the
// event, marked applied, and the later events (about the same payment
// unless they name one), stored for the worker. now is the time of the
// change's scope: events not dated by the processor are dated with it.
func (a *application) effects(eff Effects, paymentID string, now time.Time) Effects {
	ev := a.ev
	if ev.Created.IsZero() {
		ev.Created = now
	}
	eff.Applied = &ev
	for _, l := range a.later {
		if l.PaymentIntentID == "" {
			l.PaymentIntentID = paymentID
		}
		if l.Created.IsZero() {
			l.Created = now
		}
		eff.ProcessorEvents = append(eff.ProcessorEvents, l)
	}
	return eff
}

// inScope refuses an object outside the scope of a stored event.
func (a *application) inScope(sc Scope) bool { return a.sc == nil || *a.sc == sc }

// processorAppliers is the one function per processor event type. A type
// missing here is stored and marked applied with no other effect.
var processorAppliers = map[string]func(s *Service, ctx context.Context, a *application) error{
	ProcessorCheckoutCompleted: (*Service).applyCheckoutCompleted,
	ProcessorCheckoutFailed:    (*Service).applyCheckoutFailed,
	ProcessorChargeSucceeded:   (*Service).applyChargeSucceeded,
	ProcessorChargeFailed:      (*Service).applyChargeFailed,
	ProcessorDisputeCreated:    (*Service).applyDisputeCreated,
	ProcessorDisputeClosed:     (*Service).applyDisputeClosed,
	ProcessorRefundUpdated:     (*Service).applyRefundUpdated,
}

func (s *Service) apply(ctx context.Context, a *application) error {
	fn, ok := processorAppliers[a.ev.Type]
	if !ok {
		if a.sc == nil {
			return Errorf(ValidationError, "unknown processor event type %q", a.ev.Type)
		}
		fn = (*Service).applyUnknown
	}
	err := fn(s, ctx, a)
	if errors.Is(err, ErrEventApplied) {
		return nil
	}
	if a.sc != nil && isSettled(err) {
		// A stored event (a processor's webhook) about something already
		// in its end state: Stripe redelivers and reorders events, so a
		// late payment_failed after the payment succeeded, or a second
		// completion of a paid session, is recorded and changes nothing.
		return s.store.MarkProcessorEvent(ctx, *a.sc, a.ev)
	}
	return err
}

// RecordProcessorEvent records an event the processor reports while its
// page waits, and applies it in the same transaction, so the page can answer
// with the result. later are events the processor reports after it about the
// same payment (the sandbox's dispute card): stored in that transaction and
// applied by a worker. The applier's errors (ErrSessionClosed,
// ErrAlreadyPaid, payment_not_found …) leave nothing recorded. An event whose
// ExternalID was received before is a no-op.
func (s *Service) RecordProcessorEvent(ctx context.Context, ev ProcessorEvent, later ...ProcessorEvent) error {
	if ev.ID == "" {
		ev.ID = NewID("pev_")
	}
	for i := range later {
		if later[i].ID == "" {
			later[i].ID = NewID("pev_")
		}
	}
	return s.apply(ctx, &application{ev: ev, later: later})
}

// ReceiveProcessorEvent stores an event a processor's webhook reported
// (Stripe's) for a worker to apply, and returns: the webhook is answered at
// once, and the change happens in the worker through ApplyProcessorEvent,
// as the sandbox's later events do. An event whose ExternalID was received
// before is dropped.
func (s *Service) ReceiveProcessorEvent(ctx context.Context, sc Scope, ev ProcessorEvent) error {
	if ev.ID == "" {
		ev.ID = NewID("pev_")
	}
	if ev.ExternalID == "" {
		return Errorf(ValidationError, "a received processor event needs the processor's event id")
	}
	if ev.Created.IsZero() {
		ev.Created = s.clock.Now(ctx, sc)
	}
	_, err := s.store.ReceiveProcessorEvent(ctx, sc, ev)
	return err
}

// ApplyProcessorEvent applies a stored processor event once; an event
// applied already is a no-op.
func (s *Service) ApplyProcessorEvent(ctx context.Context, sc Scope, id string) error {
	ev, applied, err := s.store.ProcessorEvent(ctx, sc, id)
	if err != nil || applied {
		return err
	}
	return s.apply(ctx, &application{ev: ev, sc: &sc})
}

// isSettled is an applier's refusal because its object is past the change:
// paid already, or a session no longer open, or gone.
func isSettled(err error) bool {
	var closed ErrSessionClosed
	var pe *Error
	return errors.Is(err, ErrAlreadyPaid) || errors.As(err, &closed) ||
		(errors.As(err, &pe) && (pe.Code == PaymentNotFound || pe.Code == SessionNotFound))
}

// ErrNotYet is an event that arrived before the one it follows (a dispute
// closed before it was opened here): the worker retries it with backoff
// until the first is applied.
var ErrNotYet = errors.New("processor event arrived before the event it follows; retry later")

// applyUnknown marks a stored event of a type this version does not act on
// applied.
func (s *Service) applyUnknown(ctx context.Context, a *application) error {
	return s.store.MarkProcessorEvent(ctx, *a.sc, a.ev)
}
