package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"paysvc/internal/processor"
)

// SubscriptionCharges is the persistence of renewals, dunning and the
// charges of saved cards (part of Store).
type SubscriptionCharges interface {
	// RenewDue runs fn on active and trialing subscriptions whose period
	// (or trial) ended on their scope's clock (now, the clock's base, plus
	// the scope's offset) and that have no charge for the next period yet,
	// at most limit, each locked (others' locks are skipped), passing fn
	// their scope and time. When fn returns a charge it is inserted, unless
	// one exists for its period already (then nothing of fn's is written),
	// and bills the subscription's pending proration items; the
	// subscription is saved with fn's effects. It returns how many it
	// changed.
	// With only, just that scope's subscriptions, waiting for rows another
	// sweep holds instead of skipping them.
	RenewDue(ctx context.Context, now time.Time, limit int, only *Scope, fn func(sc Scope, sub *Subscription, now time.Time) (*SubscriptionCharge, Effects, error)) (int, error)
	// SubscriptionCharge reads one of the scope's charges.
	// Codes: subscription_not_found.
	SubscriptionCharge(ctx context.Context, sc Scope, id string) (SubscriptionCharge, error)
	// SettleSubscriptionCharge locks the charge's subscription, then the
	// charge, runs fn and writes, in one transaction, the payment fn
	// returns (if any), the charge, the subscription and fn's effects. A
	// proration charge that fn marks failed gives its proration items back
	// to the next renewal. ErrChargeSettled from fn writes nothing.
	// Codes: subscription_not_found, and fn's.
	SettleSubscriptionCharge(ctx context.Context, sc Scope, id string, fn func(plan Plan, ch *SubscriptionCharge, sub *Subscription) (*PaymentIntent, Effects, error)) (SubscriptionCharge, error)
	// StartSubscriptionCharge records, committed, that attempt a.N of the
	// pending charge is about to be sent to the processor with a.CardID and
	// a.Amount, unless that attempt was recorded started already (a run
	// racing this one): it returns the attempt as recorded, which the call
	// must send. ok is false when the charge is no longer pending at that
	// attempt (another run settled it). Codes: subscription_not_found.
	StartSubscriptionCharge(ctx context.Context, sc Scope, id string, a ChargeAttempt) (started ChargeAttempt, ok bool, err error)
	// DueSubscriptionCharges are the ids of the scope's pending charges
	// whose attempt is due at now (the scope's time), oldest first.
	DueSubscriptionCharges(ctx context.Context, sc Scope, now time.Time, limit int) ([]string, error)
	// ReopenSubscriptionCharge makes the open renewal charge of a past_due
	// or unpaid subscription (the charge of the period after its current
	// one) due at now, and returns its id.
	// Codes: subscription_not_found, validation_error (no open charge).
	ReopenSubscriptionCharge(ctx context.Context, sc Scope, subscriptionID string, now time.Time) (string, error)
}

// DunningSchedule is when a declined renewal is tried again, counted from
// its first failure: attempt n+1 comes DunningSchedule[n-1] after it. A
// decline of the last attempt (14 days after the first failure) makes the
// subscription unpaid; until then it is past_due.
var DunningSchedule = []time.Duration{2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour}

// ErrChargeSettled is returned to a store by a settlement that finds its
// charge recorded by another run (a duplicated task, a relay's re-enqueue):
// nothing is written and the run ends as done.
var ErrChargeSettled = errors.New("subscription charge settled already")

// Decline codes of charges refused before any processor call.
const (
	DeclineSubscriptionEnded = "subscription_ended" // canceled before the charge was attempted
	DeclineNoCard            = "no_saved_card"
)

// chargeKey is the processor's idempotency key of attempt n of a charge:
// a retry of the same attempt (a crashed worker, a duplicated task) gets
// the first answer, and each dunning attempt is a charge of its own.
func chargeKey(chargeID string, attempt int) string {
	return fmt.Sprintf("%s_attempt_%d", chargeID, attempt)
}

// RenewDueSubscriptions is one batch of the renewal sweep: it ends the
// subscriptions whose scheduled cancellation came due (no charge;
// customer.subscription.updated and .deleted), and writes the charge of
// the next period of the others (pending; its amount and the pending
// prorations it bills fixed now) with the job that charges it. No event is
// recorded for a renewal before its charge succeeds. It returns how many
// subscriptions it changed.
func (s *Service) RenewDueSubscriptions(ctx context.Context, limit int) (int, error) {
	return s.renewDue(ctx, limit, nil)
}

// renewDue is RenewDueSubscriptions; with only, it sweeps only that scope
// (advance-clock's).
func (s *Service) renewDue(ctx context.Context, limit int, only *Scope) (int, error) {
	return s.store.RenewDue(ctx, s.clock.Base(), limit, only, func(sc Scope, sub *Subscription, now time.Time) (*SubscriptionCharge, Effects, error) {
		wasEnded := sub.Ended()
		if sub.EndIfDue(now) {
			return nil, Effects{Events: subscriptionEvents(*sub, wasEnded, now)}, nil
		}
		next := sub.NextPeriod()
		due := sub.CurrentPeriodEnd
		ch := &SubscriptionCharge{
			ID: NewID("subch_"), SubscriptionID: sub.ID, Kind: ChargeRenewal, PeriodStart: &next.Start, PeriodEnd: &next.End,
			Amount: sub.BillRenewal(), Currency: sub.Currency, Status: ChargePending, NextAttemptAt: &due, Created: now,
		}
		return ch, Effects{Jobs: []Job{{Kind: JobSubscriptionCharge, ID: ch.ID, MerchantID: sc.MerchantID, Live: sc.Live}}}, nil
	})
}

// ChargeSubscription is the one step that charges a subscription's saved
// card for a pending charge (a renewal, a dunning retry, an always_invoice
// proration): charge, then record. It records the attempt as started (its
// card and amount, committed), calls the processor holding no lock and no
// transaction, with the key of the charge's next attempt, then records the
// outcome in one transaction (SettleSubscriptionCharge): on success a
// payment naming the subscription (fee and ledger entry as any payment's,
// refundable), the charge succeeded, a renewal's subscription moved to its
// next period (active) with customer.subscription.updated; on a decline
// the attempt counted and the next one scheduled (DunningSchedule:
// past_due, then unpaid). A charge not pending, or whose attempt is not yet
// due on the scope's clock, is left as it is; a run that finds the attempt
// recorded by another (a duplicated task, a worker killed after the
// processor answered) records nothing: the processor answered both with
// the same charge. An attempt started by a run that died before recording
// it is sent again as it was first sent, whatever changed since: the
// processor answers with the charge it made, if it made one, and that
// charge is recorded even on a subscription canceled meanwhile. A
// retryable processor error is returned for the job to retry the same
// attempt.
// Codes: subscription_not_found.
func (s *Service) ChargeSubscription(ctx context.Context, sc Scope, id string) (SubscriptionCharge, error) {
	ch, _, err := s.chargeSubscription(ctx, sc, id)
	return ch, err
}

// chargeSubscription is ChargeSubscription; resumed reports that the
// attempt it settled was one an earlier run had started.
func (s *Service) chargeSubscription(ctx context.Context, sc Scope, id string) (ch SubscriptionCharge, resumed bool, err error) {
	ch, err = s.store.SubscriptionCharge(ctx, sc, id)
	if err != nil || ch.Status != ChargePending {
		return ch, false, err
	}
	now := s.clock.Now(ctx, sc)
	if ch.NextAttemptAt != nil && now.Before(*ch.NextAttemptAt) {
		return ch, false, nil // a dunning retry whose time has not come
	}
	sub, err := s.store.Subscription(ctx, sc, ch.SubscriptionID)
	if err != nil {
		return ch, false, err
	}
	attempt := ch.Attempts + 1
	var out processor.Outcome
	charged := ch.Amount
	resumed = ch.Started != nil && ch.Started.N == attempt
	switch {
	case resumed:
		// The card may have been charged: ask again, exactly as before.
		charged = ch.Started.Amount
		if out, err = s.chargeCard(ctx, sc, ch, sub, *ch.Started); err != nil {
			return ch, false, err
		}
	case sub.Ended() || (ch.Kind == ChargeRenewal && sub.CancelAtPeriodEnd && !now.Before(sub.CurrentPeriodEnd)):
		out.DeclineCode = DeclineSubscriptionEnded // never charged: settled below, ending it if due
	case ch.Amount == 0:
		out.Succeeded = true // a credit covered the period: nothing to charge
	case sub.CardID == nil:
		out.DeclineCode = DeclineNoCard
	default:
		if sub.PassFees {
			plan, err := s.store.MerchantPlan(ctx, sc.MerchantID)
			if err != nil {
				return ch, false, err
			}
			charged = GrossUp(plan, ch.Currency, ch.Amount)
		}
		a, ok, err := s.store.StartSubscriptionCharge(ctx, sc, id, ChargeAttempt{N: attempt, CardID: *sub.CardID, Amount: charged})
		if err != nil {
			return ch, false, err
		}
		if !ok { // settled by another run meanwhile
			ch, err = s.store.SubscriptionCharge(ctx, sc, id)
			return ch, false, err
		}
		charged = a.Amount // a racing run's start, if it came first
		if out, err = s.chargeCard(ctx, sc, ch, sub, a); err != nil {
			return ch, false, err
		}
	}
	now = s.clock.Now(ctx, sc) // after the charge, and before the transaction: see changeSubscription
	settled, err := s.store.SettleSubscriptionCharge(ctx, sc, id, func(plan Plan, ch *SubscriptionCharge, sub *Subscription) (*PaymentIntent, Effects, error) {
		if ch.Status != ChargePending || ch.Attempts != attempt-1 {
			return nil, Effects{}, ErrChargeSettled
		}
		return s.settle(sc, now, plan, ch, sub, attempt, charged, out)
	})
	if errors.Is(err, ErrChargeSettled) {
		ch, err = s.store.SubscriptionCharge(ctx, sc, id)
		return ch, resumed, err
	}
	return settled, resumed, err
}

// chargeCard sends attempt a of the charge to the processor. A decline,
// or an error the processor says is final, is the outcome; a retryable
// error is returned.
func (s *Service) chargeCard(ctx context.Context, sc Scope, ch SubscriptionCharge, sub Subscription, a ChargeAttempt) (processor.Outcome, error) {
	out, err := s.proc.ChargeCard(ctx, account(sc), processor.CardCharge{
		Key: chargeKey(ch.ID, a.N), CardID: a.CardID, CustomerID: sub.CustomerID, Amount: a.Amount, Currency: ch.Currency,
	})
	var perr *processor.Error
	switch {
	case errors.As(err, &perr) && !perr.Retryable:
		return processor.Outcome{DeclineCode: perr.Code}, nil
	case err != nil:
		return out, err
	}
	return out, nil
}

// settle records attempt's outcome on the locked charge and subscription.
func (s *Service) settle(sc Scope, now time.Time, plan Plan, ch *SubscriptionCharge, sub *Subscription, attempt int, charged int64, out processor.Outcome) (*PaymentIntent, Effects, error) {
	wasEnded, status, pending := sub.Ended(), sub.Status, sub.PendingProration
	ch.Attempts = attempt
	var eff Effects
	var pi *PaymentIntent
	if out.Succeeded {
		ch.Status, ch.NextAttemptAt, ch.DeclineCode = ChargeSucceeded, nil, nil
		if ch.Amount > 0 {
			desc := "Subscription renewal"
			if ch.Kind == ChargeProration {
				desc = "Subscription quantity change"
			}
			pi = &PaymentIntent{
				ID: NewID("pi_"), Live: sc.Live, Amount: charged, Currency: ch.Currency, CustomerID: &sub.CustomerID,
				SubscriptionID: &sub.ID, Description: &desc, Metadata: sub.Metadata, Created: now,
			}
			eff = pi.succeed(plan, out.Last4, now)
			eff.Events = []Event{newEvent(EventPaymentSucceeded, pi.Object(), now)}
			ch.PaymentIntentID = &pi.ID
			if out.DisputeReason != "" { // the cardholder disputes it: opened by a worker, as any dispute
				eff.ProcessorEvents = append(eff.ProcessorEvents, ProcessorEvent{
					ID: NewID("pev_"), Type: ProcessorDisputeCreated, PaymentIntentID: pi.ID,
					Data: ProcessorEventData{Reason: out.DisputeReason}, Created: now,
				})
			}
		}
		// A renewal moves the period it was written for, unless the
		// subscription ended meanwhile (a cancellation that raced the
		// charge: the payment stands, the subscription stays ended).
		if ch.Kind == ChargeRenewal && !sub.Ended() && ch.PeriodStart != nil && sub.CurrentPeriodEnd.Equal(*ch.PeriodStart) {
			sub.Renewed()
			eff.Events = append(eff.Events, subscriptionEvents(*sub, wasEnded, now)...)
		}
		return pi, eff, nil
	}
	code := out.DeclineCode
	if code == "" {
		code = "card_declined"
	}
	ch.DeclineCode = &code
	switch {
	case code == DeclineSubscriptionEnded || sub.Ended():
		// An ended subscription bills nothing more: a proration it was
		// not charged does not become pending again (nor is an event
		// recorded after its customer.subscription.deleted).
		ch.Status, ch.NextAttemptAt = ChargeFailed, nil
		sub.EndIfDue(now)
	case ch.Kind == ChargeProration:
		// A declined proration is not retried on its own: its amount goes
		// back to the pending items that the next renewal charges.
		ch.Status, ch.NextAttemptAt = ChargeFailed, nil
		sub.PendingProration += ch.Amount
	default:
		if ch.FirstFailedAt == nil {
			ch.FirstFailedAt = &now
		}
		if attempt-1 < len(DunningSchedule) {
			next := ch.FirstFailedAt.Add(DunningSchedule[attempt-1])
			ch.NextAttemptAt, sub.NextRetryAt = &next, &next
			sub.RenewalFailed(false)
		} else {
			ch.Status, ch.NextAttemptAt, sub.NextRetryAt = ChargeFailed, nil, nil
			sub.RenewalFailed(true)
		}
	}
	if sub.Status != status || sub.PendingProration != pending || sub.Ended() != wasEnded {
		eff.Events = subscriptionEvents(*sub, wasEnded, now)
	}
	return nil, eff, nil
}

// RetryOpenCharge charges the open renewal charge of a past_due or unpaid
// subscription at once, as after the customer updated the card in the
// portal: the charge is made due now and goes through ChargeSubscription
// (a success makes the subscription active again; a decline is one more
// attempt). It calls the processor: never call it inside a transaction.
// Codes: subscription_not_found, validation_error (no open charge).
//
// An attempt an earlier run started and never recorded (a worker killed
// mid-call) is answered first, with the card it was sent with; if it was
// declined, one more attempt then charges the card on file now.
func (s *Service) RetryOpenCharge(ctx context.Context, sc Scope, subscriptionID string) (Subscription, error) {
	for range 2 {
		id, err := s.store.ReopenSubscriptionCharge(ctx, sc, subscriptionID, s.clock.Now(ctx, sc))
		if err != nil {
			return Subscription{}, err
		}
		_, resumed, err := s.chargeSubscription(ctx, sc, id)
		if err != nil {
			return Subscription{}, err
		}
		sub, err := s.store.Subscription(ctx, sc, subscriptionID)
		if err != nil || !resumed || (sub.Status != SubPastDue && sub.Status != SubUnpaid) {
			return sub, err
		}
	}
	return s.store.Subscription(ctx, sc, subscriptionID)
}

// maxRenewalRounds bounds advance-clock's catching up: a clock moved by
// years over a daily subscription renews it once per round.
const maxRenewalRounds = 5000

// runDueRenewals is advance-clock's share of renewals: it runs the
// renewal sweep and then charges, at once, the scope's charges that came
// due (instead of leaving them to the worker), round after round until
// nothing is due, so that a clock moved by several periods renews each.
func (s *Service) runDueRenewals(ctx context.Context, sc Scope) error {
	for range maxRenewalRounds {
		n, err := Drain(ctx, func(ctx context.Context, limit int) (int, error) { return s.renewDue(ctx, limit, &sc) })
		if err != nil {
			return err
		}
		ids, err := s.store.DueSubscriptionCharges(ctx, sc, s.clock.Now(ctx, sc), SweepBatch)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if _, err := s.ChargeSubscription(ctx, sc, id); err != nil {
				return err
			}
		}
		if n == 0 && len(ids) == 0 {
			return nil
		}
	}
	return nil
}
