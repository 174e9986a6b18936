package payments

import (
	"context"
	"sort"
	"time"
	"unicode/utf8"

	"paysvc/internal/processor"
)

// Dispute statuses (decisions.md §2).
const (
	DisputeNeedsResponse = "needs_response"
	DisputeUnderReview   = "under_review"
	DisputeWon           = "won"
	DisputeLost          = "lost"
)

// Dispute events.
const (
	EventDisputeCreated = "charge.dispute.created"
	EventDisputeClosed  = "charge.dispute.closed"
)

// DisputeResponseWindow is how long a merchant has to answer a dispute.
const DisputeResponseWindow = 7 * 24 * time.Hour

// DisputeListLimit is the dispute list's default page size (the spec's 50).
const DisputeListLimit = 50

// evidenceFields are the processor's dispute-evidence fields (Stripe's).
var evidenceFields = map[string]bool{
	"access_activity_log": true, "billing_address": true, "cancellation_policy": true,
	"cancellation_policy_disclosure": true, "cancellation_rebuttal": true, "customer_communication": true,
	"customer_email_address": true, "customer_name": true, "customer_purchase_ip": true, "customer_signature": true,
	"duplicate_charge_documentation": true, "duplicate_charge_explanation": true, "duplicate_charge_id": true,
	"product_description": true, "receipt": true, "refund_policy": true, "refund_policy_disclosure": true,
	"refund_refusal_explanation": true, "service_date": true, "service_documentation": true,
	"shipping_address": true, "shipping_carrier": true, "shipping_date": true, "shipping_documentation": true,
	"shipping_tracking_number": true, "uncategorized_file": true, "uncategorized_text": true,
}

// maxEvidenceLen bounds one evidence value (Stripe allows 20,000 characters).
const maxEvidenceLen = 20000

// Dispute is a chargeback on a payment.
type Dispute struct {
	ID              string
	Live            bool
	PaymentIntentID string
	Amount          int64
	Currency        string
	Reason          string
	Status          string
	Evidence        map[string]string
	EvidenceDueBy   *time.Time
	SubmittedAt     *time.Time
	EvidenceSentAt  *time.Time // when the processor received the submitted evidence
	ClosedAt        *time.Time
	Created         time.Time
}

// DisputeObject is a dispute as the API returns it.
type DisputeObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Status        string            `json:"status"`
	Reason        string            `json:"reason"`
	AmountCents   int64             `json:"amount_cents"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Evidence      map[string]string `json:"evidence"`
	EvidenceDueBy *int64            `json:"evidence_due_by"`
	HasEvidence   bool              `json:"has_evidence"`
	Submitted     bool              `json:"evidence_submitted"`
	Created       int64             `json:"created"`
	Livemode      bool              `json:"livemode"`
}

// Object returns the dispute's API shape.
func (d Dispute) Object() DisputeObject {
	o := DisputeObject{
		ID: d.ID, Object: "dispute", Status: d.Status, Reason: d.Reason, AmountCents: d.Amount, Currency: d.Currency,
		PaymentIntent: d.PaymentIntentID, Evidence: nonNilMap(d.Evidence), HasEvidence: len(d.Evidence) > 0,
		Submitted: d.SubmittedAt != nil, Created: d.Created.Unix(), Livemode: d.Live,
	}
	if d.EvidenceDueBy != nil {
		due := d.EvidenceDueBy.Unix()
		o.EvidenceDueBy = &due
	}
	return o
}

// EvidenceInput is the body of POST /v1/disputes/{id}/evidence.
type EvidenceInput struct {
	Evidence evidenceMap `json:"evidence"`
	Submit   *bool       `json:"submit"`
}

func (in EvidenceInput) validate() error {
	keys := make([]string, 0, len(in.Evidence))
	for k := range in.Evidence {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad field named is always the same one
	for _, k := range keys {
		if !evidenceFields[k] {
			return Invalid("evidence."+k, "is not a dispute evidence field")
		}
		if utf8.RuneCountInString(in.Evidence[k]) > maxEvidenceLen {
			return Invalid("evidence."+k, "must be at most %d characters", maxEvidenceLen)
		}
	}
	return nil
}

// Dispute returns one of the scope's disputes. Codes: payment_not_found.
func (s *Service) Dispute(ctx context.Context, sc Scope, id string) (Dispute, error) {
	return s.store.Dispute(ctx, sc, id)
}

// Disputes lists the scope's disputes, newest first.
func (s *Service) Disputes(ctx context.Context, sc Scope, lp ListParams) (Page[Dispute], error) {
	return s.store.Disputes(ctx, sc, lp)
}

// UpdateEvidence merges evidence into a dispute that still needs a response;
// an empty value removes a field. With submit, the dispute goes to
// under_review and a worker sends the evidence to the processor, which
// decides it. After submission, or past evidence_due_by, evidence is
// refused. Codes: validation_error, payment_not_found.
func (s *Service) UpdateEvidence(ctx context.Context, sc Scope, id string, in EvidenceInput) (Dispute, error) {
	if err := in.validate(); err != nil {
		return Dispute{}, err
	}
	now := s.clock.Now(ctx, sc)
	return s.store.UpdateDispute(ctx, sc, id, func(d *Dispute) (Effects, error) {
		if d.SubmittedAt != nil || d.Status != DisputeNeedsResponse {
			return Effects{}, Errorf(ValidationError, "Evidence for dispute %s has already been submitted and can no longer change.", d.ID)
		}
		if d.EvidenceDueBy != nil && now.After(*d.EvidenceDueBy) {
			return Effects{}, Errorf(ValidationError, "The evidence for dispute %s was due by %s.", d.ID, d.EvidenceDueBy.UTC().Format(time.RFC3339))
		}
		if d.Evidence == nil {
			d.Evidence = map[string]string{}
		}
		for k, v := range in.Evidence {
			if v == "" {
				delete(d.Evidence, k)
			} else {
				d.Evidence[k] = v
			}
		}
		if in.Submit == nil || !*in.Submit {
			return Effects{}, nil
		}
		d.Status, d.SubmittedAt = DisputeUnderReview, &now
		return Effects{Jobs: []Job{{Kind: JobSubmitEvidence, ID: d.ID, MerchantID: sc.MerchantID, Live: sc.Live}}}, nil
	})
}

// applyDisputeCreated applies dispute.created: a dispute opens on the
// payment (see openDispute); a payment with nothing left to dispute is left
// alone and the event is marked applied all the same.
func (s *Service) applyDisputeCreated(ctx context.Context, a *application) error {
	if a.sc == nil {
		return Errorf(ValidationError, "dispute.created is applied by a worker") // never reported to a waiting page
	}
	sc := *a.sc
	// A processor's webhook may name the checkout session only, and may
	// arrive before the payment's success was applied here.
	pi, err := s.eventPayment(ctx, sc, a.ev)
	if err != nil {
		return err
	}
	if pi.Status != IntentSucceeded && pi.DisputeID == nil {
		return ErrNotYet
	}
	now := s.clock.Now(ctx, sc)
	return s.store.OpenDispute(ctx, sc, pi.ID, func(pi *PaymentIntent) (*Dispute, Effects) {
		d, eff := openDispute(sc, a.ev, pi, now)
		return d, a.effects(eff, pi.ID, now)
	})
}

// openDispute opens a dispute on a payment: the disputed amount, all that
// was not refunded or reserved by a pending refund, leaves the balance now.
func openDispute(sc Scope, ev ProcessorEvent, pi *PaymentIntent, now time.Time) (*Dispute, Effects) {
	amount := pi.Refundable()
	if pi.DisputeID != nil || pi.Status != IntentSucceeded || amount <= 0 {
		return nil, Effects{} // nothing left to dispute
	}
	reason := ev.Data.Reason
	if reason == "" {
		reason = "general"
	}
	due := now.Add(DisputeResponseWindow)
	d := &Dispute{
		ID: NewID("dp_"), Live: sc.Live, PaymentIntentID: pi.ID, Amount: amount, Currency: pi.Currency,
		Reason: reason, Status: DisputeNeedsResponse, EvidenceDueBy: &due, Created: now,
	}
	pi.DisputeID = &d.ID
	return d, Effects{
		Ledger: []LedgerEntry{newEntry(LedgerDispute, -amount, d.Currency, d.ID, now)},
		Events: []Event{newEvent(EventDisputeCreated, d.Object(), now)},
	}
}

// close decides the dispute as won or lost, with charge.dispute.closed: won
// returns the disputed amount to the balance, lost keeps it withdrawn.
func (d *Dispute) close(status string, now time.Time) Effects {
	d.Status, d.ClosedAt = status, &now
	eff := Effects{Events: []Event{newEvent(EventDisputeClosed, d.Object(), now)}}
	if status == DisputeWon {
		eff.Ledger = []LedgerEntry{newEntry(LedgerDisputeReversal, d.Amount, d.Currency, d.ID, now)}
	}
	return eff
}

// SendEvidence sends a submitted dispute's evidence to the processor and
// applies its decision: won returns the disputed amount to the balance, lost
// keeps it withdrawn; both send charge.dispute.closed. Running it twice
// is safe: evidence already sent is not sent again.
func (s *Service) SendEvidence(ctx context.Context, sc Scope, id string) (Dispute, error) {
	d, err := s.store.Dispute(ctx, sc, id)
	if err != nil || d.SubmittedAt == nil || d.EvidenceSentAt != nil {
		return d, err // nothing submitted, or sent already
	}
	ev := processor.DisputeEvidence{ID: d.ID, PaymentIntentID: d.PaymentIntentID, Evidence: d.Evidence}
	if _, pi, err := s.store.IntentByID(ctx, d.PaymentIntentID); err != nil {
		return d, err
	} else if pi.SessionID != nil {
		ev.SessionID = *pi.SessionID // a Checkout payment: the processor knows its session
	}
	decision, err := s.proc.SubmitDisputeEvidence(ctx, account(sc), ev)
	if err != nil {
		return d, err
	}
	now := s.clock.Now(ctx, sc)
	return s.store.RecordEvidenceSent(ctx, sc, id, func(d *Dispute) (Effects, error) {
		if d.Status != DisputeUnderReview {
			return Effects{}, nil
		}
		if decision.Status != DisputeWon && decision.Status != DisputeLost {
			return Effects{}, nil // still under review
		}
		return d.close(decision.Status, now), nil
	})
}

// CloseOverdueDisputes closes disputes still waiting for a response past
// their evidence_due_by as lost, as card networks do, each with
// charge.dispute.closed; at most limit at a time. It returns how many.
func (s *Service) CloseOverdueDisputes(ctx context.Context, limit int) (int, error) {
	return s.store.CloseOverdueDisputes(ctx, s.clock.Base(), limit, func(d *Dispute, now time.Time) (Effects, error) {
		return d.close(DisputeLost, now), nil
	})
}

// applyDisputeClosed applies dispute.closed, the card network's decision
// on a dispute opened by dispute.created: won returns the disputed amount,
// lost keeps it withdrawn, with charge.dispute.closed. A dispute decided
// already is left alone; one not opened here yet (the events crossed) is
// retried (ErrNotYet) until dispute.created is applied.
func (s *Service) applyDisputeClosed(ctx context.Context, a *application) error {
	if a.sc == nil {
		return Errorf(ValidationError, "dispute.closed is applied by a worker")
	}
	sc := *a.sc
	status := a.ev.Data.Status
	if status != DisputeWon && status != DisputeLost {
		return s.store.MarkProcessorEvent(ctx, sc, a.ev) // warning_closed and the like: nothing to decide
	}
	pi, err := s.eventPayment(ctx, sc, a.ev)
	if err != nil {
		return err
	}
	if pi.DisputeID == nil {
		return ErrNotYet
	}
	now := s.clock.Now(ctx, sc)
	_, err = s.store.UpdateDispute(ctx, sc, *pi.DisputeID, func(d *Dispute) (Effects, error) {
		eff := Effects{}
		if d.Status != DisputeWon && d.Status != DisputeLost {
			eff = d.close(status, now)
		}
		return a.effects(eff, pi.ID, now), nil
	})
	return err
}

// eventPayment is the payment a stored event is about: by its id, or by
// its checkout session's (the processor knew the session, not our
// payment). A session not paid here yet is ErrNotYet.
func (s *Service) eventPayment(ctx context.Context, sc Scope, ev ProcessorEvent) (PaymentIntent, error) {
	id := ev.PaymentIntentID
	if id == "" && ev.Data.SessionID != "" {
		cs, err := s.store.Session(ctx, sc, ev.Data.SessionID)
		if err != nil {
			return PaymentIntent{}, err
		}
		if cs.PaymentIntentID == nil {
			return PaymentIntent{}, ErrNotYet
		}
		id = *cs.PaymentIntentID
	}
	psc, pi, err := s.store.IntentByID(ctx, id)
	if err != nil {
		return PaymentIntent{}, err
	}
	if psc != sc {
		return PaymentIntent{}, NotFound(PaymentNotFound, id)
	}
	return pi, nil
}
