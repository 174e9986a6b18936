package payments

import (
	"context"

	"paysvc/internal/processor"
)

// AccountObject is the connected account as GET /v1/account returns it
// (decisions.md §2): camelCase, as the spec names its fields.
type AccountObject struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	ChargesEnabled  bool         `json:"chargesEnabled"`
	PayoutsEnabled  bool         `json:"payoutsEnabled"`
	BankAccount     *BankAccount `json:"bankAccount"`
	Country         string       `json:"country"`
	DefaultCurrency string       `json:"defaultCurrency"`
	Livemode        bool         `json:"livemode"`
}

// BankAccount is the payout bank, masked: its name and last four digits.
type BankAccount struct {
	BankName string `json:"bankName"`
	Last4    string `json:"last4"`
}

// Account returns the scope's account at the processor: the sandbox's test
// account, or the merchant's Stripe connected account for the key's mode.
// bankAccount is null when the account has no payout bank.
// Codes: processor_error.
func (s *Service) Account(ctx context.Context, sc Scope) (AccountObject, error) {
	a, err := s.proc.Account(ctx, account(sc))
	if err != nil {
		return AccountObject{}, err
	}
	return AccountObjectOf(a, sc.Live), nil
}

// AccountObjectOf is a processor's account as the API shows it.
func AccountObjectOf(a processor.ConnectedAccount, live bool) AccountObject {
	o := AccountObject{
		ID: a.ID, Object: "account", ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled,
		Country: a.Country, DefaultCurrency: a.DefaultCurrency, Livemode: live,
	}
	if a.BankLast4 != "" {
		o.BankAccount = &BankAccount{BankName: a.BankName, Last4: a.BankLast4}
	}
	return o
}
