package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// withStdin runs fn with the CLI's stdin reading in.
func withStdin(in string, fn func()) {
	orig := stdin
	stdin = strings.NewReader(in)
	defer func() { stdin = orig }()
	fn()
}

// TestSandboxPayoutBank sets a payout bank from the CLI: the account shows
// the name and last4 only, and the full account and routing numbers appear
// nowhere: not on stdout or stderr, not in the logs, not in a dump of the
// whole database, not in the API's account.
func TestSandboxPayoutBank(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch := newMerchant(t, db)
	const routing, number = "021000021", "987654321012"
	var r result
	withStdin(number+"\n", func() {
		r = cli(t, "sandbox", "payout-bank", "--merchant", mch, "--mode", "test", "--bank-name", "Chase", "--routing-number", routing, "--account-number-stdin")
	})
	r.wantExit(t, 0, "sandbox payout-bank")
	var out struct {
		ID          string `json:"id"`
		BankAccount struct {
			BankName string `json:"bankName"`
			Last4    string `json:"last4"`
		} `json:"bankAccount"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.BankAccount.BankName != "Chase" || out.BankAccount.Last4 != "1012" || !strings.HasPrefix(out.ID, "acct_") {
		t.Errorf("stdout: got %s (%v), want the account with Chase …1012", r.stdout, err)
	}
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(sandbox.New(db, "http://sandbox.invalid")))
	acct, err := svc.Account(context.Background(), payments.Scope{MerchantID: mch})
	if err != nil {
		t.Fatal(err)
	}
	api, _ := json.Marshal(acct)
	dump, err := exec.Command("pg_dump", "--data-only", testenv.DatabaseURL(t)).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	var fp string
	if err := db.Get(&fp, `SELECT bank_fingerprint FROM sandbox_accounts WHERE merchant_id = $1 AND NOT livemode`, mch); err != nil || len(fp) != 64 {
		t.Errorf("fingerprint: got %q (%v), want a keyed hash", fp, err)
	}
	for where, text := range map[string]string{"stdout": r.stdout, "stderr": r.stderr, "logs": r.logs, "database dump": string(dump), "GET /v1/account": string(api)} {
		for _, secret := range []string{number, routing, number[:8]} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %q of the bank numbers", where, secret)
			}
		}
	}

	// The same bank again has the same fingerprint; the live mode keeps
	// its own (default) bank.
	withStdin(number, func() {
		cli(t, "sandbox", "payout-bank", "--merchant", mch, "--mode", "test", "--bank-name", "Chase", "--routing-number", routing, "--account-number-stdin").wantExit(t, 0, "again")
	})
	var again string
	if err := db.Get(&again, `SELECT bank_fingerprint FROM sandbox_accounts WHERE merchant_id = $1 AND NOT livemode`, mch); err != nil || again != fp {
		t.Errorf("fingerprint of the same bank: got %q, want %q", again, fp)
	}

	for _, c := range []struct {
		name, stdin string
		args        []string
	}{
		{"number on the command line", number, []string{"--bank-name", "Chase", "--routing-number", routing}},
		{"bad routing checksum", number, []string{"--bank-name", "Chase", "--routing-number", "021000022", "--account-number-stdin"}},
		{"short account number", "123", []string{"--bank-name", "Chase", "--routing-number", routing, "--account-number-stdin"}},
		{"no bank name", number, []string{"--routing-number", routing, "--account-number-stdin"}},
	} {
		var r result
		withStdin(c.stdin, func() {
			r = cli(t, append([]string{"sandbox", "payout-bank", "--merchant", mch, "--mode", "test"}, c.args...)...)
		})
		if r.code == 0 || strings.Contains(r.stderr+r.stdout+r.logs, number) || strings.Contains(r.stderr, "021000022") {
			t.Errorf("%s: got exit %d, stderr %q: want a refusal that repeats no number", c.name, r.code, r.stderr)
		}
	}
}

// TestMerchantStripeAccount records a merchant's connected account per
// mode; a bad id, an unknown merchant and an account taken by another
// merchant are refused.
func TestMerchantStripeAccount(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch, other := newMerchant(t, db), newMerchant(t, db)
	acct := payments.NewID("acct_")
	r := cli(t, "merchant", "stripe-account", "--merchant", mch, "--mode", "live", "--account", acct)
	r.wantExit(t, 0, "merchant stripe-account")
	if got := r.decode(t); got["stripe_account"] != acct || got["merchant_id"] != mch || got["mode"] != "live" {
		t.Errorf("stdout: got %v", got)
	}
	var stored string
	if err := db.Get(&stored, `SELECT account_id FROM stripe_accounts WHERE merchant_id = $1 AND livemode`, mch); err != nil || stored != acct {
		t.Errorf("stored: got %q (%v), want %s", stored, err, acct)
	}
	// The same account in test mode too (a Stripe account has both).
	cli(t, "merchant", "stripe-account", "--merchant", mch, "--mode", "test", "--account", acct).wantExit(t, 0, "test mode")
	for name, args := range map[string][]string{
		"bad id":           {"--merchant", mch, "--mode", "live", "--account", "sk_live_notanaccount"},
		"unknown merchant": {"--merchant", "mch_nobody", "--mode", "live", "--account", payments.NewID("acct_")},
		"taken":            {"--merchant", other, "--mode", "live", "--account", acct},
		"no mode":          {"--merchant", mch, "--account", acct},
	} {
		r := cli(t, append([]string{"merchant", "stripe-account"}, args...)...)
		if r.code == 0 || strings.Contains(r.stderr, "sk_live_") {
			t.Errorf("%s: got exit %d stderr %q, want a refusal that does not echo the value", name, r.code, r.stderr)
		}
	}
}
