package stripe

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

// SignatureTolerance is how old a Stripe-Signature timestamp may be: older
// payloads are refused as replays.
const SignatureTolerance = 300 * time.Second

// ErrBadSignature is an inbound payload whose Stripe-Signature does not
// verify with STRIPE_WEBHOOK_SECRET, is older than SignatureTolerance, or is
// not a Stripe event: validation_error, so the API answers 400.
var ErrBadSignature = payments.Errorf(payments.ValidationError,
	"The Stripe-Signature header does not verify with this endpoint's signing secret, or is older than 300 seconds.")

// Inbox is where inbound events go: the domain stores each once (by
// Stripe's event id) for a worker to apply (payments.Service).
type Inbox interface {
	ReceiveProcessorEvent(ctx context.Context, sc payments.Scope, ev payments.ProcessorEvent) error
}

// Inbound receives Stripe's webhooks (POST /stripe/webhook).
type Inbound struct {
	p      *Processor
	secret string
	inbox  Inbox
}

// Inbound returns the receiver of Stripe's webhooks signed with secret
// (STRIPE_WEBHOOK_SECRET), storing events in inbox.
func (p *Processor) Inbound(secret string, inbox Inbox) *Inbound {
	return &Inbound{p: p, secret: secret, inbox: inbox}
}

// Receive verifies payload against its Stripe-Signature header with
// stripe-go's webhook package, turns the event into a processor event of
// the merchant whose connected account it names, and stores it once: a
// redelivery (same Stripe event id) is a no-op. It reports whether the event
// was kept; events of other types, of accounts not recorded here, or about
// objects this service did not create are acknowledged and dropped, since
// Stripe would otherwise redeliver them for days. ErrBadSignature for a
// payload that does not verify.
func (in *Inbound) Receive(ctx context.Context, payload []byte, signature string) (bool, error) {
	ev, err := webhook.ConstructEventWithOptions(payload, signature, in.secret, webhook.ConstructEventOptions{
		Tolerance: SignatureTolerance,
		// Only fields stable across API versions are read; an endpoint
		// registered with another version still works.
		IgnoreAPIVersionMismatch: true,
	})
	if err != nil || ev.ID == "" || ev.Data == nil {
		return false, ErrBadSignature
	}
	sc, pev, ok, err := in.p.translate(ctx, ev)
	if err != nil || !ok {
		return false, err
	}
	return true, in.inbox.ReceiveProcessorEvent(ctx, sc, pev)
}

// decodeObject reads an event's object into v. A signed event whose object
// does not decode (a field of another type, a number out of range) is bad
// input, 400 validation_error, not a failure to store (500): sending it
// again cannot mend it.
func decodeObject(typ stripego.EventType, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return payments.Errorf(payments.ValidationError, "The %s event's object does not decode: %v", typ, err)
	}
	return nil
}

// translate maps a Stripe event onto the processor event the sandbox
// reports for the same outcome (README, "Running on Stripe"). ok is false
// for an event with nothing to do here.
func (p *Processor) translate(ctx context.Context, ev stripego.Event) (payments.Scope, payments.ProcessorEvent, bool, error) {
	acct, found, err := merchantOf(ctx, p.db, ev.Account, ev.Livemode)
	if err != nil || !found {
		return payments.Scope{}, payments.ProcessorEvent{}, false, err
	}
	sc := payments.Scope{MerchantID: acct.MerchantID, Live: acct.Live}
	out := payments.ProcessorEvent{ExternalID: ev.ID, Created: time.Unix(ev.Created, 0).UTC()}
	raw := ev.Data.Raw
	switch ev.Type {
	case "checkout.session.completed", "checkout.session.async_payment_succeeded", "checkout.session.async_payment_failed":
		var s stripego.CheckoutSession
		if err := decodeObject(ev.Type, raw, &s); err != nil {
			return sc, out, false, err
		}
		ours := s.ClientReferenceID
		if !strings.HasPrefix(ours, "cs_") {
			return sc, out, false, nil // not a session this service created
		}
		if s.Mode == stripego.CheckoutSessionModeSubscription {
			return p.subscriptionCheckout(sc, out, string(ev.Type), s)
		}
		if s.Mode != stripego.CheckoutSessionModePayment {
			return sc, out, false, nil
		}
		out.Type, out.Data.SessionID = payments.ProcessorCheckoutCompleted, ours
		switch {
		case ev.Type == "checkout.session.async_payment_failed":
			out.Type, out.Data.DeclineCode = payments.ProcessorCheckoutFailed, "async_payment_failed"
		case s.PaymentStatus != stripego.CheckoutSessionPaymentStatusPaid:
			return sc, out, false, nil // a delayed method: async_payment_succeeded follows
		}
		if d := s.CustomerDetails; d != nil {
			out.Data.Email, out.Data.Name = d.Email, d.Name
		}
		if s.PaymentIntent != nil {
			out.Data.CardLast4 = paymentLast4(s.PaymentIntent)
		}
		if s.PaymentIntent != nil && s.PaymentIntent.ID != "" {
			// Refunds and disputes of this payment name Stripe's id.
			if err := p.remember(ctx, acct, ours, s.PaymentIntent.ID); err != nil {
				return sc, out, false, err
			}
		}
	case "payment_intent.succeeded", "payment_intent.payment_failed":
		var pi stripego.PaymentIntent
		if err := decodeObject(ev.Type, raw, &pi); err != nil {
			return sc, out, false, err
		}
		ours := pi.Metadata[metaPayment]
		if !strings.HasPrefix(ours, "pi_") {
			return sc, out, false, nil // a Checkout payment (its session's events tell) or not ours
		}
		out.Type, out.PaymentIntentID = payments.ProcessorChargeSucceeded, ours
		out.Data.CardLast4 = paymentLast4(&pi)
		if ev.Type == "payment_intent.payment_failed" {
			out.Type, out.Data.DeclineCode = payments.ProcessorChargeFailed, "card_declined"
			if e := pi.LastPaymentError; e != nil {
				out.Data.DeclineCode = firstOf(string(e.DeclineCode), string(e.Code), "card_declined")
			}
		}
	case "charge.refund.updated", "refund.updated":
		var r stripego.Refund
		if err := decodeObject(ev.Type, raw, &r); err != nil {
			return sc, out, false, err
		}
		ours := r.Metadata[metaRefund]
		if !strings.HasPrefix(ours, "re_") {
			return sc, out, false, nil
		}
		res := refundResult(r.Status, string(r.FailureReason))
		out.Type, out.PaymentIntentID, out.Data.RefundID = payments.ProcessorRefundUpdated, r.Metadata[metaPayment], ours
		switch {
		case res.Succeeded:
			out.Data.Status = payments.RefundSucceeded
		case res.Pending:
			out.Data.Status = payments.RefundPending
		default:
			out.Data.Status, out.Data.DeclineCode = payments.RefundFailed, res.FailureReason
		}
	case "charge.dispute.created", "charge.dispute.closed":
		var d stripego.Dispute
		if err := decodeObject(ev.Type, raw, &d); err != nil {
			return sc, out, false, err
		}
		if d.PaymentIntent == nil || d.PaymentIntent.ID == "" {
			return sc, out, false, nil
		}
		ours, err := p.ours(ctx, acct, d.PaymentIntent.ID)
		if err != nil || ours == "" {
			return sc, out, false, err
		}
		if strings.HasPrefix(ours, "cs_") {
			out.Data.SessionID = ours
		} else {
			out.PaymentIntentID = ours
		}
		// Evidence is sent to Stripe's dispute of our payment.
		if err := p.remember(ctx, acct, disputeKey(ours), d.ID); err != nil {
			return sc, out, false, err
		}
		out.Type, out.Data.Reason = payments.ProcessorDisputeCreated, string(d.Reason)
		if ev.Type == "charge.dispute.closed" {
			out.Type, out.Data.Status = payments.ProcessorDisputeClosed, string(d.Status)
		}
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted":
		var sub stripego.Subscription
		if err := decodeObject(ev.Type, raw, &sub); err != nil {
			return sc, out, false, err
		}
		if !strings.HasPrefix(sub.Metadata[metaSession], "cs_") || sub.ID == "" {
			return sc, out, false, nil // not a subscription this service's checkout created
		}
		out.Type, out.Data.Subscription = payments.ProcessorSubscriptionUpdated, subscriptionState(&sub)
		if ev.Type == "customer.subscription.deleted" {
			out.Type = payments.ProcessorSubscriptionDeleted
		}
	case "invoice.paid", "invoice.payment_failed":
		var inv stripego.Invoice
		if err := decodeObject(ev.Type, raw, &inv); err != nil {
			return sc, out, false, err
		}
		ok, err := p.ourInvoice(ctx, acct, &inv)
		if err != nil || !ok {
			return sc, out, false, err
		}
		out.Type, out.Data.Invoice = payments.ProcessorInvoicePaid, invoiceState(&inv)
		first := inv.BillingReason == stripego.InvoiceBillingReasonSubscriptionCreate
		switch {
		case ev.Type == "invoice.payment_failed":
			out.Type = payments.ProcessorInvoiceFailed
		case first && inv.PaymentIntent != nil && inv.PaymentIntent.ID != "" && inv.SubscriptionDetails != nil &&
			strings.HasPrefix(inv.SubscriptionDetails.Metadata[metaSession], "cs_"):
			// The first invoice is the checkout's: its payment is the
			// session's (recorded by the completion), and a refund or
			// dispute of it finds Stripe's payment intent by the session.
			if err := p.remember(ctx, acct, inv.SubscriptionDetails.Metadata[metaSession], inv.PaymentIntent.ID); err != nil {
				return sc, out, false, err
			}
		case !first && inv.PaymentIntent != nil && inv.PaymentIntent.ID != "" && inv.AmountPaid > 0:
			// The payment recorded for it gets our id now, mapped to
			// Stripe's payment intent, so that a refund of it finds it.
			out.Data.Invoice.PaymentIntentID = payments.NewID("pi_")
			if err := p.remember(ctx, acct, out.Data.Invoice.PaymentIntentID, inv.PaymentIntent.ID); err != nil {
				return sc, out, false, err
			}
		}
	default:
		return sc, out, false, nil
	}
	out.ID = payments.NewID("pev_")
	return sc, out, true, nil
}

// ours is our id (pi_ of an embedded payment, cs_ of a Checkout one) of a
// Stripe payment intent; "" when this service did not create it.
func (p *Processor) ours(ctx context.Context, acct processor.Account, stripeID string) (string, error) {
	const q = `SELECT id FROM stripe_objects WHERE merchant_id = $1 AND livemode = $2 AND stripe_id = $3
		AND (id LIKE 'pi\_%' OR id LIKE 'cs\_%') ORDER BY id LIKE 'pi\_%' DESC LIMIT 1`
	var id string
	err := p.db.GetContext(ctx, &id, q, acct.MerchantID, acct.Live, stripeID)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("find our payment of %s: %w", stripeID, err)
	}
	return id, nil
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// subscriptionCheckout translates the completion of a Checkout session in
// subscription mode: our session completed, naming Stripe's subscription
// (which keeps the card: no saved card here). A session not yet paid
// (a delayed method) waits for async_payment_succeeded.
func (p *Processor) subscriptionCheckout(sc payments.Scope, out payments.ProcessorEvent, typ string, s stripego.CheckoutSession) (payments.Scope, payments.ProcessorEvent, bool, error) {
	if s.Subscription == nil || s.Subscription.ID == "" {
		return sc, out, false, nil
	}
	out.Type, out.Data.SessionID = payments.ProcessorCheckoutCompleted, s.ClientReferenceID
	switch {
	case typ == "checkout.session.async_payment_failed":
		out.Type, out.Data.DeclineCode = payments.ProcessorCheckoutFailed, "async_payment_failed"
	case s.PaymentStatus == stripego.CheckoutSessionPaymentStatusUnpaid:
		return sc, out, false, nil
	}
	if d := s.CustomerDetails; d != nil {
		out.Data.Email, out.Data.Name = d.Email, d.Name
	}
	out.Data.Subscription = &payments.ProcessorSubscription{ID: s.Subscription.ID}
	out.ID = payments.NewID("pev_")
	return sc, out, true, nil
}

// subscriptionState is a Stripe subscription's state in our terms.
func subscriptionState(s *stripego.Subscription) *payments.ProcessorSubscription {
	out := &payments.ProcessorSubscription{
		ID: s.ID, Status: string(s.Status), CancelAtPeriodEnd: s.CancelAtPeriodEnd,
		Anchor: unixTime(s.BillingCycleAnchor), CurrentPeriodStart: unixTime(s.CurrentPeriodStart),
		CurrentPeriodEnd: unixTime(s.CurrentPeriodEnd), CanceledAt: unixTime(s.CanceledAt), EndedAt: unixTime(s.EndedAt),
		TrialEnd: unixTime(s.TrialEnd),
	}
	if s.Items != nil && len(s.Items.Data) == 1 {
		out.Quantity = int(s.Items.Data[0].Quantity)
	}
	return out
}

// invoiceState is a Stripe invoice of a subscription in our terms: the
// period it bills is its subscription line's (the invoice's own
// period_start/end are the period before, for a renewal).
func invoiceState(inv *stripego.Invoice) *payments.ProcessorInvoice {
	out := &payments.ProcessorInvoice{
		ID: inv.ID, SubscriptionID: inv.Subscription.ID, BillingReason: string(inv.BillingReason), AmountPaid: inv.AmountPaid,
		Currency: strings.ToLower(string(inv.Currency)), NextAttempt: unixTime(inv.NextPaymentAttempt),
		CardLast4: chargeLast4(inv.Charge),
	}
	if inv.Lines != nil {
		for _, l := range inv.Lines.Data {
			if l.Type != stripego.InvoiceLineItemTypeSubscription || l.Period == nil || l.Period.End <= l.Period.Start {
				continue
			}
			if out.PeriodEnd == nil || l.Period.End > out.PeriodEnd.Unix() {
				out.PeriodStart, out.PeriodEnd = unixTime(l.Period.Start), unixTime(l.Period.End)
			}
		}
	}
	return out
}

// ourInvoice reports whether an invoice is of a subscription this
// service's checkout created: its subscription's metadata names our
// session (invoices since mid-2023 carry it), or, for an older invoice, a
// subscription of ours has its id.
func (p *Processor) ourInvoice(ctx context.Context, acct processor.Account, inv *stripego.Invoice) (bool, error) {
	if inv.Subscription == nil || inv.Subscription.ID == "" {
		return false, nil
	}
	if d := inv.SubscriptionDetails; d != nil && d.Metadata != nil {
		return strings.HasPrefix(d.Metadata[metaSession], "cs_"), nil
	}
	var n int
	const q = `SELECT count(*) FROM subscriptions WHERE merchant_id = $1 AND livemode = $2 AND processor_subscription_id = $3`
	if err := p.db.GetContext(ctx, &n, q, acct.MerchantID, acct.Live, inv.Subscription.ID); err != nil {
		return false, fmt.Errorf("find our subscription of %s: %w", inv.Subscription.ID, err)
	}
	return n > 0, nil
}

// paymentLast4 is the card's last four digits of a payment intent, when
// the event carries them: its latest charge or its payment method
// expanded. Stripe's payment_intent events name both by id only; their
// card is then not known here.
func paymentLast4(pi *stripego.PaymentIntent) string {
	if l := chargeLast4(pi.LatestCharge); l != "" {
		return l
	}
	if pm := pi.PaymentMethod; pm != nil && pm.Card != nil {
		return pm.Card.Last4
	}
	return ""
}

func chargeLast4(ch *stripego.Charge) string {
	if ch == nil || ch.PaymentMethodDetails == nil || ch.PaymentMethodDetails.Card == nil {
		return ""
	}
	return ch.PaymentMethodDetails.Card.Last4
}

func unixTime(sec int64) *time.Time {
	if sec <= 0 {
		return nil
	}
	t := time.Unix(sec, 0).UTC()
	return &t
}
