package sandbox

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"paysvc/internal/processor"
)

// The sandbox account's fixed facts: a US test account, and the test bank
// it pays out to until an operator sets another (`api sandbox payout-bank`).
const (
	accountCountry  = "US"
	accountCurrency = "usd"
	defaultBankName = "STRIPE TEST BANK"
	defaultBankLast = "6789"
)

// Account describes the merchant's sandbox account in acct's mode: able to
// charge and pay out, with its payout bank masked to name and last4.
func (s *Sandbox) Account(ctx context.Context, acct processor.Account) (processor.ConnectedAccount, error) {
	c, err := s.client(ctx, acct)
	if err != nil {
		return processor.ConnectedAccount{}, err
	}
	const q = `SELECT coalesce(bank_name, $3) AS bank_name, coalesce(bank_last4, $4) AS bank_last4
	FROM sandbox_accounts WHERE merchant_id = $1 AND livemode = $2`
	var bank struct {
		Name  string `db:"bank_name"`
		Last4 string `db:"bank_last4"`
	}
	if err := s.db.GetContext(ctx, &bank, q, acct.MerchantID, acct.Live, defaultBankName, defaultBankLast); err != nil {
		return processor.ConnectedAccount{}, &processor.Error{Op: "account", Retryable: true, Code: "sandbox_unavailable", Err: err}
	}
	return processor.ConnectedAccount{
		ID: c.AccountID, ChargesEnabled: true, PayoutsEnabled: true, BankName: bank.Name, BankLast4: bank.Last4,
		Country: accountCountry, DefaultCurrency: accountCurrency,
	}, nil
}

// PayoutBank is a payout bank as the sandbox keeps it: what may be shown
// and a fingerprint, never the numbers.
type PayoutBank struct {
	Name        string
	Last4       string
	Fingerprint string
}

// ErrBadBank is a payout bank the sandbox refuses; its message never
// repeats the numbers given.
var ErrBadBank = errors.New("invalid payout bank")

func badBank(why string) error { return errors.Join(ErrBadBank, errors.New(why)) }

// NewPayoutBank checks a US bank account (a 9-digit ABA routing number with
// a valid checksum, a 4 to 17 digit account number, a bank name) and
// reduces it to what the sandbox keeps: the name, the account's last four
// digits and fingerprint(routing, account), a keyed hash that tells two
// banks apart without the numbers. The numbers go no further than this.
func NewPayoutBank(name, routing, account string, fingerprint func(routing, account string) string) (PayoutBank, error) {
	name = strings.TrimSpace(name)
	if name == "" || utf8.RuneCountInString(name) > 100 || strings.ContainsAny(name, "\x00\r\n") {
		return PayoutBank{}, badBank("the bank name must be 1 to 100 characters on one line")
	}
	if !digits(routing, 9, 9) || !abaChecksum(routing) {
		return PayoutBank{}, badBank("the routing number must be 9 digits with a valid ABA checksum")
	}
	if !digits(account, 4, 17) {
		return PayoutBank{}, badBank("the account number must be 4 to 17 digits")
	}
	return PayoutBank{Name: name, Last4: account[len(account)-4:], Fingerprint: fingerprint(routing, account)}, nil
}

func digits(s string, min, max int) bool {
	if len(s) < min || len(s) > max {
		return false
	}
	return strings.Trim(s, "0123456789") == ""
}

// abaChecksum is the routing number's check: 3·(d1+d4+d7) + 7·(d2+d5+d8) +
// (d3+d6+d9) is a multiple of 10.
func abaChecksum(r string) bool {
	w := [3]int{3, 7, 1}
	sum := 0
	for i := 0; i < 9; i++ {
		sum += w[i%3] * int(r[i]-'0')
	}
	return sum%10 == 0
}

// SetPayoutBank sets the merchant's sandbox payout bank in acct's mode,
// creating the sandbox account if needed.
func (s *Sandbox) SetPayoutBank(ctx context.Context, acct processor.Account, b PayoutBank) (processor.ConnectedAccount, error) {
	if _, err := s.client(ctx, acct); err != nil {
		return processor.ConnectedAccount{}, err
	}
	const q = `UPDATE sandbox_accounts SET bank_name = $3, bank_last4 = $4, bank_fingerprint = $5
	WHERE merchant_id = $1 AND livemode = $2`
	if _, err := s.db.ExecContext(ctx, q, acct.MerchantID, acct.Live, b.Name, b.Last4, b.Fingerprint); err != nil {
		return processor.ConnectedAccount{}, err
	}
	return s.Account(ctx, acct)
}
