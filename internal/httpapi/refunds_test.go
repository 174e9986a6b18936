package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// --- views and helpers for money: refunds, balances, the ledger -------------

// refundView is a refund as the API returns it.
type refundView struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Status        string  `json:"status"`
	AmountCents   int64   `json:"amount_cents"`
	Currency      string  `json:"currency"`
	PaymentIntent string  `json:"payment_intent"`
	SessionID     *string `json:"session_id"`
	Reason        *string `json:"reason"`
	FailureReason *string `json:"failure_reason"`
	Created       int64   `json:"created"`
	Livemode      bool    `json:"livemode"`
}

// moneyPaymentView is a listed test payment's money fields.
type moneyPaymentView struct {
	ID             string  `json:"id"`
	Status         string  `json:"status"`
	AmountReceived int64   `json:"amount_received"`
	FeeAmount      int64   `json:"fee_amount"`
	AmountRefunded int64   `json:"amount_refunded"`
	Dispute        *string `json:"dispute"`
}

// shop is a free-plan merchant with a key of each mode.
type shop struct {
	id      string
	key     string // test mode
	liveKey string
	sc      payments.Scope // test mode
}

func newShop(h *harness) shop {
	h.t.Helper()
	id := h.merchant(payments.PlanFree)
	return shop{id: id, key: h.key(id, false), liveKey: h.key(id, true), sc: payments.Scope{MerchantID: id}}
}

// netOf is what a free-plan payment of amount USD cents adds to the balance.
func netOf(amount int64) int64 { return amount - payments.Fee(payments.PlanFree, "usd", amount) }

// payIntent makes an embedded payment of amount USD cents for key with card
// and returns its id; a success card must succeed, any other must decline.
func payIntent(t *testing.T, h *harness, key string, amount int64, card string) string {
	t.Helper()
	iv := createIntentOK(t, h, key, map[string]any{"amount": amount, "currency": "usd"})
	r := confirm(t, h, iv.PaymentIntentID, iv.PublishableKey, iv.ClientSecret, card)
	if card == sandbox.CardSuccess || card == sandbox.CardDispute {
		if r.Status != http.StatusOK || r.Body.Status != "succeeded" {
			t.Fatalf("confirm %s with %s: got %d %s, want 200 succeeded", iv.PaymentIntentID, card, r.Status, r.Raw)
		}
	} else if r.Status != http.StatusPaymentRequired {
		t.Fatalf("confirm %s with %s: got %d %s, want 402", iv.PaymentIntentID, card, r.Status, r.Raw)
	}
	return iv.PaymentIntentID
}

// paySession pays a checkout session of amount USD cents for key with a
// success card on the hosted page; it returns the session's and the
// payment's ids.
func paySession(t *testing.T, h *harness, key string, amount int64) (cs, pi string) {
	t.Helper()
	s := createSessionOK(t, h, key, sessionBody([]map[string]any{customItem(amount, "usd", "Thing", 1)}))
	payOK(t, h, s, "buyer@example.com", "Buyer")
	got := getSessionOK(t, h, key, s.ID)
	if got.PaymentStatus != "paid" || got.PaymentIntent == nil {
		t.Fatalf("session %s after paying: got payment_status %s payment_intent %s", s.ID, got.PaymentStatus, deref(got.PaymentIntent))
	}
	return s.ID, *got.PaymentIntent
}

func postRefund(h *harness, key string, body any, headers ...string) *response {
	h.t.Helper()
	return h.do("POST", "/v1/refunds", key, body, headers...)
}

// refundOK creates a refund and checks the fields every new refund has.
func refundOK(t *testing.T, h *harness, key string, body any) refundView {
	t.Helper()
	r := postRefund(h, key, body)
	wantOK(t, r)
	var v refundView
	r.data(t, &v)
	if !strings.HasPrefix(v.ID, "re_") || v.Object != "refund" || v.Status != "pending" || v.FailureReason != nil {
		t.Errorf("got refund %s, want id re_…, object refund, status pending, no failure_reason", r.Body.Data)
	}
	return v
}

// executeRefund runs a pending refund as the worker would and wants it to succeed.
func executeRefund(t *testing.T, h *harness, sc payments.Scope, id string) {
	t.Helper()
	r, err := h.svc.ExecuteRefund(context.Background(), sc, id)
	if err != nil {
		t.Fatalf("ExecuteRefund %s: %v", id, err)
	}
	if r.Status != payments.RefundSucceeded {
		t.Fatalf("ExecuteRefund %s: got status %s, want succeeded", id, r.Status)
	}
}

// paymentState is what a payment has given back or holds for refunds (SQL).
type paymentState struct {
	Received int64   `db:"amount_received"`
	Refunded int64   `db:"amount_refunded"`
	Pending  int64   `db:"amount_refund_pending"`
	Dispute  *string `db:"dispute_id"`
}

func paymentStateOf(t *testing.T, h *harness, pi string) paymentState {
	t.Helper()
	var s paymentState
	if err := h.db.Get(&s, `SELECT amount_received, amount_refunded, amount_refund_pending, dispute_id FROM payment_intents WHERE id = $1`, pi); err != nil {
		t.Fatalf("payment %s: %v", pi, err)
	}
	return s
}

// usdBalance is the scope's USD balance (h.svc.Balances); found is false
// when it has none.
func usdBalance(t *testing.T, h *harness, sc payments.Scope) (b payments.Balance, found bool) {
	t.Helper()
	bs, err := h.svc.Balances(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if b.Currency == "usd" {
			return b, true
		}
	}
	return payments.Balance{Currency: "usd"}, false
}

// wantBalance asserts the scope's USD balance.
func wantBalance(t *testing.T, h *harness, sc payments.Scope, ledgerTotal, reserved int64) {
	t.Helper()
	b, _ := usdBalance(t, h, sc)
	if b.LedgerTotal != ledgerTotal || b.Reserved != reserved {
		t.Errorf("got balance ledger_total %d reserved %d, want %d and %d", b.LedgerTotal, b.Reserved, ledgerTotal, reserved)
	}
}

// paymentOf finds a test payment in GET /v1/test-payments.
func paymentOf(t *testing.T, h *harness, key, pi string) moneyPaymentView {
	t.Helper()
	query := "limit=100"
	for {
		r := h.do("GET", "/v1/test-payments?"+query, key, nil)
		wantOK(t, r)
		var page struct {
			Data    []moneyPaymentView `json:"data"`
			HasMore bool               `json:"has_more"`
		}
		r.data(t, &page)
		for _, p := range page.Data {
			if p.ID == pi {
				return p
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			t.Fatalf("payment %s not in GET /v1/test-payments", pi)
		}
		query = "limit=100&starting_after=" + page.Data[len(page.Data)-1].ID
	}
}

// checkMoney asserts the invariants that tie a scope's money together:
// the folded ledger entries sum to each balance's ledger_total (payment
// credits wait unfolded until a refund or payout folds them in); reserved is what pending
// refunds hold and never more than the ledger (the tests keep balances
// funded: a dispute may legitimately take the ledger below what pending
// refunds reserved); every payment's refunded and pending amounts are its
// succeeded and pending refunds and never more than it received.
func checkMoney(t *testing.T, h *harness, sc payments.Scope) {
	t.Helper()
	var bad []string
	const q = `
	SELECT format('balance %s: ledger_total %s, folded ledger entries sum to %s, reserved %s, pending refunds %s',
		b.currency, b.ledger_total, l.sum, b.reserved, r.sum)
	FROM balances b
	CROSS JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS sum FROM ledger_entries
		WHERE merchant_id = b.merchant_id AND livemode = b.livemode AND currency = b.currency AND folded) l
	CROSS JOIN LATERAL (SELECT coalesce(sum(amount), 0) AS sum FROM refunds
		WHERE merchant_id = b.merchant_id AND livemode = b.livemode AND currency = b.currency AND status = 'pending') r
	WHERE b.merchant_id = $1 AND b.livemode = $2
		AND (l.sum <> b.ledger_total OR r.sum <> b.reserved OR b.reserved > greatest(b.ledger_total, 0) OR b.reserved < 0)
	UNION ALL
	SELECT format('payment %s: received %s, refunded %s (succeeded refunds %s), pending %s (pending refunds %s)',
		p.id, p.amount_received, p.amount_refunded, r.done, p.amount_refund_pending, r.pending)
	FROM payment_intents p
	CROSS JOIN LATERAL (SELECT coalesce(sum(amount) FILTER (WHERE status = 'succeeded'), 0) AS done,
		coalesce(sum(amount) FILTER (WHERE status = 'pending'), 0) AS pending
		FROM refunds WHERE payment_intent_id = p.id) r
	WHERE p.merchant_id = $1 AND p.livemode = $2
		AND (r.done <> p.amount_refunded OR r.pending <> p.amount_refund_pending
			OR p.amount_refunded + p.amount_refund_pending > p.amount_received)`
	if err := h.db.Select(&bad, q, sc.MerchantID, sc.Live); err != nil {
		t.Fatalf("check money: %v", err)
	}
	for _, b := range bad {
		t.Errorf("money of %s: %s", sc.MerchantID, b)
	}
}

// moneySnapshot is everything of the merchants a refund could change, as
// comparable text: refunds, balances, payments' refund fields, ledger
// entries, events and processor jobs' rows.
func moneySnapshot(t *testing.T, h *harness, merchants ...string) string {
	t.Helper()
	const q = `SELECT json_build_object(
		'refunds', (SELECT count(*) FROM refunds WHERE merchant_id = ANY($1)),
		'ledger', (SELECT count(*) FROM ledger_entries WHERE merchant_id = ANY($1)),
		'events', (SELECT count(*) FROM events WHERE merchant_id = ANY($1)),
		'balances', (SELECT coalesce(json_agg(b ORDER BY b.merchant_id, b.livemode, b.currency), '[]')
			FROM (SELECT merchant_id, livemode, currency, ledger_total, reserved FROM balances WHERE merchant_id = ANY($1)) b),
		'payments', (SELECT coalesce(json_agg(p ORDER BY p.id), '[]')
			FROM (SELECT id, amount_refunded, amount_refund_pending, dispute_id FROM payment_intents WHERE merchant_id = ANY($1)) p)
	)::text`
	var s string
	if err := h.db.Get(&s, q, pq.Array(merchants)); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// processorEventOf is the id of the processor event the dispute card left on a payment.
func processorEventOf(t *testing.T, h *harness, pi string) string {
	t.Helper()
	var id string
	if err := h.db.Get(&id, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, pi); err != nil {
		t.Fatalf("processor event of %s: %v", pi, err)
	}
	return id
}

// openDisputeOn applies the processor event of a payment made with the
// dispute card, as the worker would, and returns the dispute's id.
func openDisputeOn(t *testing.T, h *harness, sc payments.Scope, pi string) string {
	t.Helper()
	if err := h.svc.ApplyProcessorEvent(context.Background(), sc, processorEventOf(t, h, pi)); err != nil {
		t.Fatalf("ApplyProcessorEvent for %s: %v", pi, err)
	}
	st := paymentStateOf(t, h, pi)
	if st.Dispute == nil {
		t.Fatalf("payment %s: got no dispute after its processor event", pi)
	}
	return *st.Dispute
}

// doAsync is h.do for other goroutines: it returns failures instead of
// ending the test, including a response that does not match the OpenAPI
// description (returned with the response).
func (h *harness) doAsync(method, path, key string, body any) (*response, error) {
	enc, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(method, h.url+path, bytes.NewReader(enc))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	verr := validator.Response(req, resp)
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	r := &response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		return r, fmt.Errorf("body is not JSON: %q", raw)
	}
	if verr != nil {
		return r, fmt.Errorf("response does not match openapi.yaml: %w", verr)
	}
	return r, nil
}

// refundsAtOnce sends the refund bodies concurrently, all released together,
// and returns the responses in order; a failed request ends the test.
func refundsAtOnce(t *testing.T, h *harness, key string, bodies []map[string]any) []*response {
	t.Helper()
	out := make([]*response, len(bodies))
	errs := make([]error, len(bodies))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = h.doAsync("POST", "/v1/refunds", key, b)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil && out[i] == nil {
			t.Fatalf("refund %d: %v", i, err)
		}
		if err != nil {
			t.Errorf("refund %d: %v", i, err)
		}
		checkEnvelope(t, out[i])
	}
	return out
}

func ledgerEntries(t *testing.T, h *harness, sc payments.Scope, typ string) map[string]int64 {
	t.Helper()
	var rows []struct {
		Source string `db:"source_id"`
		Amount int64  `db:"amount"`
	}
	if err := h.db.Select(&rows, `SELECT source_id, amount FROM ledger_entries WHERE merchant_id = $1 AND livemode = $2 AND type = $3`,
		sc.MerchantID, sc.Live, typ); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[r.Source] += r.Amount
	}
	return out
}

// eventsOf returns the scope's events of one type, data decoded into a map.
func eventsOf(t *testing.T, h *harness, sc payments.Scope, typ string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range events(t, h, sc.MerchantID, sc.Live) {
		if e.Type != typ {
			continue
		}
		var v struct {
			Data map[string]any `json:"data"`
		}
		if err := json.Unmarshal(e.Raw, &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v.Data)
	}
	return out
}

// --- rejections -----------------------------------------------------------------

// TestRefundRejections sends every refusal of POST /v1/refunds and checks
// each creates nothing: no refund, no balance change, no reservation on the
// payment, no ledger entry or event.
func TestRefundRejections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	a, b := newShop(h), newShop(h)
	payIntent(t, h, a.key, 20000, sandbox.CardSuccess) // funds A's balance
	paid := payIntent(t, h, a.key, 2000, sandbox.CardSuccess)
	paidCS, paidCSPI := paySession(t, h, a.key, 3000)
	open := createSessionOK(t, h, a.key, sessionBody(oneItem()))
	declined := payIntent(t, h, a.key, 2000, sandbox.CardDeclined)
	declinedCS := createSessionOK(t, h, a.key, sessionBody(oneItem()))
	if r := payCheckout(t, h, declinedCS.ID, cardForm(sandbox.CardDeclined, "d@example.com", "D")); r.Status != http.StatusPaymentRequired {
		t.Fatalf("pay with a declined card: got %d, want 402", r.Status)
	}
	unconfirmed := createIntentOK(t, h, a.key, map[string]any{"amount": 500, "currency": "usd"}).PaymentIntentID
	disputed := payIntent(t, h, a.key, 2500, sandbox.CardDispute)
	openDisputeOn(t, h, a.sc, disputed)
	pendingFull := payIntent(t, h, a.key, 1200, sandbox.CardSuccess)
	refundOK(t, h, a.key, map[string]any{"payment_intent": pendingFull})
	doneFull := payIntent(t, h, a.key, 1300, sandbox.CardSuccess)
	executeRefund(t, h, a.sc, refundOK(t, h, a.key, map[string]any{"payment_intent": doneFull}).ID)
	partly := payIntent(t, h, a.key, 2000, sandbox.CardSuccess)
	refundOK(t, h, a.key, map[string]any{"payment_intent": partly, "amount": 500})
	theirs := payIntent(t, h, b.key, 5000, sandbox.CardSuccess)
	theirCS, _ := paySession(t, h, b.key, 5000)

	// C's only payment is 1000: 911 available after the fee.
	c := newShop(h)
	cOnly := payIntent(t, h, c.key, 1000, sandbox.CardSuccess)
	// D's balance row is gone: nothing can vouch for a refund.
	d := newShop(h)
	dPaid := payIntent(t, h, d.key, 5000, sandbox.CardSuccess)
	if _, err := h.db.Exec(`DELETE FROM balances WHERE merchant_id = $1`, d.id); err != nil {
		t.Fatal(err)
	}

	pi := func(id string, kv ...any) map[string]any {
		m := map[string]any{"payment_intent": id}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	const unknownPI, unknownCS = "pi_doesnotexist00000000000", "cs_doesnotexist00000000000"
	for _, tc := range []struct {
		name   string
		key    string
		body   any
		status int
		code   string
		field  string // for validation_error: named in the message
	}{
		// validation_error
		{"neither id", a.key, map[string]any{"amount": 100}, 400, "validation_error", "session_id"},
		{"empty body", a.key, map[string]any{}, 400, "validation_error", "payment_intent"},
		{"null ids", a.key, map[string]any{"payment_intent": nil, "session_id": nil}, 400, "validation_error", "payment_intent"},
		{"both ids", a.key, map[string]any{"payment_intent": paidCSPI, "session_id": paidCS}, 400, "validation_error", "session_id"},
		{"payment_intent with a cs_ id", a.key, pi(paidCS), 400, "validation_error", "payment_intent"},
		{"payment_intent with a re_ id", a.key, pi("re_abcdefghijklmnopqrstu"), 400, "validation_error", "payment_intent"},
		{"payment_intent empty", a.key, pi(""), 400, "validation_error", "payment_intent"},
		{"session_id with a pi_ id", a.key, map[string]any{"session_id": paid}, 400, "validation_error", "session_id"},
		{"payment_intent a number", a.key, pi("x", "payment_intent", 5), 400, "validation_error", "payment_intent"},
		{"amount 0", a.key, pi(paid, "amount", 0), 400, "validation_error", "amount"},
		{"amount negative", a.key, pi(paid, "amount", -100), 400, "validation_error", "amount"},
		{"amount fractional", a.key, pi(paid, "amount", 1.5), 400, "validation_error", "amount"},
		{"amount a string", a.key, pi(paid, "amount", "100"), 400, "validation_error", "amount"},
		{"amount above the maximum", a.key, pi(paid, "amount", payments.MaxAmount+1), 400, "validation_error", "amount"},
		{"reason unknown", a.key, pi(paid, "reason", "changed_mind"), 400, "validation_error", "reason"},
		{"reason empty", a.key, pi(paid, "reason", ""), 400, "validation_error", "reason"},
		{"reason a number", a.key, pi(paid, "reason", 1), 400, "validation_error", "reason"},
		{"unknown field", a.key, pi(paid, "currency", "usd"), 400, "validation_error", "currency"},
		{"not JSON", a.key, `{"payment_intent":`, 400, "validation_error", ""},
		{"body an array", a.key, `[]`, 400, "validation_error", ""},
		// payment_not_found
		{"unknown payment_intent", a.key, pi(unknownPI), 404, "payment_not_found", ""},
		{"unknown session", a.key, map[string]any{"session_id": unknownCS}, 404, "payment_not_found", ""},
		{"unpaid open session", a.key, map[string]any{"session_id": open.ID}, 404, "payment_not_found", ""},
		{"session with a declined payment", a.key, map[string]any{"session_id": declinedCS.ID}, 404, "payment_not_found", ""},
		{"declined payment", a.key, pi(declined), 404, "payment_not_found", ""},
		{"payment never confirmed", a.key, pi(unconfirmed), 404, "payment_not_found", ""},
		{"another merchant's payment", a.key, pi(theirs), 404, "payment_not_found", ""},
		{"another merchant's payment, with amount", a.key, pi(theirs, "amount", 100), 404, "payment_not_found", ""},
		{"another merchant's session", a.key, map[string]any{"session_id": theirCS}, 404, "payment_not_found", ""},
		{"another merchant's disputed payment", b.key, pi(disputed), 404, "payment_not_found", ""},
		{"test payment with the live key", a.liveKey, pi(paid), 404, "payment_not_found", ""},
		{"test session with the live key", a.liveKey, map[string]any{"session_id": paidCS}, 404, "payment_not_found", ""},
		// refund_not_allowed
		{"disputed payment", a.key, pi(disputed), 400, "refund_not_allowed", ""},
		{"disputed payment, partial", a.key, pi(disputed, "amount", 1), 400, "refund_not_allowed", ""},
		// already_refunded
		{"fully refunded, refund pending", a.key, pi(pendingFull), 400, "already_refunded", ""},
		{"fully refunded, refund pending, with amount", a.key, pi(pendingFull, "amount", 1), 400, "already_refunded", ""},
		{"fully refunded, refund succeeded", a.key, pi(doneFull), 400, "already_refunded", ""},
		// refund_amount_too_large
		{"amount above the payment", a.key, pi(paid, "amount", 2001), 400, "refund_amount_too_large", ""},
		{"amount above the payment, by session", a.key, map[string]any{"session_id": paidCS, "amount": 3001}, 400, "refund_amount_too_large", ""},
		{"amount above what remains", a.key, pi(partly, "amount", 1501), 400, "refund_amount_too_large", ""},
		// insufficient_balance: fees are not returned
		{"full refund of the only payment", c.key, pi(cOnly), 400, "insufficient_balance", ""},
		{"one cent above the available balance", c.key, pi(cOnly, "amount", netOf(1000)+1), 400, "insufficient_balance", ""},
		// balance_verification_failed
		{"no balance row", d.key, pi(dPaid, "amount", 100), 400, "balance_verification_failed", ""},
		{"no balance row, full refund", d.key, pi(dPaid), 400, "balance_verification_failed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := moneySnapshot(t, h, a.id, b.id, c.id, d.id)
			r := postRefund(h, tc.key, tc.body)
			if tc.field != "" {
				wantValidation(t, r, tc.field)
			} else {
				wantError(t, r, tc.status, tc.code)
			}
			if after := moneySnapshot(t, h, a.id, b.id, c.id, d.id); after != before {
				t.Errorf("a rejected refund changed money:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	t.Run("the available balance exactly", func(t *testing.T) {
		v := refundOK(t, h, c.key, pi(cOnly, "amount", netOf(1000)))
		if v.AmountCents != netOf(1000) {
			t.Errorf("got amount_cents %d, want %d", v.AmountCents, netOf(1000))
		}
		wantBalance(t, h, c.sc, netOf(1000), netOf(1000))
		r := postRefund(h, c.key, pi(cOnly, "amount", 1))
		wantError(t, r, 400, "insufficient_balance")
	})
	for _, s := range []shop{a, b, c} {
		checkMoney(t, h, s.sc)
	}
}

// --- the happy path -------------------------------------------------------------

func TestRefundLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 5000, sandbox.CardSuccess)
	funded := netOf(20000) + netOf(5000)
	wantBalance(t, h, s.sc, funded, 0)

	before := time.Now().Unix()
	partial := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 2000, "reason": "requested_by_customer"})
	wantSameJSON(t, "partial refund", partial, refundView{
		ID: partial.ID, Object: "refund", Status: "pending", AmountCents: 2000, Currency: "usd", PaymentIntent: pi,
		Reason: ptr("requested_by_customer"), Created: partial.Created,
	})
	if partial.Created < before || partial.Created > time.Now().Unix() {
		t.Errorf("got created %d, want about %d", partial.Created, before)
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 2000 || st.Refunded != 0 {
		t.Errorf("after a partial refund: got pending %d refunded %d, want 2000 and 0", st.Pending, st.Refunded)
	}
	wantBalance(t, h, s.sc, funded, 2000)

	rest := refundOK(t, h, s.key, map[string]any{"payment_intent": pi})
	if rest.AmountCents != 3000 || rest.Reason != nil || rest.PaymentIntent != pi {
		t.Errorf("full refund after a partial one: got %+v, want 3000 of %s without reason", rest, pi)
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 5000 {
		t.Errorf("got pending %d, want 5000", st.Pending)
	}
	wantBalance(t, h, s.sc, funded, 5000)
	wantError(t, postRefund(h, s.key, map[string]any{"payment_intent": pi}), 400, "already_refunded")
	if got := paymentOf(t, h, s.key, pi).AmountRefunded; got != 0 {
		t.Errorf("before execution: got amount_refunded %d, want 0 (pending refunds are not refunded yet)", got)
	}
	if evs := eventsOf(t, h, s.sc, "charge.refunded"); len(evs) != 0 {
		t.Errorf("got %d charge.refunded events before execution, want 0", len(evs))
	}

	executeRefund(t, h, s.sc, partial.ID)
	if p := paymentOf(t, h, s.key, pi); p.AmountRefunded != 2000 {
		t.Errorf("after the first execution: got amount_refunded %d, want 2000", p.AmountRefunded)
	}
	wantBalance(t, h, s.sc, funded-2000, 3000)
	executeRefund(t, h, s.sc, rest.ID)
	// Executing again (a retried job) changes nothing.
	executeRefund(t, h, s.sc, rest.ID)

	p := paymentOf(t, h, s.key, pi)
	if p.AmountRefunded != 5000 || p.AmountReceived != 5000 || p.Status != "succeeded" || p.Dispute != nil {
		t.Errorf("after both executions: got payment %+v, want 5000 received and refunded, succeeded, no dispute", p)
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 0 || st.Refunded != 5000 {
		t.Errorf("got pending %d refunded %d, want 0 and 5000", st.Pending, st.Refunded)
	}
	wantBalance(t, h, s.sc, funded-5000, 0)
	wantSameJSON(t, "refund ledger entries", ledgerEntries(t, h, s.sc, "refund"), map[string]int64{partial.ID: -2000, rest.ID: -3000})
	var statuses []string
	if err := h.db.Select(&statuses, `SELECT status FROM refunds WHERE payment_intent_id = $1 ORDER BY amount`, pi); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(statuses) != "[succeeded succeeded]" {
		t.Errorf("got refund statuses %v, want both succeeded", statuses)
	}
	evs := eventsOf(t, h, s.sc, "charge.refunded")
	got := map[string]string{}
	for _, e := range evs {
		got[fmt.Sprint(e["id"])] = fmt.Sprintf("%v %v %v %v", e["object"], e["status"], e["amount_cents"], e["payment_intent"])
	}
	wantSameJSON(t, "charge.refunded events by data.id", got, map[string]string{
		partial.ID: "refund succeeded 2000 " + pi,
		rest.ID:    "refund succeeded 3000 " + pi,
	})
	if len(evs) != 2 {
		t.Errorf("got %d charge.refunded events, want 2", len(evs))
	}
	checkMoney(t, h, s.sc)

	t.Run("by session_id", func(t *testing.T) {
		cs, csPI := paySession(t, h, s.key, 4000)
		v := refundOK(t, h, s.key, map[string]any{"session_id": cs, "amount": 1500, "reason": "duplicate"})
		wantSameJSON(t, "refund by session", v, refundView{
			ID: v.ID, Object: "refund", Status: "pending", AmountCents: 1500, Currency: "usd", PaymentIntent: csPI,
			SessionID: &cs, Reason: ptr("duplicate"), Created: v.Created,
		})
		executeRefund(t, h, s.sc, v.ID)
		if p := paymentOf(t, h, s.key, csPI); p.AmountRefunded != 1500 {
			t.Errorf("got amount_refunded %d, want 1500", p.AmountRefunded)
		}
		// The rest, by the payment's id: the two names share one payment.
		v2 := refundOK(t, h, s.key, map[string]any{"payment_intent": csPI})
		if v2.AmountCents != 2500 || deref(v2.SessionID) != cs {
			t.Errorf("got amount_cents %d session_id %s, want 2500 and %s", v2.AmountCents, deref(v2.SessionID), cs)
		}
		wantError(t, postRefund(h, s.key, map[string]any{"session_id": cs, "amount": 1}), 400, "already_refunded")
		checkMoney(t, h, s.sc)
	})
	t.Run("live mode", func(t *testing.T) {
		live := payIntent(t, h, s.liveKey, 9000, sandbox.CardSuccess)
		v := refundOK(t, h, s.liveKey, map[string]any{"payment_intent": live, "amount": 100})
		if !v.Livemode {
			t.Errorf("got livemode false for a live refund")
		}
		liveSc := payments.Scope{MerchantID: s.id, Live: true}
		wantBalance(t, h, liveSc, netOf(9000), 100)
		executeRefund(t, h, liveSc, v.ID)
		wantBalance(t, h, liveSc, netOf(9000)-100, 0)
		checkMoney(t, h, liveSc)
	})
}

// --- concurrency ----------------------------------------------------------------

// TestRefundConcurrentPartials races 50 partial refunds of 300 on one
// payment of 10000 on a well-funded balance: exactly 33 fit.
func TestRefundConcurrentPartials(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 10000, sandbox.CardSuccess)
	funded := 2*netOf(20000) + netOf(10000)

	bodies := make([]map[string]any, 50)
	for i := range bodies {
		bodies[i] = map[string]any{"payment_intent": pi, "amount": 300}
	}
	var created []string
	var sum int64
	for i, r := range refundsAtOnce(t, h, s.key, bodies) {
		switch {
		case r.Status == http.StatusOK:
			var v refundView
			r.data(t, &v)
			created = append(created, v.ID)
			sum += v.AmountCents
		case r.Status == http.StatusBadRequest && (r.code() == "refund_amount_too_large" || r.code() == "already_refunded"):
		default:
			t.Errorf("refund %d: got %d %s, want 200 or 400 refund_amount_too_large/already_refunded", i, r.Status, r.Raw)
		}
	}
	if sum > 10000 {
		t.Errorf("refunds worth %d created on a payment of 10000", sum)
	}
	if len(created) != 33 {
		t.Errorf("got %d refunds created, want 33 (33 × 300 ≤ 10000 < 34 × 300)", len(created))
	}
	if st := paymentStateOf(t, h, pi); st.Pending != sum {
		t.Errorf("got amount_refund_pending %d, want the sum of created refunds %d", st.Pending, sum)
	}
	wantBalance(t, h, s.sc, funded, sum)
	checkMoney(t, h, s.sc)

	// Execute them all at once, as a worker pool would.
	var wg sync.WaitGroup
	errs := make([]error, len(created))
	for i, id := range created {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.svc.ExecuteRefund(context.Background(), s.sc, id)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("ExecuteRefund %s: %v", created[i], err)
		}
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 0 || st.Refunded != sum {
		t.Errorf("after execution: got pending %d refunded %d, want 0 and %d", st.Pending, st.Refunded, sum)
	}
	wantBalance(t, h, s.sc, funded-sum, 0)
	checkMoney(t, h, s.sc)

	// What remains, and then nothing.
	last := refundOK(t, h, s.key, map[string]any{"payment_intent": pi})
	if last.AmountCents != 10000-sum {
		t.Errorf("got the last refund of %d, want the remaining %d", last.AmountCents, 10000-sum)
	}
	wantError(t, postRefund(h, s.key, map[string]any{"payment_intent": pi, "amount": 1}), 400, "already_refunded")
}

// TestRefundConcurrentBalance races full refunds of different payments
// against a balance that covers only two of them: the reservations never
// exceed the balance, and the losers get insufficient_balance.
func TestRefundConcurrentBalance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	var pis []string
	for range 6 {
		pis = append(pis, payIntent(t, h, s.key, 1000, sandbox.CardSuccess))
	}
	// Pay the balance out, then take three more payments: 3 × 911 = 2733
	// available for nine refundable payments of 1000.
	if p, err := h.svc.PayoutAll(context.Background(), s.sc, ""); err != nil || p.Amount != 6*netOf(1000) {
		t.Fatalf("PayoutAll: got %+v, %v, want %d", p, err, 6*netOf(1000))
	}
	for range 3 {
		pis = append(pis, payIntent(t, h, s.key, 1000, sandbox.CardSuccess))
	}
	available := 3 * netOf(1000)
	wantBalance(t, h, s.sc, available, 0)

	// Watch the balance while the refunds race.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	var watchErr []string
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var b struct {
				LedgerTotal int64 `db:"ledger_total"`
				Reserved    int64 `db:"reserved"`
			}
			if err := h.db.Get(&b, `SELECT ledger_total, reserved FROM balances WHERE merchant_id = $1 AND NOT livemode`, s.id); err != nil {
				watchErr = append(watchErr, err.Error())
				return
			}
			if b.Reserved > b.LedgerTotal {
				watchErr = append(watchErr, fmt.Sprintf("reserved %d > ledger_total %d", b.Reserved, b.LedgerTotal))
				return // once is enough
			}
		}
	}()
	bodies := make([]map[string]any, len(pis))
	for i, pi := range pis {
		bodies[i] = map[string]any{"payment_intent": pi}
	}
	rs := refundsAtOnce(t, h, s.key, bodies)
	close(stop)
	watch.Wait()
	for _, e := range watchErr {
		t.Errorf("during the race: %s", e)
	}

	var sum int64
	ok, losers := 0, 0
	for i, r := range rs {
		switch {
		case r.Status == http.StatusOK:
			var v refundView
			r.data(t, &v)
			ok++
			sum += v.AmountCents
		case r.Status == http.StatusBadRequest && r.code() == "insufficient_balance":
			losers++
			if st := paymentStateOf(t, h, pis[i]); st.Pending != 0 {
				t.Errorf("payment %s refused: got pending %d, want 0", pis[i], st.Pending)
			}
		default:
			t.Errorf("refund %d: got %d %s, want 200 or 400 insufficient_balance", i, r.Status, r.Raw)
		}
	}
	if ok != 2 || losers != 7 || sum != 2000 {
		t.Errorf("got %d created (worth %d) and %d insufficient_balance, want 2 (2000) and 7", ok, sum, losers)
	}
	wantBalance(t, h, s.sc, available, sum)
	checkMoney(t, h, s.sc)
}

// TestRefundRacesDispute races a refund against the dispute of the same
// payment, many times: whichever wins, the dispute takes exactly what the
// refund left, and the ledger stays whole.
func TestRefundRacesDispute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 50000, sandbox.CardSuccess)
	ctx := context.Background()
	const rounds, amount = 20, 2000
	won := map[string]int{}
	paidIn := netOf(50000) // what the payments put in the ledger
	for i := range rounds {
		// Even rounds refund part of the payment, odd rounds all of it.
		body := map[string]any{}
		refundAmount := int64(amount)
		if i%2 == 0 {
			refundAmount = 500
			body["amount"] = refundAmount
		}
		pi := payIntent(t, h, s.key, amount, sandbox.CardDispute)
		paidIn += netOf(amount)
		body["payment_intent"] = pi
		pev := processorEventOf(t, h, pi)

		var (
			wg     sync.WaitGroup
			start  = make(chan struct{})
			r      *response
			rerr   error
			derr   error
			opened = len(eventsOf(t, h, s.sc, "charge.dispute.created"))
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			r, rerr = h.doAsync("POST", "/v1/refunds", s.key, body)
		}()
		go func() {
			defer wg.Done()
			<-start
			derr = h.svc.ApplyProcessorEvent(ctx, s.sc, pev)
		}()
		close(start)
		wg.Wait()
		if r == nil {
			t.Fatalf("round %d: refund: %v", i, rerr)
		}
		if rerr != nil {
			t.Errorf("round %d: refund: %v", i, rerr)
		}
		if derr != nil {
			t.Errorf("round %d: ApplyProcessorEvent: %v", i, derr)
		}

		st := paymentStateOf(t, h, pi)
		var disputed int64
		if st.Dispute != nil {
			if err := h.db.Get(&disputed, `SELECT amount FROM disputes WHERE id = $1`, *st.Dispute); err != nil {
				t.Fatal(err)
			}
		}
		newEvents := len(eventsOf(t, h, s.sc, "charge.dispute.created")) - opened
		switch {
		case r.Status == http.StatusOK:
			won["refund"]++
			var v refundView
			r.data(t, &v)
			if v.AmountCents != refundAmount || st.Pending != refundAmount {
				t.Errorf("round %d: got refund of %d, pending %d, want %d", i, v.AmountCents, st.Pending, refundAmount)
			}
			// The dispute takes what remains; nothing remains after a full refund.
			if want := int64(amount) - refundAmount; disputed != want || (want == 0) != (st.Dispute == nil) {
				t.Errorf("round %d: refund first: got dispute %s of %d, want %d", i, deref(st.Dispute), disputed, want)
			}
			wantEvents := 0
			if refundAmount < amount {
				wantEvents = 1
			}
			if newEvents != wantEvents {
				t.Errorf("round %d: got %d charge.dispute.created events, want %d", i, newEvents, wantEvents)
			}
		case r.Status == http.StatusBadRequest && r.code() == "refund_not_allowed":
			won["dispute"]++
			if st.Dispute == nil || disputed != amount || st.Pending != 0 {
				t.Errorf("round %d: dispute first: got dispute %s of %d, pending %d, want the whole %d disputed, nothing pending",
					i, deref(st.Dispute), disputed, st.Pending, amount)
			}
			if newEvents != 1 {
				t.Errorf("round %d: got %d charge.dispute.created events, want 1", i, newEvents)
			}
		default:
			t.Errorf("round %d: refund: got %d %s, want 200 or 400 refund_not_allowed", i, r.Status, r.Raw)
		}
		checkMoney(t, h, s.sc)
		if t.Failed() {
			break
		}
	}
	t.Logf("winners over %d rounds: %v", rounds, won)
	var ledgerSum, disputedSum, pendingSum int64
	if err := h.db.Get(&ledgerSum, `SELECT coalesce(sum(amount), 0) FROM ledger_entries WHERE merchant_id = $1 AND NOT livemode`, s.id); err != nil {
		t.Fatal(err)
	}
	if err := h.db.Get(&disputedSum, `SELECT coalesce(sum(amount), 0) FROM disputes WHERE merchant_id = $1`, s.id); err != nil {
		t.Fatal(err)
	}
	if err := h.db.Get(&pendingSum, `SELECT coalesce(sum(amount), 0) FROM refunds WHERE merchant_id = $1 AND status = 'pending'`, s.id); err != nil {
		t.Fatal(err)
	}
	if want := paidIn - disputedSum; ledgerSum != want {
		t.Errorf("got ledger sum %d, want payments %d less disputes %d = %d", ledgerSum, paidIn, disputedSum, want)
	}
	wantBalance(t, h, s.sc, ledgerSum, pendingSum)
}

// --- payout, idempotency -------------------------------------------------------

func TestRefundAfterPayout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	ctx := context.Background()
	pi := payIntent(t, h, s.key, 3000, sandbox.CardSuccess)
	payIntent(t, h, s.key, 2000, sandbox.CardSuccess)
	pending := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 500})
	funded := netOf(3000) + netOf(2000)

	p, err := h.svc.PayoutAll(ctx, s.sc, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Amount != funded-500 || p.Currency != "usd" {
		t.Errorf("got payout %+v, want %d usd (the balance less the pending refund's 500)", p, funded-500)
	}
	wantBalance(t, h, s.sc, 500, 500)
	if got := ledgerEntries(t, h, s.sc, "payout"); len(got) != 1 {
		t.Errorf("got payout entries %v, want one", got)
	} else {
		for src, amt := range got {
			if !strings.HasPrefix(src, "po_") || amt != -(funded-500) {
				t.Errorf("got payout entry %s %d, want po_… %d", src, amt, -(funded - 500))
			}
		}
	}
	before := moneySnapshot(t, h, s.id)
	wantError(t, postRefund(h, s.key, map[string]any{"payment_intent": pi, "amount": 1}), 400, "insufficient_balance")
	if after := moneySnapshot(t, h, s.id); after != before {
		t.Errorf("a refused refund changed money:\nbefore %s\nafter  %s", before, after)
	}

	// The reserved refund still goes through.
	executeRefund(t, h, s.sc, pending.ID)
	wantBalance(t, h, s.sc, 0, 0)
	for i := range 2 {
		p, err := h.svc.PayoutAll(ctx, s.sc, "usd")
		if err != nil || p.Amount != 0 || p.Currency != "usd" {
			t.Errorf("payout %d after the first: got %+v, %v, want 0 usd", i+2, p, err)
		}
	}
	if got := ledgerEntries(t, h, s.sc, "payout"); len(got) != 1 {
		t.Errorf("got payout entries %v, want still one", got)
	}
	checkMoney(t, h, s.sc)

	t.Run("new money can be refunded again", func(t *testing.T) {
		payIntent(t, h, s.key, 1000, sandbox.CardSuccess)
		refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": netOf(1000)})
		wantError(t, postRefund(h, s.key, map[string]any{"payment_intent": pi, "amount": 1}), 400, "insufficient_balance")
	})
	t.Run("a merchant without a balance", func(t *testing.T) {
		other := newShop(h)
		p, err := h.svc.PayoutAll(ctx, other.sc, "")
		if err != nil || p.Amount != 0 || p.Currency != "usd" {
			t.Errorf("got %+v, %v, want 0 usd", p, err)
		}
	})
}

func TestRefundIdempotency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 3000, sandbox.CardSuccess)
	body := map[string]any{"payment_intent": pi, "amount": 1000}

	first := postRefund(h, s.key, body, "Idempotency-Key", "refund-1")
	wantOK(t, first)
	wantNotReplayed(t, first)
	second := postRefund(h, s.key, body, "Idempotency-Key", "refund-1")
	wantReplayOf(t, second, first)
	if got := countRows(t, h, "refunds", s.id); got != 1 {
		t.Errorf("got %d refunds, want 1", got)
	}
	if st := paymentStateOf(t, h, pi); st.Pending != 1000 {
		t.Errorf("got pending %d, want 1000 (reserved once)", st.Pending)
	}
	wantBalance(t, h, s.sc, netOf(20000)+netOf(3000), 1000)

	// Another body under the same key is refused and creates nothing.
	r := postRefund(h, s.key, map[string]any{"payment_intent": pi, "amount": 999}, "Idempotency-Key", "refund-1")
	wantError(t, r, 400, "validation_error")
	// Another key is another refund.
	wantOK(t, postRefund(h, s.key, body, "Idempotency-Key", "refund-2"))
	if got := countRows(t, h, "refunds", s.id); got != 2 {
		t.Errorf("got %d refunds, want 2", got)
	}
	checkMoney(t, h, s.sc)
}
