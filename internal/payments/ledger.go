package payments

import (
	"context"
	"time"
)

// Ledger entry types: every movement of a merchant's money (decisions.md §3).
const (
	LedgerPayment         = "payment"          // + a succeeded payment net of its fee
	LedgerRefund          = "refund"           // - a succeeded refund (fees are not returned)
	LedgerDispute         = "dispute"          // - the disputed amount, when the dispute opens
	LedgerDisputeReversal = "dispute_reversal" // + the disputed amount, when the dispute is won
	LedgerPayout          = "payout"           // - the available balance paid out
)

// LedgerEntry is one append-only movement of a merchant's balance in one
// currency. Amount is signed: positive in, negative out.
type LedgerEntry struct {
	ID       string
	Type     string
	Amount   int64
	Fee      int64 // the fee kept from a payment, for reporting; already netted from Amount
	Currency string
	SourceID string // the pi_, re_, dp_ or po_ the movement belongs to
	Created  time.Time
}

func newEntry(typ string, amount int64, currency, source string, now time.Time) LedgerEntry {
	return LedgerEntry{ID: NewID("le_"), Type: typ, Amount: amount, Currency: currency, SourceID: source, Created: now}
}

// Balance is a merchant's money in one mode and currency: the sum of its
// ledger and what pending refunds hold back.
type Balance struct {
	Currency    string
	LedgerTotal int64
	Reserved    int64
}

// Available is what refunds and payouts may take.
func (b Balance) Available() int64 { return b.LedgerTotal - b.Reserved }

// JobKind names work a transaction leaves for a worker.
type JobKind string

// The kinds of after-commit work. Each names a row that stays the truth:
// a lost job is found again by the scheduler's relay.
const (
	JobDeliverWebhook JobKind = "webhook_delivery" // a webhook_deliveries row
	JobExecuteRefund  JobKind = "refund"           // a pending refund
	JobProcessorEvent JobKind = "processor_event"  // an unapplied processor event
	JobSubmitEvidence JobKind = "dispute_evidence" // submitted evidence not yet sent to the processor
)

// Job is work to enqueue once its transaction has committed.
type Job struct {
	Kind       JobKind
	ID         string
	MerchantID string
	Live       bool
}

// Effects are what a change writes besides its own rows, in its transaction:
// events for the merchant (the outbox), ledger entries (the balance follows),
// a change to what pending refunds reserve, processor events to apply and
// jobs to run after commit.
type Effects struct {
	Events          []Event
	Ledger          []LedgerEntry
	Reserve         int64 // added to the balance's reserved amount, in ReserveCurrency
	ReserveCurrency string
	ProcessorEvents []ProcessorEvent
	Jobs            []Job
}

// ProcessorEvent is something the processor reported (a dispute opened),
// stored in the transaction that learned of it and applied by a worker.
type ProcessorEvent struct {
	ID              string
	Type            string
	PaymentIntentID string
	Data            map[string]string
	Created         time.Time
}

// Processor event types.
const (
	ProcessorDisputeCreated = "dispute.created"
)

// PayoutAll pays out the scope's whole available balance in currency (or, when
// currency is empty, in the only currency it holds): one payout entry, under
// the balance's lock, so a refund racing it sees the balance after it.
func (s *Service) PayoutAll(ctx context.Context, sc Scope, currency string) (Money, error) {
	if currency != "" {
		cur, err := checkCurrency("currency", &currency)
		if err != nil {
			return Money{}, err
		}
		currency = cur
	}
	if _, err := s.store.MerchantPlan(ctx, sc.MerchantID); err != nil {
		return Money{}, err // no such merchant
	}
	now := s.clock.Now(ctx, sc)
	return s.store.Payout(ctx, sc, currency, func(b Balance) (Effects, error) {
		amount := b.Available()
		if amount <= 0 {
			return Effects{}, nil
		}
		return Effects{Ledger: []LedgerEntry{newEntry(LedgerPayout, -amount, b.Currency, NewID("po_"), now)}}, nil
	})
}

// Balances returns the scope's balances, one per currency.
func (s *Service) Balances(ctx context.Context, sc Scope) ([]Balance, error) {
	return s.store.Balances(ctx, sc)
}

// Money is an amount in one currency: a payout, a line of the balance.
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// BalanceObject is the scope's balance as the API returns it: what refunds
// and payouts may take, and what pending refunds hold back, per currency.
type BalanceObject struct {
	Object    string  `json:"object"`
	Available []Money `json:"available"`
	Reserved  []Money `json:"reserved"`
	Livemode  bool    `json:"livemode"`
}

// BalanceObjectOf returns the API shape of a scope's balances.
func BalanceObjectOf(sc Scope, bs []Balance) BalanceObject {
	o := BalanceObject{Object: "balance", Available: []Money{}, Reserved: []Money{}, Livemode: sc.Live}
	for _, b := range bs {
		o.Available = append(o.Available, Money{Amount: b.Available(), Currency: b.Currency})
		o.Reserved = append(o.Reserved, Money{Amount: b.Reserved, Currency: b.Currency})
	}
	return o
}
