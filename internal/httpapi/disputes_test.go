package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paysvc/internal/processor/sandbox"
)

// disputeView is a dispute as the API returns it.
type disputeView struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Status        string            `json:"status"`
	Reason        string            `json:"reason"`
	AmountCents   int64             `json:"amount_cents"`
	Currency      string            `json:"currency"`
	PaymentIntent string            `json:"payment_intent"`
	Evidence      map[string]string `json:"evidence"`
	EvidenceDueBy *int64            `json:"evidence_due_by"`
	HasEvidence   bool              `json:"has_evidence"`
	Submitted     bool              `json:"evidence_submitted"`
	Created       int64             `json:"created"`
	Livemode      bool              `json:"livemode"`
}

func getDisputeOK(t *testing.T, h *harness, key, id string) disputeView {
	t.Helper()
	r := h.do("GET", "/v1/disputes/"+id, key, nil)
	wantOK(t, r)
	var d disputeView
	r.data(t, &d)
	return d
}

func postEvidence(h *harness, key, id string, body any) *response {
	h.t.Helper()
	return h.do("POST", "/v1/disputes/"+id+"/evidence", key, body)
}

func evidenceOK(t *testing.T, h *harness, key, id string, body any) disputeView {
	t.Helper()
	r := postEvidence(h, key, id, body)
	wantOK(t, r)
	var d disputeView
	r.data(t, &d)
	return d
}

// disputed pays amount with the dispute card for s and opens the dispute;
// it returns the payment's and the dispute's ids.
func disputed(t *testing.T, h *harness, s shop, amount int64) (pi, dp string) {
	t.Helper()
	pi = payIntent(t, h, s.key, amount, sandbox.CardDispute)
	return pi, openDisputeOn(t, h, s.sc, pi)
}

func disputeIDs(t *testing.T, h *harness, key, query string) ([]string, bool) {
	t.Helper()
	items, more := listPage(t, h, key, "/v1/disputes", query)
	return itemIDs(items), more
}

// TestDisputeOpen follows the dispute card from payment to an open dispute:
// the amount leaves the balance, the payment names it, an event is written,
// and applying the processor event again changes nothing.
func TestDisputeOpen(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	ctx := context.Background()
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	pi := payIntent(t, h, s.key, 3000, sandbox.CardDispute)
	funded := netOf(20000) + netOf(3000)

	var pev struct {
		ID        string     `db:"id"`
		Type      string     `db:"type"`
		Reason    string     `db:"reason"`
		Processed *time.Time `db:"processed_at"`
	}
	if err := h.db.Get(&pev, `SELECT id, type, data->>'reason' AS reason, processed_at FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, pi); err != nil {
		t.Fatalf("processor event of the dispute card: %v", err)
	}
	if pev.Type != "dispute.created" || pev.Reason != "fraudulent" || pev.Processed != nil {
		t.Errorf("got processor event %+v, want dispute.created, fraudulent, unprocessed", pev)
	}
	if ids, _ := disputeIDs(t, h, s.key, ""); len(ids) != 0 {
		t.Errorf("before the event is applied: got disputes %v, want none", ids)
	}
	if p := paymentOf(t, h, s.key, pi); p.Dispute != nil || p.Status != "succeeded" {
		t.Errorf("before the event is applied: got payment %+v, want succeeded without dispute", p)
	}
	wantBalance(t, h, s.sc, funded, 0)

	before := time.Now().Unix()
	if err := h.svc.ApplyProcessorEvent(ctx, s.sc, pev.ID); err != nil {
		t.Fatal(err)
	}
	st := paymentStateOf(t, h, pi)
	if st.Dispute == nil || !strings.HasPrefix(*st.Dispute, "dp_") {
		t.Fatalf("got payment dispute_id %s, want dp_…", deref(st.Dispute))
	}
	dp := *st.Dispute
	d := getDisputeOK(t, h, s.key, dp)
	if d.Created < before || d.Created > time.Now().Unix() {
		t.Errorf("got created %d, want about %d", d.Created, before)
	}
	wantSameJSON(t, "dispute", d, disputeView{
		ID: dp, Object: "dispute", Status: "needs_response", Reason: "fraudulent", AmountCents: 3000, Currency: "usd",
		PaymentIntent: pi, Evidence: map[string]string{}, EvidenceDueBy: ptr(d.Created + 7*24*3600), Created: d.Created,
	})
	if p := paymentOf(t, h, s.key, pi); deref(p.Dispute) != dp {
		t.Errorf("got payment dispute %s, want %s", deref(p.Dispute), dp)
	}
	wantSameJSON(t, "dispute ledger entries", ledgerEntries(t, h, s.sc, "dispute"), map[string]int64{dp: -3000})
	wantBalance(t, h, s.sc, funded-3000, 0)
	evs := eventsOf(t, h, s.sc, "charge.dispute.created")
	if len(evs) != 1 || evs[0]["id"] != dp || evs[0]["status"] != "needs_response" || evs[0]["payment_intent"] != pi ||
		fmt.Sprint(evs[0]["amount_cents"]) != "3000" {
		t.Errorf("got charge.dispute.created data %v, want one of %s, needs_response, 3000", evs, dp)
	}
	if ids, more := disputeIDs(t, h, s.key, ""); fmt.Sprint(ids) != fmt.Sprint([]string{dp}) || more {
		t.Errorf("got disputes %v (has_more %v), want [%s]", ids, more, dp)
	}

	// Applied again (a redelivered job): nothing changes.
	snap := moneySnapshot(t, h, s.id)
	if err := h.svc.ApplyProcessorEvent(ctx, s.sc, pev.ID); err != nil {
		t.Fatal(err)
	}
	if got := moneySnapshot(t, h, s.id); got != snap {
		t.Errorf("applying the event twice changed money:\nbefore %s\nafter  %s", snap, got)
	}
	if n := countRows(t, h, "disputes", s.id); n != 1 {
		t.Errorf("got %d disputes, want 1", n)
	}
	checkMoney(t, h, s.sc)

	t.Run("a pending refund is not disputed", func(t *testing.T) {
		pi := payIntent(t, h, s.key, 3000, sandbox.CardDispute)
		re := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 1000})
		dp := openDisputeOn(t, h, s.sc, pi)
		if d := getDisputeOK(t, h, s.key, dp); d.AmountCents != 2000 {
			t.Errorf("got dispute amount %d, want 3000 less the pending 1000", d.AmountCents)
		}
		if got := ledgerEntries(t, h, s.sc, "dispute")[dp]; got != -2000 {
			t.Errorf("got dispute ledger entry %d, want -2000", got)
		}
		// The refund created before the dispute still completes.
		executeRefund(t, h, s.sc, re.ID)
		if p := paymentOf(t, h, s.key, pi); p.AmountRefunded != 1000 {
			t.Errorf("got amount_refunded %d, want 1000", p.AmountRefunded)
		}
		checkMoney(t, h, s.sc)
	})
	t.Run("a succeeded refund is not disputed", func(t *testing.T) {
		pi := payIntent(t, h, s.key, 3000, sandbox.CardDispute)
		executeRefund(t, h, s.sc, refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 1200}).ID)
		dp := openDisputeOn(t, h, s.sc, pi)
		if d := getDisputeOK(t, h, s.key, dp); d.AmountCents != 1800 {
			t.Errorf("got dispute amount %d, want 3000 less the refunded 1200", d.AmountCents)
		}
		checkMoney(t, h, s.sc)
	})
	t.Run("hosted checkout with the dispute card", func(t *testing.T) {
		cs := createSessionOK(t, h, s.key, sessionBody([]map[string]any{customItem(4000, "usd", "Thing", 1)}))
		if r := payCheckout(t, h, cs.ID, cardForm(sandbox.CardDispute, "d@example.com", "D")); r.Status != http.StatusSeeOther {
			t.Fatalf("pay with the dispute card: got %d, want 303", r.Status)
		}
		pi := deref(getSessionOK(t, h, s.key, cs.ID).PaymentIntent)
		dp := openDisputeOn(t, h, s.sc, pi)
		if d := getDisputeOK(t, h, s.key, dp); d.AmountCents != 4000 || d.PaymentIntent != pi {
			t.Errorf("got dispute %+v, want 4000 on %s", d, pi)
		}
		wantError(t, postRefund(h, s.key, map[string]any{"session_id": cs.ID}), 400, "refund_not_allowed")
		checkMoney(t, h, s.sc)
	})
}

// TestDisputeIsolation: another merchant's key and the other mode's key see
// none of a merchant's disputes and cannot change them.
func TestDisputeIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	a, b := newShop(h), newShop(h)
	payIntent(t, h, a.key, 10000, sandbox.CardSuccess)
	_, dp := disputed(t, h, a, 2000)
	payIntent(t, h, b.key, 10000, sandbox.CardSuccess)
	_, theirs := disputed(t, h, b, 2000)

	for _, c := range []struct{ name, key string }{
		{"another merchant", b.key},
		{"the live key", a.liveKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids, more := disputeIDs(t, h, c.key, "")
			for _, id := range ids {
				if id == dp {
					t.Errorf("got %s in the list, want it hidden", dp)
				}
			}
			if c.key == a.liveKey && (len(ids) != 0 || more) {
				t.Errorf("got live disputes %v, want none", ids)
			}
			wantError(t, h.do("GET", "/v1/disputes/"+dp, c.key, nil), 404, "payment_not_found")
			wantError(t, postEvidence(h, c.key, dp, map[string]any{"evidence": map[string]any{"customer_name": "Mallory"}}), 404, "payment_not_found")
			wantError(t, postEvidence(h, c.key, dp, map[string]any{"submit": true}), 404, "payment_not_found")
		})
	}
	if d := getDisputeOK(t, h, a.key, dp); d.Status != "needs_response" || len(d.Evidence) != 0 || d.Submitted {
		t.Errorf("got %+v, want untouched", d)
	}
	if ids, _ := disputeIDs(t, h, b.key, ""); fmt.Sprint(ids) != fmt.Sprint([]string{theirs}) {
		t.Errorf("B lists %v, want only its own [%s]", ids, theirs)
	}
	t.Run("unknown id", func(t *testing.T) {
		wantError(t, h.do("GET", "/v1/disputes/dp_doesnotexist0000000000", a.key, nil), 404, "payment_not_found")
		wantError(t, postEvidence(h, a.key, "dp_doesnotexist0000000000", map[string]any{"submit": true}), 404, "payment_not_found")
	})
}

// TestDisputeList checks the list's limit, paging and default page size.
func TestDisputeList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	var dps []string
	for range 3 {
		_, dp := disputed(t, h, s, 1000)
		dps = append([]string{dp}, dps...) // newest first
	}

	for _, q := range []string{"limit=0", "limit=101", "limit=-1", "limit=abc", "limit=", "limit=1.5"} {
		t.Run(q, func(t *testing.T) {
			wantValidation(t, h.do("GET", "/v1/disputes?"+q, s.key, nil), "limit")
		})
	}
	t.Run("unknown starting_after", func(t *testing.T) {
		wantValidation(t, h.do("GET", "/v1/disputes?starting_after=dp_doesnotexist0000000000", s.key, nil), "starting_after")
	})
	t.Run("limit=1 pages", func(t *testing.T) {
		ids, more := disputeIDs(t, h, s.key, "limit=1")
		if fmt.Sprint(ids) != fmt.Sprint(dps[:1]) || !more {
			t.Errorf("got %v (has_more %v), want the newest %v and has_more", ids, more, dps[:1])
		}
		wantSameJSON(t, "pages of 1", walkPages(t, h, s.key, "/v1/disputes", "1", 1), dps)
		wantSameJSON(t, "limit=100", walkPages(t, h, s.key, "/v1/disputes", "100", 100), dps)
	})
	t.Run("default page size 50", func(t *testing.T) {
		many := newShop(h)
		// 51 disputed payments, inserted directly: paying 51 would be slow.
		const q = `WITH p AS (
			INSERT INTO payment_intents (id, merchant_id, livemode, amount, amount_received, currency, status, created_at)
			SELECT 'pi_seed' || $1 || lpad(g::text, 3, '0'), $1, false, 1000, 1000, 'usd', 'succeeded', now() - g * interval '1 second'
			FROM generate_series(1, 51) g
			RETURNING id, created_at
		)
		INSERT INTO disputes (id, merchant_id, livemode, payment_intent_id, amount, currency, reason, status, evidence_due_by, created_at)
		SELECT 'dp_' || substr(id, 4), $1, false, id, 1000, 'usd', 'general', 'needs_response', created_at + interval '7 days', created_at FROM p`
		if _, err := h.db.Exec(q, many.id); err != nil {
			t.Fatal(err)
		}
		ids, more := disputeIDs(t, h, many.key, "")
		if len(ids) != 50 || !more {
			t.Errorf("got %d disputes (has_more %v), want 50 and has_more", len(ids), more)
		}
		all := walkPages(t, h, many.key, "/v1/disputes", "", 50)
		if len(all) != 51 {
			t.Errorf("got %d disputes over the pages, want 51", len(all))
		}
	})
}

// TestDisputeEvidence covers POST /v1/disputes/{id}/evidence: merging,
// removal, the validation of keys and values, submission and what follows it.
func TestDisputeEvidence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	payIntent(t, h, s.key, 20000, sandbox.CardSuccess)
	_, dp := disputed(t, h, s, 2000)
	ev := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return map[string]any{"evidence": m}
	}

	steps := []struct {
		name string
		body any
		want map[string]string
	}{
		{"first fields", ev("customer_name", "Jo Buyer", "product_description", "A mug"), map[string]string{"customer_name": "Jo Buyer", "product_description": "A mug"}},
		{"merged with more", ev("uncategorized_text", "Shipped on time"), map[string]string{"customer_name": "Jo Buyer", "product_description": "A mug", "uncategorized_text": "Shipped on time"}},
		{"a field replaced", ev("customer_name", "Joanna Buyer"), map[string]string{"customer_name": "Joanna Buyer", "product_description": "A mug", "uncategorized_text": "Shipped on time"}},
		{"empty string removes", ev("product_description", ""), map[string]string{"customer_name": "Joanna Buyer", "uncategorized_text": "Shipped on time"}},
		{"removing an absent field", ev("receipt", ""), map[string]string{"customer_name": "Joanna Buyer", "uncategorized_text": "Shipped on time"}},
		{"empty body", map[string]any{}, map[string]string{"customer_name": "Joanna Buyer", "uncategorized_text": "Shipped on time"}},
		{"submit false", map[string]any{"submit": false, "evidence": map[string]any{"customer_email_address": "jo@example.com"}},
			map[string]string{"customer_name": "Joanna Buyer", "uncategorized_text": "Shipped on time", "customer_email_address": "jo@example.com"}},
	}
	for _, st := range steps {
		d := evidenceOK(t, h, s.key, dp, st.body)
		wantSameJSON(t, st.name+": evidence", d.Evidence, st.want)
		if d.Status != "needs_response" || d.Submitted || !d.HasEvidence {
			t.Errorf("%s: got status %s submitted %v has_evidence %v, want needs_response, false, true", st.name, d.Status, d.Submitted, d.HasEvidence)
		}
		wantSameJSON(t, st.name+": GET evidence", getDisputeOK(t, h, s.key, dp).Evidence, st.want)
	}
	current := steps[len(steps)-1].want

	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"unknown key", ev("colour", "red"), "evidence.colour"},
		{"unknown key beside a known one", ev("customer_name", "X", "favourite_food", "soup"), "evidence.favourite_food"},
		{"number value", map[string]any{"evidence": map[string]any{"customer_name": 5}}, "evidence.customer_name"},
		{"null value", map[string]any{"evidence": map[string]any{"customer_name": nil}}, "evidence.customer_name"},
		{"object value", map[string]any{"evidence": map[string]any{"receipt": map[string]any{"a": "b"}}}, "evidence.receipt"},
		{"evidence a string", map[string]any{"evidence": "all of it"}, "evidence"},
		{"evidence an array", map[string]any{"evidence": []string{"customer_name"}}, "evidence"},
		{"value too long", ev("uncategorized_text", strings.Repeat("x", 20001)), "evidence.uncategorized_text"},
		{"NUL in a value", ev("customer_name", "Jo\x00"), "evidence.customer_name"},
		{"submit not a boolean", map[string]any{"submit": "yes"}, "submit"},
		{"unknown top-level field", map[string]any{"evidence": map[string]any{}, "notes": "x"}, "notes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantValidation(t, postEvidence(h, s.key, dp, c.body), c.field)
			d := getDisputeOK(t, h, s.key, dp)
			wantSameJSON(t, "evidence after a refusal", d.Evidence, current)
			if d.Status != "needs_response" || d.Submitted {
				t.Errorf("got status %s submitted %v after a refusal, want needs_response, false", d.Status, d.Submitted)
			}
		})
	}
	t.Run("20000 characters is the limit", func(t *testing.T) {
		d := evidenceOK(t, h, s.key, dp, ev("service_documentation", strings.Repeat("y", 20000)))
		if len(d.Evidence["service_documentation"]) != 20000 {
			t.Errorf("got %d characters, want 20000", len(d.Evidence["service_documentation"]))
		}
		evidenceOK(t, h, s.key, dp, ev("service_documentation", ""))
	})

	// Everything removed: has_evidence goes back to false.
	_, dp2 := disputed(t, h, s, 1000)
	evidenceOK(t, h, s.key, dp2, ev("customer_name", "A", "receipt", "B"))
	if d := evidenceOK(t, h, s.key, dp2, ev("customer_name", "", "receipt", "")); d.HasEvidence || len(d.Evidence) != 0 {
		t.Errorf("all evidence removed: got has_evidence %v evidence %v, want false and {}", d.HasEvidence, d.Evidence)
	}

	// Submission: final.
	before := moneySnapshot(t, h, s.id)
	d := evidenceOK(t, h, s.key, dp, map[string]any{"evidence": map[string]any{"uncategorized_text": "Delivered, signed for"}, "submit": true})
	want := map[string]string{"customer_name": "Joanna Buyer", "uncategorized_text": "Delivered, signed for", "customer_email_address": "jo@example.com"}
	wantSameJSON(t, "submitted evidence", d.Evidence, want)
	if d.Status != "under_review" || !d.Submitted || !d.HasEvidence {
		t.Errorf("after submit: got status %s evidence_submitted %v, want under_review, true", d.Status, d.Submitted)
	}
	if after := moneySnapshot(t, h, s.id); after != before {
		t.Errorf("submitting evidence changed money:\nbefore %s\nafter  %s", before, after)
	}
	for _, c := range []struct {
		name string
		body any
	}{
		{"more evidence", ev("customer_name", "Someone else")},
		{"removing evidence", ev("customer_name", "")},
		{"submit again", map[string]any{"submit": true}},
		{"empty body", map[string]any{}},
	} {
		t.Run("after submission: "+c.name, func(t *testing.T) {
			wantError(t, postEvidence(h, s.key, dp, c.body), 400, "validation_error")
			d := getDisputeOK(t, h, s.key, dp)
			wantSameJSON(t, "evidence", d.Evidence, want)
			if d.Status != "under_review" || !d.Submitted {
				t.Errorf("got status %s submitted %v, want under_review, true", d.Status, d.Submitted)
			}
		})
	}

	t.Run("past evidence_due_by", func(t *testing.T) {
		_, dp := disputed(t, h, s, 1000)
		if _, err := h.db.Exec(`UPDATE disputes SET evidence_due_by = now() - interval '1 minute' WHERE id = $1`, dp); err != nil {
			t.Fatal(err)
		}
		r := postEvidence(h, s.key, dp, ev("customer_name", "Late"))
		wantError(t, r, 400, "validation_error")
		if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, "due") {
			t.Errorf("got message %q, want it to say the evidence was due", r.Body.Error.Message)
		}
		wantError(t, postEvidence(h, s.key, dp, map[string]any{"submit": true}), 400, "validation_error")
		if d := getDisputeOK(t, h, s.key, dp); d.Status != "needs_response" || len(d.Evidence) != 0 {
			t.Errorf("got %+v, want unchanged", d)
		}
	})
}

// TestDisputeDecision sends submitted evidence to the sandbox processor
// (as the worker does) and checks each decision's money and events.
func TestDisputeDecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	for _, c := range []struct {
		text       string
		wantStatus string
		reversal   bool
		closed     bool
	}{
		{sandbox.EvidenceWinning, "won", true, true},
		{sandbox.EvidenceLosing, "lost", false, true},
		{"The customer signed for it", "under_review", false, false},
	} {
		t.Run(c.wantStatus, func(t *testing.T) {
			s := newShop(h)
			payIntent(t, h, s.key, 10000, sandbox.CardSuccess)
			_, dp := disputed(t, h, s, 2500)
			lt := netOf(10000) + netOf(2500) - 2500
			wantBalance(t, h, s.sc, lt, 0)

			// Before submission there is nothing to send.
			if d, err := h.svc.SendEvidence(ctx, s.sc, dp); err != nil || d.Status != "needs_response" {
				t.Errorf("SendEvidence before submission: got %s, %v, want needs_response, nil", d.Status, err)
			}
			evidenceOK(t, h, s.key, dp, map[string]any{"evidence": map[string]any{"uncategorized_text": c.text}, "submit": true})
			for i := range 2 { // the second run is a retried job
				d, err := h.svc.SendEvidence(ctx, s.sc, dp)
				if err != nil || d.Status != c.wantStatus {
					t.Errorf("SendEvidence run %d: got %s, %v, want %s", i+1, d.Status, err, c.wantStatus)
				}
			}
			d := getDisputeOK(t, h, s.key, dp)
			if d.Status != c.wantStatus || !d.Submitted || d.AmountCents != 2500 {
				t.Errorf("got status %s submitted %v amount %d, want %s, true, 2500", d.Status, d.Submitted, d.AmountCents, c.wantStatus)
			}
			wantReversal := map[string]int64{}
			if c.reversal {
				wantReversal[dp] = 2500
				lt += 2500
			}
			wantSameJSON(t, "dispute_reversal entries", ledgerEntries(t, h, s.sc, "dispute_reversal"), wantReversal)
			wantBalance(t, h, s.sc, lt, 0)
			closed := eventsOf(t, h, s.sc, "charge.dispute.closed")
			switch {
			case c.closed && (len(closed) != 1 || closed[0]["id"] != dp || closed[0]["status"] != c.wantStatus):
				t.Errorf("got charge.dispute.closed data %v, want one for %s with status %s", closed, dp, c.wantStatus)
			case !c.closed && len(closed) != 0:
				t.Errorf("got charge.dispute.closed %v, want none while under review", closed)
			}
			var sent *time.Time
			if err := h.db.Get(&sent, `SELECT evidence_sent_at FROM disputes WHERE id = $1`, dp); err != nil {
				t.Fatal(err)
			}
			if sent == nil {
				t.Errorf("got evidence_sent_at NULL after SendEvidence, want set (else the relay resends it forever)")
			}
			checkMoney(t, h, s.sc)
		})
	}
}
