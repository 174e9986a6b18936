package payments

import "time"

// The kinds of a subscription's charges.
const (
	ChargeFirst     = "first"     // the first period, paid at checkout
	ChargeRenewal   = "renewal"   // a later period
	ChargeProration = "proration" // an always_invoice quantity change
)

// The statuses of a subscription's charge.
const (
	ChargePending   = "pending" // to be attempted (again) at NextAttemptAt
	ChargeSucceeded = "succeeded"
	ChargeFailed    = "failed" // given up: no further attempt
)

// SubscriptionCharge is one charge of a subscription (a row of
// subscription_charges). A period's charge exists once per (subscription,
// PeriodStart), which PostgreSQL enforces; its ID is the processor's
// idempotency key. A proration charge has no period and names ChangeID.
// Its payment (PaymentIntentID) is a payment like any other.
type SubscriptionCharge struct {
	ID              string
	SubscriptionID  string
	Kind            string
	PeriodStart     *time.Time
	PeriodEnd       *time.Time
	ChangeID        *string
	Amount          int64
	Currency        string
	Status          string
	Attempts        int
	NextAttemptAt   *time.Time
	FirstFailedAt   *time.Time
	DeclineCode     *string
	PaymentIntentID *string
	Created         time.Time
	// Started is the newest attempt whose processor call may have been
	// made, recorded before the call; nil before the first call.
	Started *ChargeAttempt
}

// ChargeAttempt is attempt N of a subscription charge as it was sent to
// the processor, under the key chargeKey(charge, N): the saved card and the
// amount charged (grossed up when fees are passed on). A run that finds it
// started and not settled sends it again exactly so.
type ChargeAttempt struct {
	N      int
	CardID string
	Amount int64
}

// Behaviours of a saved sandbox card: what every later charge of it does.
const (
	CardSucceeds = "succeeds"
	CardDisputes = "disputes" // charges succeed, then a dispute opens
	CardDeclines = "declines" // saved, but every charge is declined
)

// SavedCard is a card the processor saved for a customer's later charges:
// its reference (card_… in the sandbox), brand, last four digits, expiry
// and, in the sandbox, the behaviour its number stands for. Never the number.
type SavedCard struct {
	ID         string `json:"id"`
	CustomerID string `json:"customer,omitempty"`
	Brand      string `json:"brand"`
	Last4      string `json:"last4"`
	ExpMonth   int    `json:"exp_month"`
	ExpYear    int    `json:"exp_year"`
	Behavior   string `json:"behavior,omitempty"`
}
