package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// quantityView is what the quantity tests read of a subscription.
type quantityView struct {
	ID                 string `json:"id"`
	Quantity           int    `json:"quantity"`
	Status             string `json:"status"`
	CurrentPeriodStart int64  `json:"current_period_start"`
	CurrentPeriodEnd   int64  `json:"current_period_end"`
	PendingProration   int64  `json:"pending_proration_amount"`
}

// quantitySub subscribes (inline: 1000 usd every 30 days, qty seats) and
// moves the merchant's clock 11 days on; it returns the subscription and
// the proration date 10 days into its period, when 20 of 30 days remain:
// each proration line is then amount × quantity × 2/3, rounded on its own.
func quantitySub(t *testing.T, h *harness, s shop, qty int) (quantityView, int64) {
	t.Helper()
	sub := newSubscription(t, h, s.key, "amount_cents", 1000, "interval", "day", "interval_count", 30, "quantity", qty)
	if _, err := h.svc.AdvanceClock(context.Background(), s.sc, 11*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	v := quantityView{ID: sub.ID, Quantity: sub.Quantity, CurrentPeriodStart: sub.CurrentPeriodStart, CurrentPeriodEnd: sub.CurrentPeriodEnd}
	if v.CurrentPeriodEnd-v.CurrentPeriodStart != 30*24*3600 {
		t.Fatalf("period: got %d s, want 30 days", v.CurrentPeriodEnd-v.CurrentPeriodStart)
	}
	return v, v.CurrentPeriodStart + 10*24*3600
}

func patchQuantity(h *harness, key, id string, body map[string]any, headers ...string) *response {
	return h.do("PATCH", "/v1/subscriptions/"+id+"/quantity", key, body, headers...)
}

// proration charges of a subscription: amount and status, oldest first.
func prorationCharges(t *testing.T, h *harness, subID string) []string {
	t.Helper()
	var out []string
	rows, err := h.db.Query(`SELECT id, amount, status FROM subscription_charges WHERE subscription_id = $1 AND kind = 'proration' ORDER BY created_at`, subID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var amount int64
		if err := rows.Scan(&id, &amount, &status); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d %s", amount, status))
	}
	return out
}

// TestQuantityProrationBehaviors: each behaviour's amounts, exact to the
// unit, through the API (to the second, each line rounded half away from
// zero, as Stripe does).
func TestQuantityProrationBehaviors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	for _, c := range []struct {
		name               string
		from, to           int
		behavior           string
		pending            int64
		charges            string
		items, unbilledSum int64
	}{
		// credit −round(1000×1×2/3) = −667, charge +round(1000×2×2/3) = +1333
		{"create_prorations up", 1, 2, "create_prorations", 666, "[]", 2, 666},
		{"create_prorations down", 2, 1, "create_prorations", -666, "[]", 2, -666},
		{"always_invoice up", 1, 2, "always_invoice", 0, "[666 pending]", 2, 0},
		// −1333 + 667: a credit, nothing charged, it stays pending.
		{"always_invoice down", 2, 1, "always_invoice", -666, "[]", 2, -666},
		// credit −667, charge +round(1000×3×2/3) = +2000
		{"always_invoice to three", 1, 3, "always_invoice", 0, "[1333 pending]", 2, 0},
		{"none", 1, 5, "none", 0, "[]", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub, at := quantitySub(t, h, s, c.from)
			r := patchQuantity(h, s.key, sub.ID, map[string]any{"quantity": c.to, "proration_behavior": c.behavior, "proration_date": at})
			wantOK(t, r)
			var got quantityView
			r.data(t, &got)
			if got.Quantity != c.to || got.PendingProration != c.pending {
				t.Errorf("got quantity %d pending %d, want %d and %d", got.Quantity, got.PendingProration, c.to, c.pending)
			}
			if ch := prorationCharges(t, h, sub.ID); fmt.Sprint(ch) != c.charges {
				t.Errorf("proration charges: got %v, want %s", ch, c.charges)
			}
			var n, unbilled int64
			if err := h.db.QueryRow(`SELECT count(*), coalesce(sum(amount) FILTER (WHERE billed_by IS NULL), 0)
				FROM subscription_proration_items WHERE subscription_id = $1`, sub.ID).Scan(&n, &unbilled); err != nil {
				t.Fatal(err)
			}
			if n != c.items || unbilled != c.unbilledSum {
				t.Errorf("proration items: got %d, unbilled sum %d, want %d and %d", n, unbilled, c.items, c.unbilledSum)
			}
			updated := 0
			for _, ev := range events(t, h, s.id, false) {
				if ev.Type == "customer.subscription.updated" && ev.Data.ID == sub.ID {
					updated++
				}
			}
			if updated != 1 {
				t.Errorf("customer.subscription.updated events of the subscription: got %d, want 1", updated)
			}
		})
	}
}

// The pending items of create_prorations are charged with the next
// renewal; an always_invoice charge goes through the worker's charge step,
// once however often the client retries the request.
func TestQuantityChargesOnceAndAtRenewal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	ctx := context.Background()

	sub, at := quantitySub(t, h, s, 1)
	wantOK(t, patchQuantity(h, s.key, sub.ID, map[string]any{"quantity": 2, "proration_date": at}))
	a, err := h.svc.AdvanceClock(ctx, s.sc, 20*24*time.Hour)
	if err != nil || a.Renewals != 1 {
		t.Fatalf("renewal: got %+v, %v, want one", a, err)
	}
	var amounts []int64
	if err := h.db.Select(&amounts, `SELECT amount FROM payment_intents WHERE subscription_id = $1 ORDER BY created_at`, sub.ID); err != nil {
		t.Fatal(err)
	}
	// First period 1000 at checkout; then 2 × 1000 + 666 pending.
	if fmt.Sprint(amounts) != "[1000 2666]" {
		t.Errorf("payments: got %v, want [1000 2666]", amounts)
	}
	if got := getSubscription(t, h, s.key, sub.ID); got.Quantity != 2 {
		t.Errorf("after the renewal: quantity %d, want 2", got.Quantity)
	}
	var pending int64
	if err := h.db.Get(&pending, `SELECT pending_proration FROM subscriptions WHERE id = $1`, sub.ID); err != nil || pending != 0 {
		t.Errorf("pending after the renewal: got %d, %v, want 0", pending, err)
	}

	sub2, at2 := quantitySub(t, h, s, 1)
	body := map[string]any{"quantity": 2, "proration_behavior": "always_invoice", "proration_date": at2}
	first := patchQuantity(h, s.key, sub2.ID, body, "Idempotency-Key", "seats-2")
	wantOK(t, first)
	again := patchQuantity(h, s.key, sub2.ID, body, "Idempotency-Key", "seats-2")
	wantOK(t, again)
	if again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body.Data) != string(first.Body.Data) {
		t.Errorf("retry: got replayed %q, body %s, want the first response replayed", again.Header.Get("Idempotent-Replayed"), again.Body.Data)
	}
	var chID string
	if err := h.db.Get(&chID, `SELECT id FROM subscription_charges WHERE subscription_id = $1 AND kind = 'proration'`, sub2.ID); err != nil {
		t.Fatalf("one proration charge after a retried request: %v", err)
	}
	for range 2 { // a duplicated task
		if _, err := h.svc.ChargeSubscription(ctx, s.sc, chID); err != nil {
			t.Fatal(err)
		}
	}
	if ch := prorationCharges(t, h, sub2.ID); fmt.Sprint(ch) != "[666 succeeded]" {
		t.Errorf("proration charge: got %v, want 666 succeeded", ch)
	}
	var n int
	if err := h.db.Get(&n, `SELECT count(*) FROM payment_intents WHERE subscription_id = $1 AND amount = 666 AND status = 'succeeded'
		AND fee_amount > 0`, sub2.ID); err != nil || n != 1 {
		t.Errorf("payments of 666: got %d, %v, want 1", n, err)
	}
}

// A preview binds: the change made with it bills exactly its amounts,
// once, and is refused when the subscription changed since.
func TestQuantityPreviewBinding(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	sub, at := quantitySub(t, h, s, 1)

	r := h.do("POST", "/v1/subscriptions/"+sub.ID+"/quantity/preview", s.key,
		map[string]any{"quantity": 3, "proration_behavior": "always_invoice", "proration_date": at})
	wantOK(t, r)
	var p struct {
		ID              string `json:"id"`
		AmountDue       int64  `json:"amount_due"`
		ProrationAmount int64  `json:"proration_amount"`
		Pending         int64  `json:"pending_proration_amount"`
		ExpiresAt       int64  `json:"expires_at"`
		Lines           []struct {
			Amount int64 `json:"amount"`
		} `json:"lines"`
	}
	r.data(t, &p)
	if p.AmountDue != 1333 || p.ProrationAmount != 1333 || p.Pending != 0 || len(p.Lines) != 2 || p.Lines[0].Amount != -667 || p.Lines[1].Amount != 2000 {
		t.Fatalf("preview: got %+v, want lines −667 and 2000, 1333 due", p)
	}
	if got := getSubscription(t, h, s.key, sub.ID); got.Quantity != 1 {
		t.Errorf("after the preview: quantity %d, want 1 (nothing changed)", got.Quantity)
	}
	wantError(t, patchQuantity(h, s.key, sub.ID, map[string]any{"preview": p.ID, "quantity": 4}), http.StatusBadRequest, "validation_error")
	wantOK(t, patchQuantity(h, s.key, sub.ID, map[string]any{"preview": p.ID}))
	if ch := prorationCharges(t, h, sub.ID); fmt.Sprint(ch) != "[1333 pending]" {
		t.Errorf("charge of the previewed change: got %v, want 1333", ch)
	}
	wantError(t, patchQuantity(h, s.key, sub.ID, map[string]any{"preview": p.ID}), http.StatusBadRequest, "validation_error")

	// A preview of a subscription that changes before it is used.
	r = h.do("POST", "/v1/subscriptions/"+sub.ID+"/quantity/preview", s.key, map[string]any{"quantity": 5})
	wantOK(t, r)
	r.data(t, &p)
	wantOK(t, patchQuantity(h, s.key, sub.ID, map[string]any{"quantity": 4, "proration_behavior": "none"}))
	wantError(t, patchQuantity(h, s.key, sub.ID, map[string]any{"preview": p.ID}), http.StatusBadRequest, "validation_error")
	if got := getSubscription(t, h, s.key, sub.ID); got.Quantity != 4 {
		t.Errorf("after the refused preview: quantity %d, want 4", got.Quantity)
	}

	// Another merchant's preview is unknown here, and so is its subscription.
	other := newShop(h)
	wantError(t, patchQuantity(h, other.key, sub.ID, map[string]any{"quantity": 2}), http.StatusNotFound, "subscription_not_found")
}

// Refused inputs and an ended subscription: 4xx, nothing changed.
func TestQuantityRefusals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	sub := newSubscription(t, h, s.key)
	for _, body := range []map[string]any{
		{}, {"quantity": 0}, {"quantity": 1001}, {"quantity": 2, "proration_behavior": "sometimes"},
		{"quantity": 2, "item_id": "si_nope"}, {"quantity": 2, "item_id": "x"}, {"preview": "sqp_nope"}, {"preview": "nope"},
		{"quantity": 2, "proration_date": 1}, {"quantity": 2, "proration_date": 4102444800},
	} {
		wantError(t, patchQuantity(h, s.key, sub.ID, body), http.StatusBadRequest, "validation_error")
	}
	wantError(t, patchQuantity(h, s.key, "sub_unknown", map[string]any{"quantity": 2}), http.StatusNotFound, "subscription_not_found")
	f := false
	wantOK(t, h.do("POST", "/v1/subscriptions/"+sub.ID+"/cancel", s.key, map[string]any{"at_period_end": f}))
	wantError(t, patchQuantity(h, s.key, sub.ID, map[string]any{"quantity": 2}), http.StatusBadRequest, "validation_error")
	if got := getSubscription(t, h, s.key, sub.ID); got.Quantity != 1 {
		t.Errorf("quantity after refusals: got %d, want 1", got.Quantity)
	}
}

// A declined always_invoice charge is not retried on its own: its amount
// and items go back to pending, for the next renewal to charge.
func TestQuantityDeclinedChargeGoesBackToPending(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	sub, at := quantitySub(t, h, s, 1)
	card := "card_declines_" + sub.ID
	if _, err := h.db.Exec(`INSERT INTO sandbox_cards (id, merchant_id, livemode, customer_id, brand, last4, exp_month, exp_year, behavior)
		SELECT $1, merchant_id, livemode, customer_id, 'visa', '0341', 12, 2040, 'declines' FROM subscriptions WHERE id = $2`, card, sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Exec(`UPDATE subscriptions SET card_id = $1 WHERE id = $2`, card, sub.ID); err != nil {
		t.Fatal(err)
	}
	wantOK(t, patchQuantity(h, s.key, sub.ID, map[string]any{"quantity": 2, "proration_behavior": "always_invoice", "proration_date": at}))
	var chID string
	if err := h.db.Get(&chID, `SELECT id FROM subscription_charges WHERE subscription_id = $1 AND kind = 'proration'`, sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.ChargeSubscription(context.Background(), s.sc, chID); err != nil {
		t.Fatal(err)
	}
	if ch := prorationCharges(t, h, sub.ID); fmt.Sprint(ch) != "[666 failed]" {
		t.Errorf("proration charge: got %v, want 666 failed", ch)
	}
	r := h.do("GET", "/v1/subscriptions/"+sub.ID, s.key, nil)
	wantOK(t, r)
	var got quantityView
	r.data(t, &got)
	var unbilled int64
	if err := h.db.Get(&unbilled, `SELECT coalesce(sum(amount), 0) FROM subscription_proration_items WHERE subscription_id = $1 AND billed_by IS NULL`, sub.ID); err != nil {
		t.Fatal(err)
	}
	if got.PendingProration != 666 || unbilled != 666 || got.Status != "active" {
		t.Errorf("after the decline: got %s pending %d, unbilled items %d, want active, 666 and 666", got.Status, got.PendingProration, unbilled)
	}
}
