package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// TestSandboxAdvanceClock moves one merchant's test-mode clock from the
// command line: the move adds up, what came due (a checkout session past
// its expiry) is done before the command returns, and nobody else's time
// moves — not the merchant's live mode, not another merchant. It reports
// the moved scope's work alone: another merchant's session that its sweep
// expired as well (overdue in real time) is not counted.
func TestSandboxAdvanceClock(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	ctx := context.Background()
	svc := payments.NewService(postgres.New(db), nil, time.Now,
		payments.WithProcessor(sandbox.New(db, "http://sandbox.invalid")), payments.WithSessionTTL(time.Hour))
	mch, other := newMerchant(t, db), newMerchant(t, db)
	session := func(sc payments.Scope) string {
		t.Helper()
		amount, qty, cur, name, u := int64(1500), int64(1), "usd", "Mug", "https://shop.example/done"
		cs, err := svc.CreateSession(ctx, sc, payments.SessionInput{
			LineItems:  []payments.LineItemInput{{Amount: &amount, Currency: &cur, Name: &name, Quantity: &qty}},
			SuccessURL: &u, CancelURL: &u,
		})
		if err != nil {
			t.Fatal(err)
		}
		return cs.ID
	}
	status := func(id string) string {
		t.Helper()
		var s string
		if err := db.Get(&s, `SELECT status FROM checkout_sessions WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine, mineLive, theirs := session(payments.Scope{MerchantID: mch}), session(payments.Scope{MerchantID: mch, Live: true}), session(payments.Scope{MerchantID: other})

	advance := func(by string) map[string]any {
		t.Helper()
		args := []string{"sandbox", "advance-clock", "--merchant", mch, "--mode", "test", "--by", by}
		r := cli(t, args...)
		r.wantExit(t, 0, strings.Join(args, " "))
		return r.decode(t)
	}
	got := advance("30m")
	if got["offset_seconds"] != float64(1800) || got["mode"] != "test" || got["merchant_id"] != mch {
		t.Errorf("after 30m: got %v, want offset_seconds 1800 for %s in test mode", got, mch)
	}
	if s := status(mine); s != payments.SessionOpen {
		t.Errorf("30 minutes into a 1 h session: got status %s, want open", s)
	}
	overdue := session(payments.Scope{MerchantID: other})
	if _, err := db.Exec(`UPDATE checkout_sessions SET expires_at = now() - interval '1 minute' WHERE id = $1`, overdue); err != nil {
		t.Fatal(err)
	}
	got = advance("1d")
	if got["offset_seconds"] != float64(1800+86400) {
		t.Errorf("after 30m and 1d: got offset_seconds %v, want %d", got["offset_seconds"], 1800+86400)
	}
	if got["expired_sessions"] != float64(1) {
		t.Errorf("got expired_sessions %v, want 1: the merchant's session", got["expired_sessions"])
	}
	if now, _ := got["now"].(float64); time.Until(time.Unix(int64(now), 0)) < 86400*time.Second {
		t.Errorf("got now %v, want a day and a half hour ahead of real time", got["now"])
	}
	if s := status(mine); s != payments.SessionExpired {
		t.Errorf("the moved scope's session: got status %s, want expired when the command returns", s)
	}
	if s := status(overdue); s != payments.SessionExpired {
		t.Errorf("another merchant's overdue session: got status %s, want expired by the sweep", s)
	}
	for what, id := range map[string]string{"the merchant's live session": mineLive, "another merchant's session": theirs} {
		if s := status(id); s != payments.SessionOpen {
			t.Errorf("%s: got status %s, want open (its clock did not move)", what, s)
		}
	}
}

func TestSandboxAdvanceClockErrors(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch := newMerchant(t, db)
	for _, tt := range []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"no by", []string{"--merchant", mch, "--mode", "test"}, "--by"},
		{"zero", []string{"--merchant", mch, "--mode", "test", "--by", "0s"}, "by"},
		{"negative", []string{"--merchant", mch, "--mode", "test", "--by", "-5m"}, "by"},
		{"not a duration", []string{"--merchant", mch, "--mode", "test", "--by", "soon"}, "--by"},
		{"fractional days", []string{"--merchant", mch, "--mode", "test", "--by", "1.5d"}, "--by"},
		{"too far", []string{"--merchant", mch, "--mode", "test", "--by", "4000d"}, "--by"},
		{"bad mode", []string{"--merchant", mch, "--mode", "prod", "--by", "1h"}, "mode"},
		{"no merchant", []string{"--mode", "test", "--by", "1h"}, "merchant"},
		{"unknown merchant", []string{"--merchant", "mch_doesnotexist0000000000", "--mode", "test", "--by", "1h"}, "mch_doesnotexist0000000000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"sandbox", "advance-clock"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 {
				t.Fatalf("api %s: got exit 0 (stdout %s), want non-zero", strings.Join(args, " "), r.stdout)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("got stderr %q, want a message about %q", r.stderr, tt.wantStderr)
			}
		})
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM sandbox_clocks WHERE merchant_id = $1`, mch); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d sandbox clocks after refused moves, want none", n)
	}
}
