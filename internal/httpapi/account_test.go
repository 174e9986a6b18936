package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
)

type accountView struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	ChargesEnabled bool   `json:"chargesEnabled"`
	PayoutsEnabled bool   `json:"payoutsEnabled"`
	BankAccount    *struct {
		BankName string `json:"bankName"`
		Last4    string `json:"last4"`
	} `json:"bankAccount"`
	Country         string `json:"country"`
	DefaultCurrency string `json:"defaultCurrency"`
	Livemode        bool   `json:"livemode"`
}

// GET /v1/account answers the key's mode's sandbox account: the account
// the embedded flow names (processor_account), one per mode, with the
// default test bank masked, then the bank an operator set; no key → 401.
func TestAccount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)

	get := func(key string) accountView {
		t.Helper()
		r := h.do("GET", "/v1/account", key, nil)
		wantOK(t, r)
		var a accountView
		r.data(t, &a)
		return a
	}
	test, live := get(s.key), get(s.liveKey)
	if test.ID == live.ID || test.Livemode || !live.Livemode {
		t.Errorf("test and live accounts: got %s (live %v) and %s (live %v), want two, one per mode", test.ID, test.Livemode, live.ID, live.Livemode)
	}
	if test.Object != "account" || !test.ChargesEnabled || !test.PayoutsEnabled || test.Country != "US" || test.DefaultCurrency != "usd" ||
		test.BankAccount == nil || test.BankAccount.Last4 != "6789" || test.BankAccount.BankName == "" {
		t.Errorf("test account: got %+v, want a US usd account, enabled, with the masked test bank", test)
	}
	iv := createIntentOK(t, h, s.key, map[string]any{"amount": 1000, "currency": "usd"})
	if iv.ProcessorAccount != test.ID {
		t.Errorf("processor_account of a payment: got %s, want the account's id %s", iv.ProcessorAccount, test.ID)
	}

	// An operator sets the payout bank (api sandbox payout-bank); the
	// account shows its name and last four digits only.
	bank, err := sandbox.NewPayoutBank("First Test Bank", "110000000", "000123454321", func(r, a string) string { return testBox.Fingerprint("payout-bank", r, a) })
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(h.db, h.url)
	if _, err := sb.SetPayoutBank(context.Background(), processor.Account{MerchantID: s.id}, bank); err != nil {
		t.Fatal(err)
	}
	r := h.do("GET", "/v1/account", s.key, nil)
	wantOK(t, r)
	var got accountView
	r.data(t, &got)
	if got.ID != test.ID || got.BankAccount == nil || got.BankAccount.BankName != "First Test Bank" || got.BankAccount.Last4 != "4321" {
		t.Errorf("account after setting the bank: got %+v, want First Test Bank …4321 on %s", got, test.ID)
	}
	if live := get(s.liveKey); live.BankAccount == nil || live.BankAccount.BankName == "First Test Bank" {
		t.Errorf("live account: got %+v, want the default bank (the test mode's bank is its own)", live)
	}

	wantError(t, h.do("GET", "/v1/account", "", nil), http.StatusUnauthorized, "unauthorized")
}
