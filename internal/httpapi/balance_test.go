package httpapi_test

import (
	"context"
	"testing"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

type moneyView struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type balanceView struct {
	Object    string      `json:"object"`
	Available []moneyView `json:"available"`
	Reserved  []moneyView `json:"reserved"`
	Livemode  bool        `json:"livemode"`
}

func getBalance(t *testing.T, h *harness, key string) balanceView {
	t.Helper()
	r := h.do("GET", "/v1/balance", key, nil)
	wantOK(t, r)
	var b balanceView
	r.data(t, &b)
	if b.Object != "balance" {
		t.Errorf("got object %q, want balance", b.Object)
	}
	return b
}

func wantMoney(t *testing.T, what string, got []moneyView, want ...moneyView) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: got %+v, want %+v", what, got, want)
		}
	}
}

// GET /v1/balance follows the money: payments net of fees, what a pending
// refund reserves, what a succeeded refund and a payout took; per mode.
func TestBalance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)

	b := getBalance(t, h, s.key)
	wantMoney(t, "available before any payment", b.Available)
	wantMoney(t, "reserved before any payment", b.Reserved)

	payIntent(t, h, s.key, 10000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 5000, sandbox.CardSuccess)
	funded := netOf(10000) + netOf(5000)
	wantMoney(t, "available after two payments", getBalance(t, h, s.key).Available, moneyView{funded, "usd"})

	ref := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 1200})
	b = getBalance(t, h, s.key)
	wantMoney(t, "available with a pending refund", b.Available, moneyView{funded - 1200, "usd"})
	wantMoney(t, "reserved with a pending refund", b.Reserved, moneyView{1200, "usd"})

	// The refund, followed from pending to succeeded.
	r := h.do("GET", "/v1/refunds/"+ref.ID, s.key, nil)
	wantOK(t, r)
	var got refundView
	r.data(t, &got)
	if got.ID != ref.ID || got.Status != "pending" || got.AmountCents != 1200 || got.PaymentIntent != pi {
		t.Errorf("GET refund: got %+v, want the pending refund %s of 1200 on %s", got, ref.ID, pi)
	}
	executeRefund(t, h, s.sc, ref.ID)
	r = h.do("GET", "/v1/refunds/"+ref.ID, s.key, nil)
	wantOK(t, r)
	r.data(t, &got)
	if got.Status != "succeeded" {
		t.Errorf("GET refund after execution: got status %q, want succeeded", got.Status)
	}
	b = getBalance(t, h, s.key)
	wantMoney(t, "available after the refund", b.Available, moneyView{funded - 1200, "usd"})
	wantMoney(t, "reserved after the refund", b.Reserved, moneyView{0, "usd"})

	// A payment after the refund is counted before any refund folds it in.
	payIntent(t, h, s.key, 3000, sandbox.CardSuccess)
	wantMoney(t, "available after a third payment", getBalance(t, h, s.key).Available, moneyView{funded - 1200 + netOf(3000), "usd"})

	p, err := h.svc.PayoutAll(context.Background(), s.sc, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Amount != funded-1200+netOf(3000) {
		t.Errorf("payout: got %d, want the whole available balance %d", p.Amount, funded-1200+netOf(3000))
	}
	wantMoney(t, "available after the payout", getBalance(t, h, s.key).Available, moneyView{0, "usd"})

	// Live mode has its own balance, and other merchants see theirs.
	lb := getBalance(t, h, s.liveKey)
	if !lb.Livemode || len(lb.Available) != 0 {
		t.Errorf("live balance: got %+v, want livemode and nothing available", lb)
	}
	other := newShop(h)
	wantMoney(t, "another merchant's balance", getBalance(t, h, other.key).Available)
	checkMoney(t, h, s.sc)
}

func TestGetRefundNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 10000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 5000, sandbox.CardSuccess)
	ref := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 100})
	for name, c := range map[string]struct{ key, id string }{
		"unknown id":         {s.key, "re_unknown"},
		"other mode":         {s.liveKey, ref.ID},
		"other merchant":     {newShop(h).key, ref.ID},
		"a payment, not one": {s.key, pi},
	} {
		t.Run(name, func(t *testing.T) {
			wantError(t, h.forInput(t).do("GET", "/v1/refunds/"+c.id, c.key, nil), 404, string(payments.PaymentNotFound))
		})
	}
}
