package payments

import (
	"context"
	"errors"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// Refund statuses (decisions.md §2).
const (
	RefundPending   = "pending"
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed"
)

// IdempotencyTTL is how long an Idempotency-Key is kept (decisions.md §6);
// after it a key may be used again for a new request.
const IdempotencyTTL = 24 * time.Hour

// EventChargeRefunded is sent when a refund succeeds.
const EventChargeRefunded = "charge.refunded"

var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// Refund is money returned to the customer from one payment.
type Refund struct {
	ID              string
	Live            bool
	PaymentIntentID string
	SessionID       *string
	Amount          int64
	Currency        string
	Reason          *string
	Status          string
	FailureReason   *string
	Created         time.Time
}

// RefundObject is a refund as the API returns it.
type RefundObject struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Status        string  `json:"status"`
	AmountCents   int64   `json:"amount_cents"`
	Currency      string  `json:"currency"`
	PaymentIntent string  `json:"payment_intent"`
	Session       *string `json:"session_id"`
	Reason        *string `json:"reason"`
	FailureReason *string `json:"failure_reason"`
	Created       int64   `json:"created"`
	Livemode      bool    `json:"livemode"`
}

// Object returns the refund's API shape.
func (r Refund) Object() RefundObject {
	return RefundObject{
		ID: r.ID, Object: "refund", Status: r.Status, AmountCents: r.Amount, Currency: r.Currency,
		PaymentIntent: r.PaymentIntentID, Session: r.SessionID, Reason: r.Reason, FailureReason: r.FailureReason,
		Created: r.Created.Unix(), Livemode: r.Live,
	}
}

// RefundInput is the body of POST /v1/refunds.
type RefundInput struct {
	SessionID     *string `json:"session_id"`
	PaymentIntent *string `json:"payment_intent"`
	Amount        *int64  `json:"amount"`
	Reason        *string `json:"reason"`
	// IdempotencyKey is the request's Idempotency-Key header, if any.
	IdempotencyKey string `json:"-"`
}

// PaymentRef names the payment to refund: by its checkout session or its
// id; IdempotencyKey, when set, names the refund a retry must get back.
type PaymentRef struct {
	SessionID       string
	PaymentIntentID string
	IdempotencyKey  string
	KeySince        time.Time // refunds made under the key before this do not count
}

func (in RefundInput) validate() (PaymentRef, error) {
	var ref PaymentRef
	switch {
	case in.SessionID != nil && in.PaymentIntent != nil:
		return ref, Errorf(ValidationError, "Give exactly one of session_id and payment_intent, not both.")
	case in.SessionID != nil:
		if !strings.HasPrefix(*in.SessionID, "cs_") {
			return ref, Invalid("session_id", "must be a checkout session id (cs_…)")
		}
		ref.SessionID = *in.SessionID
	case in.PaymentIntent != nil:
		if !strings.HasPrefix(*in.PaymentIntent, "pi_") {
			return ref, Invalid("payment_intent", "must be a payment intent id (pi_…)")
		}
		ref.PaymentIntentID = *in.PaymentIntent
	default:
		return ref, Errorf(ValidationError, "Give exactly one of session_id and payment_intent.")
	}
	if in.Amount != nil {
		if err := checkAmount("amount", in.Amount); err != nil {
			return ref, err
		}
	}
	if in.Reason != nil && !refundReasons[*in.Reason] {
		return ref, Invalid("reason", "must be one of duplicate, fraudulent, requested_by_customer")
	}
	ref.IdempotencyKey = in.IdempotencyKey
	return ref, nil
}

// CreateRefund creates a pending refund and reserves its amount from the
// balance, in one transaction holding the payment's row lock: concurrent
// refunds of a payment see each other's pending amounts, and the
// reservation is one conditional update of the balance row, so together
// refunds never exceed what was paid nor what the balance holds. A worker
// executes it at the processor (JobExecuteRefund). Codes: validation_error,
// payment_not_found, refund_not_allowed, already_refunded,
// refund_amount_too_large, insufficient_balance, balance_verification_failed.
// With an IdempotencyKey that already created a refund (its first request
// committed, then its process died before the API stored the response),
// that refund is returned and nothing else happens.
func (s *Service) CreateRefund(ctx context.Context, sc Scope, in RefundInput) (Refund, error) {
	ref, err := in.validate()
	if err != nil {
		return Refund{}, err
	}
	now := s.clock.Now(ctx, sc)
	ref.KeySince = now.Add(-IdempotencyTTL)
	return s.store.CreateRefund(ctx, sc, ref, func(pi PaymentIntent, r *Refund) (Effects, error) {
		if pi.DisputeID != nil {
			return Effects{}, Errorf(RefundNotAllowed, "Payment %s is disputed and cannot be refunded.", pi.ID)
		}
		remaining := pi.Refundable()
		if remaining <= 0 {
			return Effects{}, Errorf(AlreadyRefunded, "Payment %s has already been fully refunded.", pi.ID)
		}
		amount := remaining
		if in.Amount != nil {
			amount = *in.Amount
		}
		if amount > remaining {
			return Effects{}, Errorf(RefundAmountTooLarge, "Refund amount %d exceeds the %d that remains refundable on payment %s.", amount, remaining, pi.ID)
		}
		*r = Refund{
			ID: NewID("re_"), Live: sc.Live, PaymentIntentID: pi.ID, SessionID: pi.SessionID, Amount: amount,
			Currency: pi.Currency, Reason: in.Reason, Status: RefundPending, Created: now,
		}
		return Effects{Jobs: []Job{{Kind: JobExecuteRefund, ID: r.ID, MerchantID: sc.MerchantID, Live: sc.Live}}}, nil
	})
}

// ErrInsufficientBalance is the refusal of a refund the available balance
// cannot cover.
func ErrInsufficientBalance(amount int64, currency string) *Error {
	return Errorf(InsufficientBalance, "The available balance cannot cover a refund of %d %s.", amount, currency)
}

// ErrBalanceUnverified is the refusal of a refund whose balance could not be
// read or does not exist; err (logged only) is the cause.
func ErrBalanceUnverified(err error) *Error {
	return &Error{Code: BalanceVerificationFailed, Msg: "The merchant balance could not be verified; no refund was created.", Err: err}
}

// Refund returns one of the scope's refunds, to follow it from pending to
// succeeded or failed. Codes: payment_not_found.
func (s *Service) Refund(ctx context.Context, sc Scope, id string) (Refund, error) {
	return s.store.Refund(ctx, sc, id)
}

// Refundable is what can still be refunded: what was paid less what has been
// refunded or is being refunded.
func (pi PaymentIntent) Refundable() int64 {
	return pi.AmountReceived - pi.AmountRefunded - pi.AmountRefundPending
}

// ExecuteRefund runs a pending refund at the processor and records the
// outcome: succeeded (a ledger debit and charge.refunded) or failed (the
// reservation released). The refund id is the processor's idempotency key,
// so running this twice (a worker killed after the processor call) executes
// the refund once. A retryable processor error is returned for the job to
// retry with backoff; the refund stays pending and keeps its reservation.
func (s *Service) ExecuteRefund(ctx context.Context, sc Scope, id string) (Refund, error) {
	r, err := s.store.Refund(ctx, sc, id)
	if err != nil || r.Status != RefundPending {
		return r, err
	}
	req := processor.RefundRequest{ID: r.ID, PaymentIntentID: r.PaymentIntentID, Amount: r.Amount, Currency: r.Currency}
	if r.SessionID != nil {
		req.SessionID = *r.SessionID
	}
	res, err := s.proc.Refund(ctx, account(sc), req)
	var perr *processor.Error
	switch {
	case errors.As(err, &perr) && !perr.Retryable:
		res = processor.RefundResult{Succeeded: false, FailureReason: perr.Code}
	case err != nil:
		return r, err
	case res.Pending:
		// The processor settles it later and says so with a
		// refund.updated processor event (applyRefundUpdated).
		return r, nil
	}
	r, _, err = s.finishRefund(ctx, sc, id, res, Effects{})
	return r, err
}

// finishRefund records a pending refund's outcome with eff: succeeded (a
// ledger debit and charge.refunded) or failed (the reservation released).
// A refund finished already is left alone, and changed is false.
func (s *Service) finishRefund(ctx context.Context, sc Scope, id string, res processor.RefundResult, eff Effects) (r Refund, changed bool, err error) {
	now := s.clock.Now(ctx, sc)
	r, err = s.store.FinishRefund(ctx, sc, id, func(r *Refund, pi *PaymentIntent) (Effects, error) {
		if r.Status != RefundPending {
			return Effects{}, nil // finished by a run that raced this one
		}
		changed = true
		pi.AmountRefundPending -= r.Amount
		eff.Reserve, eff.ReserveCurrency = -r.Amount, r.Currency
		if !res.Succeeded {
			r.Status = RefundFailed
			reason := res.FailureReason
			r.FailureReason = &reason
			return eff, nil
		}
		r.Status = RefundSucceeded
		pi.AmountRefunded += r.Amount
		eff.Ledger = []LedgerEntry{newEntry(LedgerRefund, -r.Amount, r.Currency, r.ID, now)}
		eff.Events = append(eff.Events, newEvent(EventChargeRefunded, r.Object(), now))
		return eff, nil
	})
	return r, changed, err
}

// applyRefundUpdated applies refund.updated, the processor settling a
// refund it answered pending: succeeded or failed as ExecuteRefund records
// them. A refund finished already (the processor's first answer, or an
// earlier event) is left alone, and an update that is still pending
// changes nothing: events in any order leave one end state.
func (s *Service) applyRefundUpdated(ctx context.Context, a *application) error {
	if a.sc == nil {
		return Errorf(ValidationError, "refund.updated is applied by a worker")
	}
	sc, d := *a.sc, a.ev.Data
	var res processor.RefundResult
	switch d.Status {
	case RefundSucceeded:
		res.Succeeded = true
	case RefundFailed:
		res.FailureReason = d.DeclineCode
		if res.FailureReason == "" {
			res.FailureReason = "declined"
		}
	default:
		return s.store.MarkProcessorEvent(ctx, sc, a.ev)
	}
	if _, err := s.store.Refund(ctx, sc, d.RefundID); err != nil {
		return err // not this scope's refund: payment_not_found, settled
	}
	now := s.clock.Now(ctx, sc)
	_, changed, err := s.finishRefund(ctx, sc, d.RefundID, res, a.effects(Effects{}, a.ev.PaymentIntentID, now))
	if err != nil || changed {
		return err
	}
	return s.store.MarkProcessorEvent(ctx, sc, a.ev)
}
