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
