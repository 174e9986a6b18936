package sandbox

import (
	"context"
	"strings"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

// Inbox is the domain's door for processor events and the payment lookup
// the confirm endpoint needs (payments.Service).
type Inbox interface {
	IntentForConfirm(ctx context.Context, id string) (payments.Scope, payments.PaymentIntent, error)
	RecordProcessorEvent(ctx context.Context, ev payments.ProcessorEvent, later ...payments.ProcessorEvent) error
}

// Cards is the card network behind the sandbox's hosted checkout page and
// confirm endpoint: it decides a test card's charge and reports the outcome
// as processor events, as a real processor's webhooks would, through the
// domain's one path for them. The page waits for the answer, so the event is
// applied at once; the dispute card's dispute.created follows in the same
// transaction, for a worker to apply.
type Cards struct {
	sb    *Sandbox
	inbox Inbox
}

// Cards returns the sandbox's card network reporting to inbox.
func (s *Sandbox) Cards(inbox Inbox) *Cards { return &Cards{sb: s, inbox: inbox} }

func normalize(card string) string { return strings.NewReplacer(" ", "", "-", "").Replace(card) }

// disputeReason is the dispute card's: "a fraudulent dispute opens".
const disputeReason = "fraudulent"

// later is what the network reports after a successful charge with card.
func later(card string, o processor.Outcome) []payments.ProcessorEvent {
	if !o.Succeeded || normalize(card) != CardDispute {
		return nil
	}
	return []payments.ProcessorEvent{{
		ExternalID: payments.NewID("sbevt_"), Type: payments.ProcessorDisputeCreated,
		Data: payments.ProcessorEventData{Reason: disputeReason},
	}}
}

// PayCheckout charges card for a hosted checkout session and records the
// outcome (checkout.completed or checkout.payment_failed). Errors are the
// domain's: payments.ErrSessionClosed when the session can no longer be paid.
func (c *Cards) PayCheckout(ctx context.Context, sessionID string, p payments.CheckoutPayment, card string) (processor.Outcome, error) {
	o := Charge(card)
	ev := payments.ProcessorEvent{
		ExternalID: payments.NewID("sbevt_"), Type: payments.ProcessorCheckoutCompleted,
		Data: payments.ProcessorEventData{
			SessionID: sessionID, CardLast4: o.Last4, Email: p.Email, Name: p.Name, Shipping: p.Shipping, Billing: p.Billing,
		},
	}
	if !o.Succeeded {
		ev.Type, ev.Data.DeclineCode = payments.ProcessorCheckoutFailed, o.DeclineCode
	}
	return o, c.inbox.RecordProcessorEvent(ctx, ev, later(card, o)...)
}

// ConfirmPayment confirms an embedded payment from the browser: the
// publishable key and client secret must be the payment's
// (processor.ErrBadClientCredentials, or payment_not_found), then card is
// charged and the outcome recorded (charge.succeeded or charge.failed).
// A payment that already succeeded is not charged again
// (payments.ErrAlreadyPaid).
func (c *Cards) ConfirmPayment(ctx context.Context, id, publishableKey, clientSecret, card string) (processor.Outcome, error) {
	sc, pi, err := c.inbox.IntentForConfirm(ctx, id)
	if err != nil {
		return processor.Outcome{}, err
	}
	if err := c.sb.CheckConfirm(ctx, sc, pi, publishableKey, clientSecret); err != nil {
		return processor.Outcome{}, err
	}
	o := Charge(card)
	ev := payments.ProcessorEvent{
		ExternalID: payments.NewID("sbevt_"), Type: payments.ProcessorChargeSucceeded, PaymentIntentID: pi.ID,
		Data: payments.ProcessorEventData{CardLast4: o.Last4},
	}
	if !o.Succeeded {
		ev.Type, ev.Data.DeclineCode = payments.ProcessorChargeFailed, o.DeclineCode
	}
	return o, c.inbox.RecordProcessorEvent(ctx, ev, later(card, o)...)
}

// Save decides whether a test card can be saved for later charges, and the
// behaviour every later charge of it follows (payments.CardSucceeds …). The
// cards that decline at once (4000…0002, …9995, unknown numbers) are not
// saved, with their decline code; 4000…0341 is saved, to decline later.
func Save(cardNumber string) (processor.Outcome, string) {
	o := Charge(cardNumber)
	switch normalize(cardNumber) {
	case CardSuccess:
		return o, payments.CardSucceeds
	case CardDispute:
		return o, payments.CardDisputes
	case CardDeclinesAfterSave:
		o.Succeeded, o.DeclineCode = true, ""
		return o, payments.CardDeclines
	}
	return o, ""
}

// ChargeSaved decides a charge of a saved card from its behaviour: a
// 'declines' card is declined card_declined every time.
func ChargeSaved(c payments.SavedCard) processor.Outcome {
	o := processor.Outcome{Succeeded: c.Behavior != payments.CardDeclines, Last4: c.Last4}
	if !o.Succeeded {
		o.DeclineCode = "card_declined"
	}
	return o
}

// SubscribeCheckout saves card for a subscription session's customer and,
// when chargeNow (no trial), charges the first period with it, then
// records the outcome (checkout.completed with the saved card, or
// checkout.payment_failed) through the domain's one path for processor
// events. With a trial nothing is charged: the card only has to be
// saveable. The card's number never leaves this function: the event
// carries its reference, brand, last4, expiry and behaviour.
func (c *Cards) SubscribeCheckout(ctx context.Context, sessionID string, p payments.CheckoutPayment, card string, chargeNow bool) (processor.Outcome, error) {
	o, behavior := Save(card)
	if chargeNow && o.Succeeded {
		o = ChargeSaved(payments.SavedCard{Behavior: behavior, Last4: o.Last4})
	}
	ev := payments.ProcessorEvent{
		ExternalID: payments.NewID("sbevt_"), Type: payments.ProcessorCheckoutCompleted,
		Data: payments.ProcessorEventData{SessionID: sessionID, CardLast4: o.Last4, Email: p.Email, Name: p.Name},
	}
	if !o.Succeeded {
		ev.Type, ev.Data.DeclineCode = payments.ProcessorCheckoutFailed, o.DeclineCode
		return o, c.inbox.RecordProcessorEvent(ctx, ev)
	}
	ev.Data.Card = &payments.SavedCard{
		ID: payments.NewID("card_"), Brand: "visa", Last4: o.Last4, ExpMonth: p.ExpMonth, ExpYear: p.ExpYear, Behavior: behavior,
	}
	var then []payments.ProcessorEvent
	if chargeNow {
		then = later(card, o)
	}
	return o, c.inbox.RecordProcessorEvent(ctx, ev, then...)
}

// SaveCard decides, through Save, whether a customer's new card (the
// customer portal's card update) can be saved, and returns the card to
// record: its reference, brand, last4, expiry and behaviour, never the
// number. A card that declines at once is not saved (nil).
func (c *Cards) SaveCard(card string, expMonth, expYear int) (processor.Outcome, *payments.SavedCard) {
	o, behavior := Save(card)
	if !o.Succeeded {
		return o, nil
	}
	return o, &payments.SavedCard{ID: payments.NewID("card_"), Brand: "visa", Last4: o.Last4, ExpMonth: expMonth, ExpYear: expYear, Behavior: behavior}
}
