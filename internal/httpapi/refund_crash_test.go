package httpapi_test

import (
	"testing"

	"paysvc/internal/processor/sandbox"
)

// A refund whose request committed but whose process died before the API
// stored the idempotent response. Since the response commits with the
// change (TestIdempotencyKilledAtEachPoint in cmd/api) only a version
// before that leaves such a claim, e.g. during a rolling deploy: after the
// 30 s takeover of a legacy claim, the retry with the same key runs the
// handler again, and must get the first refund back instead of refunding
// twice. After the key's 24 h, the key is new.
func TestRefundIdempotentAcrossCrash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 3000, sandbox.CardSuccess)
	body := map[string]any{"payment_intent": pi, "amount": 1000}

	first := postRefund(h, s.key, body, "Idempotency-Key", "crash-1")
	wantOK(t, first)
	var want refundView
	first.data(t, &want)

	// The crash: the key is left in flight, with no response, long enough
	// ago that a retry takes it over.
	crash := func() {
		t.Helper()
		if _, err := h.db.Exec(`UPDATE idempotency_keys SET status = NULL, response = NULL, request_id = NULL,
			locked_at = now() - interval '1 minute' WHERE merchant_id = $1 AND key = 'crash-1'`, s.id); err != nil {
			t.Fatal(err)
		}
	}
	crash()
	retry := postRefund(h, s.key, body, "Idempotency-Key", "crash-1")
	wantOK(t, retry)
	var got refundView
	retry.data(t, &got)
	if got.ID != want.ID || got.AmountCents != 1000 {
		t.Errorf("retry after the crash: got refund %s of %d, want the first one, %s", got.ID, got.AmountCents, want.ID)
	}
	if n := countRows(t, h, "refunds", s.id); n != 1 {
		t.Errorf("got %d refunds, want 1", n)
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 1000 {
		t.Errorf("got pending %d, want 1000 (reserved once)", st.Pending)
	}
	wantBalance(t, h, s.sc, netOf(20000)+netOf(3000), 1000)

	// Past the key's lifetime the same key makes a new refund.
	if _, err := h.db.Exec(`UPDATE refunds SET created_at = now() - interval '25 hours' WHERE id = $1`, want.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(`DELETE FROM idempotency_keys WHERE merchant_id = $1 AND key = 'crash-1'`, s.id); err != nil {
		t.Fatal(err)
	}
	again := postRefund(h, s.key, body, "Idempotency-Key", "crash-1")
	wantOK(t, again)
	var fresh refundView
	again.data(t, &fresh)
	if fresh.ID == want.ID {
		t.Errorf("a key past its 24 h gave back the old refund %s, want a new one", want.ID)
	}
	if n := countRows(t, h, "refunds", s.id); n != 2 {
		t.Errorf("got %d refunds, want 2", n)
	}
	checkMoney(t, h, s.sc)
}
