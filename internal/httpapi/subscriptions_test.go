package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// subscriptionView is a subscription as the API returns it.
type subscriptionView struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Customer string `json:"customer"`
	Quantity int    `json:"quantity"`
	Items    []struct {
		ID    string `json:"id"`
		Price struct {
			ID            string `json:"id"`
			Amount        int64  `json:"amount"`
			Currency      string `json:"currency"`
			Interval      string `json:"interval"`
			IntervalCount int    `json:"interval_count"`
		} `json:"price"`
		Quantity int `json:"quantity"`
	} `json:"items"`
	CurrentPeriodStart int64             `json:"current_period_start"`
	CurrentPeriodEnd   int64             `json:"current_period_end"`
	CancelAtPeriodEnd  bool              `json:"cancel_at_period_end"`
	CanceledAt         *int64            `json:"canceled_at"`
	EndedAt            *int64            `json:"ended_at"`
	TrialEnd           *int64            `json:"trial_end"`
	Metadata           map[string]string `json:"metadata"`
	Livemode           bool              `json:"livemode"`
}

type subSessionView struct {
	sessionView
	TrialPeriodDays *int `json:"trial_period_days"`
	LineItems       []struct {
		lineItemView
		Recurring *struct {
			Interval      string  `json:"interval"`
			IntervalCount int     `json:"interval_count"`
			Product       *string `json:"product"`
		} `json:"recurring"`
	} `json:"line_items"`
}

func inlineSubBody(kv ...any) map[string]any {
	b := map[string]any{"amount_cents": 900, "currency": "usd", "interval": "month", "success_url": successURL, "cancel_url": cancelURL}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(b, kv[i].(string))
		} else {
			b[kv[i].(string)] = kv[i+1]
		}
	}
	return b
}

func createSubSessionOK(t *testing.T, h *harness, key string, body any) subSessionView {
	t.Helper()
	r := h.do("POST", "/v1/subscription-sessions", key, body)
	wantOK(t, r)
	var s subSessionView
	r.data(t, &s)
	return s
}

func getSubscription(t *testing.T, h *harness, key, id string) subscriptionView {
	t.Helper()
	r := h.do("GET", "/v1/subscriptions/"+id, key, nil)
	wantOK(t, r)
	var s subscriptionView
	r.data(t, &s)
	return s
}

// subscribe pays a subscription session on the hosted page with card and
// returns the subscription it created.
func subscribe(t *testing.T, h *harness, key string, s subSessionView, card string) subscriptionView {
	t.Helper()
	r := payCheckout(t, h, s.ID, cardForm(card, "ada@example.com", "Ada Lovelace"))
	want := strings.ReplaceAll(s.SuccessURL, "{CHECKOUT_SESSION_ID}", s.ID)
	if r.Status != http.StatusSeeOther || r.Location != want {
		t.Fatalf("subscribe %s: got %d Location %q, want 303 to %q; body %.300s", s.ID, r.Status, r.Location, want, r.Body)
	}
	got := getSessionOK(t, h, key, s.ID)
	if got.Subscription == nil || !strings.HasPrefix(*got.Subscription, "sub_") {
		t.Fatalf("session %s after paying: subscription %v, want sub_…", s.ID, deref(got.Subscription))
	}
	return getSubscription(t, h, key, *got.Subscription)
}

// subscriptionRows counts a merchant's subscriptions in the database.
func subscriptionRows(t *testing.T, h *harness, merchantID string) int {
	t.Helper()
	var n int
	if err := h.db.Get(&n, `SELECT count(*) FROM subscriptions WHERE merchant_id = $1`, merchantID); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSubscriptionSessionForms: both forms of the spec make a
// subscription-mode session that GET /v1/payment-sessions/{id} reads back.
func TestSubscriptionSessionForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	prod := createSubProductOK(t, h, s.key, subProductBody("trial_period_days", 14))
	cus := createCustomerOK(t, h, s.key, map[string]any{"email": "ada@example.com"})

	t.Run("saved price", func(t *testing.T) {
		got := createSubSessionOK(t, h, s.key, map[string]any{
			"price_id": prod.Price.ID, "quantity": 3, "customer_id": cus.ID, "customer_email": "other@example.com",
			"success_url": successURL, "cancel_url": cancelURL, "metadata": map[string]string{"order": "42"},
		})
		if got.Mode != "subscription" || got.Status != "open" || got.Subscription != nil || got.TrialPeriodDays == nil || *got.TrialPeriodDays != 14 {
			t.Errorf("got mode %s status %s subscription %v trial %v; want an open subscription session with the product's 14-day trial",
				got.Mode, got.Status, deref(got.Subscription), got.TrialPeriodDays)
		}
		if got.AmountTotal != 0 || got.Customer == nil || *got.Customer != cus.ID || deref(got.CustomerEmail) != "ada@example.com" {
			t.Errorf("got amount_total %d, customer %s <%s>; want 0 (trial) and the customer_id's customer and email",
				got.AmountTotal, deref(got.Customer), deref(got.CustomerEmail))
		}
		li := got.LineItems[0]
		if len(got.LineItems) != 1 || deref(li.PriceID) != prod.Price.ID || li.Quantity != 3 || li.AmountTotal != 4500 ||
			li.Recurring == nil || li.Recurring.Interval != "monthly" || deref(li.Recurring.Product) != prod.ID {
			t.Errorf("got line items %+v; want one of 3 × 1500 monthly of %s", got.LineItems, prod.ID)
		}
		if got.URL == nil || !strings.HasSuffix(*got.URL, "/checkout/"+got.ID) {
			t.Errorf("got url %v, want the hosted page", deref(got.URL))
		}
		if back := getSessionOK(t, h, s.key, got.ID); back.Mode != "subscription" || back.ID != got.ID {
			t.Errorf("GET /v1/payment-sessions/%s: got mode %q", got.ID, back.Mode)
		}
		noTrial := createSubSessionOK(t, h, s.key, map[string]any{"price_id": prod.Price.ID, "trial_period_days": 0,
			"pass_fees_to_customer": true, "success_url": successURL, "cancel_url": cancelURL})
		if noTrial.TrialPeriodDays != nil || noTrial.AmountSubtotal != 1500 || noTrial.AmountTotal != payments.GrossUp(payments.PlanFree, "usd", 1500) {
			t.Errorf("trial_period_days 0 with fees passed on: got trial %v, subtotal %d, total %d; want no trial, 1500 grossed up",
				noTrial.TrialPeriodDays, noTrial.AmountSubtotal, noTrial.AmountTotal)
		}
	})

	t.Run("inline", func(t *testing.T) {
		got := createSubSessionOK(t, h, s.key, inlineSubBody("interval", "week", "interval_count", 2, "name", "Veg box",
			"quantity", 2, "customer_email", "bob@example.com", "metadata", map[string]string{"plan": "veg"}))
		li := got.LineItems[0]
		if got.AmountTotal != 1800 || got.TrialPeriodDays != nil || li.Name != "Veg box" || li.PriceID != nil ||
			li.Recurring == nil || li.Recurring.Interval != "week" || li.Recurring.IntervalCount != 2 || li.Recurring.Product != nil {
			t.Errorf("got total %d, line %+v recurring %+v; want 2 × 900 every 2 weeks, no product", got.AmountTotal, li, li.Recurring)
		}
		if got.Metadata["plan"] != "veg" || deref(got.CustomerEmail) != "bob@example.com" {
			t.Errorf("got metadata %v, email %s", got.Metadata, deref(got.CustomerEmail))
		}
		if d := createSubSessionOK(t, h, s.key, inlineSubBody()); d.LineItems[0].Name != "Subscription" || d.LineItems[0].Quantity != 1 ||
			d.LineItems[0].Recurring.IntervalCount != 1 {
			t.Errorf("defaults: got %+v, want name Subscription, quantity 1, interval_count 1", d.LineItems[0])
		}
	})
}

// TestSubscriptionSessionRejections: what each form refuses, with the
// spec's codes, and that nothing is created.
func TestSubscriptionSessionRejections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	prod := createSubProductOK(t, h, s.key, subProductBody())
	archived := createSubProductOK(t, h, s.key, subProductBody())
	wantOK(t, h.do("DELETE", "/v1/products/"+archived.ID, s.key, nil))
	oneTime := priceOf(t, h, s.key, "Mug", 500, "usd")
	other := newShop(h)
	otherProd := createSubProductOK(t, h, other.key, subProductBody())
	saved := func(kv ...any) map[string]any {
		b := map[string]any{"price_id": prod.Price.ID, "success_url": successURL, "cancel_url": cancelURL}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(b, kv[i].(string))
			} else {
				b[kv[i].(string)] = kv[i+1]
			}
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		body   map[string]any
		status int
		code   string
	}{
		{"no form", map[string]any{"success_url": successURL, "cancel_url": cancelURL}, 400, "validation_error"},
		{"both forms", saved("amount_cents", 900, "currency", "usd", "interval", "month"), 400, "validation_error"},
		{"saved with name", saved("name", "x"), 400, "validation_error"},
		{"inline with trial", inlineSubBody("trial_period_days", 7), 400, "validation_error"},
		{"inline with customer_id", inlineSubBody("customer_id", "cus_x"), 400, "validation_error"},
		{"inline with pass fees", inlineSubBody("pass_fees_to_customer", true), 400, "validation_error"},
		{"interval monthly inline", inlineSubBody("interval", "monthly"), 400, "invalid_interval"},
		{"interval fortnight", inlineSubBody("interval", "fortnight"), 400, "invalid_interval"},
		{"interval_count 0", inlineSubBody("interval_count", 0), 400, "invalid_interval"},
		{"interval_count 53", inlineSubBody("interval_count", 53), 400, "invalid_interval"},
		{"no interval", inlineSubBody("interval", nil), 400, "validation_error"},
		{"no currency", inlineSubBody("currency", nil), 400, "validation_error"},
		{"amount 0", inlineSubBody("amount_cents", 0), 400, "validation_error"},
		{"amount too large", inlineSubBody("amount_cents", 100000000), 400, "validation_error"},
		{"quantity 0", inlineSubBody("quantity", 0), 400, "validation_error"},
		{"quantity 1001", saved("quantity", 1001), 400, "validation_error"},
		{"trial 731", saved("trial_period_days", 731), 400, "validation_error"},
		{"http success_url", saved("success_url", "http://shop.example/ok"), 400, "invalid_url"},
		{"no cancel_url", inlineSubBody("cancel_url", nil), 400, "validation_error"},
		{"relative cancel_url", inlineSubBody("cancel_url", "/cart"), 400, "invalid_url"},
		{"bad email", saved("customer_email", "nope"), 400, "validation_error"},
		{"unknown field", saved("mode", "subscription"), 400, "validation_error"},
		{"unknown price", saved("price_id", "price_nope"), 404, "product_not_found"},
		{"archived product", saved("price_id", archived.Price.ID), 404, "product_not_found"},
		{"one-time price", saved("price_id", oneTime), 404, "product_not_found"},
		{"another merchant's price", saved("price_id", otherProd.Price.ID), 404, "product_not_found"},
		{"unknown customer", saved("customer_id", "cus_nope"), 404, "customer_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, h.do("POST", "/v1/subscription-sessions", s.key, tc.body), tc.status, tc.code)
		})
	}
	// The live mode does not see the test mode's price.
	wantError(t, h.do("POST", "/v1/subscription-sessions", s.liveKey, saved()), 404, "product_not_found")
	if n := sessionCount(t, h, s.id); n != 0 {
		t.Errorf("got %d sessions after only refused requests, want 0", n)
	}
}

// TestSubscriptionCheckout: paying a subscription session on the hosted
// page, without a trial (the first period paid, a payment like any other)
// and with one (trialing, nothing charged); the 0341 card starts a trial
// but declines a first charge, which then creates nothing.
func TestSubscriptionCheckout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})

	t.Run("no trial", func(t *testing.T) {
		s := newShop(h)
		cs := createSubSessionOK(t, h, s.key, inlineSubBody("amount_cents", 2500, "quantity", 2, "name", "Seats",
			"metadata", map[string]string{"order": "7"}))
		before := time.Now().Add(-time.Second).Unix()
		sub := subscribe(t, h, s.key, cs, sandbox.CardSuccess)
		if sub.Status != "active" || sub.TrialEnd != nil || sub.Quantity != 2 || len(sub.Items) != 1 ||
			!strings.HasPrefix(sub.Items[0].ID, "si_") || sub.Items[0].Price.Amount != 2500 || sub.Metadata["order"] != "7" {
			t.Errorf("got %+v; want active, 2 × 2500, metadata echoed", sub)
		}
		start := time.Unix(sub.CurrentPeriodStart, 0).UTC()
		if sub.CurrentPeriodStart < before || time.Unix(sub.CurrentPeriodEnd, 0).UTC() != start.AddDate(0, 1, 0) && start.Day() <= 28 {
			t.Errorf("got period %v – %v; want from now to a month later", start, time.Unix(sub.CurrentPeriodEnd, 0).UTC())
		}
		got := getSessionOK(t, h, s.key, cs.ID)
		if got.Status != "complete" || got.PaymentStatus != "paid" || got.Customer == nil || *got.Customer != sub.Customer ||
			got.PaymentIntent == nil || got.AmountTotal != 5000 {
			t.Errorf("session: got %s/%s customer %s payment %s total %d", got.Status, got.PaymentStatus, deref(got.Customer),
				deref(got.PaymentIntent), got.AmountTotal)
		}
		var cu struct {
			Email string `json:"email"`
			Name  string `json:"name"`
		}
		h.do("GET", "/v1/customers/"+sub.Customer, s.key, nil).data(t, &cu)
		if cu.Email != "ada@example.com" || cu.Name != "Ada Lovelace" {
			t.Errorf("created customer: got %+v", cu)
		}
		ps, _ := listPayments(t, h, s.key, "")
		if len(ps) != 1 || ps[0].ID != *got.PaymentIntent || ps[0].Amount != 5000 || ps[0].Status != "succeeded" ||
			ps[0].FeeAmount != payments.Fee(payments.PlanFree, "usd", 5000) || deref(ps[0].Customer) != sub.Customer {
			t.Fatalf("test payments: got %+v; want the first period's payment with its fee", ps)
		}
		var page struct {
			Data []struct {
				Subscription *string `json:"subscription"`
			} `json:"data"`
		}
		h.do("GET", "/v1/test-payments", s.key, nil).data(t, &page)
		if deref(page.Data[0].Subscription) != sub.ID {
			t.Errorf("payment names subscription %s, want %s", deref(page.Data[0].Subscription), sub.ID)
		}
		var ledger int64
		if err := h.db.Get(&ledger, `SELECT coalesce(sum(amount), 0) FROM ledger_entries WHERE merchant_id = $1 AND source_id = $2`,
			s.id, *got.PaymentIntent); err != nil || ledger != netOf(5000) {
			t.Errorf("ledger for the payment: got %d (%v), want %d", ledger, err, netOf(5000))
		}
		evs := events(t, h, s.id, false)
		want := []string{"checkout.session.completed", "customer.subscription.created", "payment_intent.succeeded"}
		if got := eventTypes(evs); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("events: got %v, want %v", got, want)
		}
		for _, e := range evs {
			if e.Data.Metadata["order"] != "7" {
				t.Errorf("%s: metadata %v, want order 7 echoed", e.Type, e.Data.Metadata)
			}
		}
		if evs[1].Data.ID != sub.ID || evs[1].Data.Status != "active" {
			t.Errorf("customer.subscription.created data: got %s %s", evs[1].Data.ID, evs[1].Data.Status)
		}
		// The payment is refundable like any other.
		refundOK(t, h, s.key, map[string]any{"payment_intent": *got.PaymentIntent, "amount": 1000})
		// The card number is nowhere in the database.
		if holders := secretHolders(t, h, sandbox.CardSuccess); len(holders) > 0 {
			t.Errorf("card number stored in %v", holders)
		}
		// Paying again: the session is complete, nothing more happens.
		if r := payCheckout(t, h, cs.ID, cardForm(sandbox.CardSuccess, "ada@example.com", "Ada")); r.Status != http.StatusGone ||
			!strings.Contains(r.Body, "Subscribed") {
			t.Errorf("paying a completed session: got %d %.200s, want 410 Subscribed", r.Status, r.Body)
		}
		if n := subscriptionRows(t, h, s.id); n != 1 {
			t.Errorf("got %d subscriptions, want 1", n)
		}
	})

	t.Run("trial with the 0341 card", func(t *testing.T) {
		s := newShop(h)
		prod := createSubProductOK(t, h, s.key, subProductBody("trial_period_days", 7))
		cus := createCustomerOK(t, h, s.key, map[string]any{"email": "cy@example.com"})
		cs := createSubSessionOK(t, h, s.key, map[string]any{"price_id": prod.Price.ID, "customer_id": cus.ID,
			"success_url": successURL, "cancel_url": cancelURL})
		sub := subscribe(t, h, s.key, cs, sandbox.CardDeclinesAfterSave)
		if sub.Status != "trialing" || sub.TrialEnd == nil || *sub.TrialEnd != sub.CurrentPeriodEnd ||
			sub.CurrentPeriodEnd-sub.CurrentPeriodStart != 7*86400 || sub.Customer != cus.ID {
			t.Errorf("got %+v; want trialing 7 days for %s, trial_end = period end", sub, cus.ID)
		}
		got := getSessionOK(t, h, s.key, cs.ID)
		if got.PaymentStatus != "no_payment_required" || got.AmountTotal != 0 || got.PaymentIntent != nil {
			t.Errorf("session: got %s, total %d, payment %s; want no payment", got.PaymentStatus, got.AmountTotal, deref(got.PaymentIntent))
		}
		if ps, _ := listPayments(t, h, s.key, ""); len(ps) != 0 {
			t.Errorf("got %d payments during a trial, want 0", len(ps))
		}
		var behavior, last4 string
		if err := h.db.QueryRow(`SELECT behavior, last4 FROM sandbox_cards WHERE merchant_id = $1 AND customer_id = $2`, s.id, cus.ID).
			Scan(&behavior, &last4); err != nil || behavior != "declines" || last4 != "0341" {
			t.Errorf("saved card: got %s %s (%v), want declines 0341", behavior, last4, err)
		}
		if got := eventTypes(events(t, h, s.id, false)); strings.Join(got, ",") != "checkout.session.completed,customer.subscription.created" {
			t.Errorf("events: got %v", got)
		}
	})

	t.Run("no trial with the 0341 card", func(t *testing.T) {
		s := newShop(h)
		cs := createSubSessionOK(t, h, s.key, inlineSubBody())
		for _, card := range []string{sandbox.CardDeclinesAfterSave, sandbox.CardDeclined, "4111111111111111"} {
			r := payCheckout(t, h, cs.ID, cardForm(card, "ada@example.com", "Ada"))
			if r.Status != http.StatusPaymentRequired || !strings.Contains(r.Body, "declined") && !strings.Contains(r.Body, "invalid") {
				t.Errorf("card %s: got %d, want 402 with the decline; body %.200s", card, r.Status, r.Body)
			}
		}
		if n := subscriptionRows(t, h, s.id); n != 0 {
			t.Errorf("got %d subscriptions after declines, want 0", n)
		}
		var customers, cards int
		_ = h.db.Get(&customers, `SELECT count(*) FROM customers WHERE merchant_id = $1`, s.id)
		_ = h.db.Get(&cards, `SELECT count(*) FROM sandbox_cards WHERE merchant_id = $1`, s.id)
		got := getSessionOK(t, h, s.key, cs.ID)
		if customers != 0 || cards != 0 || got.Status != "open" || got.Subscription != nil || len(events(t, h, s.id, false)) != 0 {
			t.Errorf("after declines: %d customers, %d cards, session %s, subscription %s; want nothing created",
				customers, cards, got.Status, deref(got.Subscription))
		}
		// The session stays open for another card.
		subscribe(t, h, s.key, cs, sandbox.CardSuccess)
	})
}

// newSubscription makes an active monthly subscription for the shop.
func newSubscription(t *testing.T, h *harness, key string, kv ...any) subscriptionView {
	t.Helper()
	return subscribe(t, h, key, createSubSessionOK(t, h, key, inlineSubBody(kv...)), sandbox.CardSuccess)
}

// TestSubscriptionIsolation: another merchant's or mode's subscription is
// subscription_not_found for every route, and lists never show it.
func TestSubscriptionIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	other := newShop(h)
	sub := newSubscription(t, h, s.key)
	for _, key := range []string{s.liveKey, other.key, other.liveKey} {
		wantError(t, h.do("GET", "/v1/subscriptions/"+sub.ID, key, nil), 404, "subscription_not_found")
		wantError(t, h.do("POST", "/v1/subscriptions/"+sub.ID+"/cancel", key, map[string]any{"at_period_end": false}), 404, "subscription_not_found")
		wantError(t, h.do("POST", "/v1/subscriptions/"+sub.ID+"/resume", key, nil), 404, "subscription_not_found")
		var l struct {
			Data []subscriptionView `json:"data"`
		}
		r := h.do("GET", "/v1/subscriptions?status=all", key, nil)
		wantOK(t, r)
		r.data(t, &l)
		if len(l.Data) != 0 {
			t.Errorf("another scope lists %d subscriptions, want 0", len(l.Data))
		}
	}
	wantError(t, h.do("GET", "/v1/subscriptions/sub_nope", s.key, nil), 404, "subscription_not_found")
	if got := getSubscription(t, h, s.key, sub.ID); got.Status != "active" {
		t.Errorf("after foreign cancels: got %s, want active", got.Status)
	}
}

type subListView struct {
	Data     []subscriptionView `json:"data"`
	HasMore  bool               `json:"has_more"`
	NextPage *string            `json:"next_page"`
}

func listSubs(t *testing.T, h *harness, key, query string) subListView {
	t.Helper()
	r := h.do("GET", "/v1/subscriptions?"+query, key, nil)
	wantOK(t, r)
	var l subListView
	r.data(t, &l)
	return l
}

func subIDs(l subListView) string {
	var ids []string
	for _, s := range l.Data {
		ids = append(ids, s.ID)
	}
	return strings.Join(ids, ",")
}

// TestSubscriptionList: the status filter (default active, all), the
// customer filter, paging with starting_after and with the next_page
// token, which carries the filters; bad values are 400.
func TestSubscriptionList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	a := newSubscription(t, h, s.key)
	b := newSubscription(t, h, s.key)
	c := newSubscription(t, h, s.key)
	d := newSubscription(t, h, s.key)
	wantOK(t, h.do("POST", "/v1/subscriptions/"+b.ID+"/cancel", s.key, map[string]any{"at_period_end": false}))
	join := func(ids ...string) string { return strings.Join(ids, ",") }

	if got := subIDs(listSubs(t, h, s.key, "")); got != join(d.ID, c.ID, a.ID) {
		t.Errorf("default (active): got %s", got)
	}
	if got := subIDs(listSubs(t, h, s.key, "status=all")); got != join(d.ID, c.ID, b.ID, a.ID) {
		t.Errorf("all: got %s", got)
	}
	if got := subIDs(listSubs(t, h, s.key, "status=canceled")); got != b.ID {
		t.Errorf("canceled: got %s", got)
	}
	if got := subIDs(listSubs(t, h, s.key, "status=trialing")); got != "" {
		t.Errorf("trialing: got %s", got)
	}
	if got := subIDs(listSubs(t, h, s.key, "status=all&customer="+c.Customer)); got != c.ID {
		t.Errorf("customer %s: got %s", c.Customer, got)
	}

	p1 := listSubs(t, h, s.key, "status=all&limit=3")
	if subIDs(p1) != join(d.ID, c.ID, b.ID) || !p1.HasMore || p1.NextPage == nil {
		t.Fatalf("page 1: got %s has_more %v next_page %v", subIDs(p1), p1.HasMore, p1.NextPage)
	}
	p2 := listSubs(t, h, s.key, "page="+url.QueryEscape(*p1.NextPage))
	if subIDs(p2) != a.ID || p2.HasMore || p2.NextPage != nil {
		t.Errorf("page 2 from the token (status=all kept): got %s has_more %v next_page %v", subIDs(p2), p2.HasMore, p2.NextPage)
	}
	act := listSubs(t, h, s.key, "limit=1")
	act2 := listSubs(t, h, s.key, "page="+url.QueryEscape(*act.NextPage)+"&limit=2")
	if subIDs(act2) != join(c.ID, a.ID) || act2.HasMore {
		t.Errorf("active page 2 (limit changed): got %s has_more %v", subIDs(act2), act2.HasMore)
	}
	if got := subIDs(listSubs(t, h, s.key, "starting_after="+c.ID)); got != a.ID {
		t.Errorf("starting_after %s: got %s", c.ID, got)
	}

	for _, q := range []string{
		"status=bogus", "status=", "customer=nope", "limit=0", "limit=101", "page=garbage", "page=",
		"starting_after=" + b.ID, // canceled: not in the active list
		"starting_after=sub_nope", "page=" + url.QueryEscape(*p1.NextPage) + "&status=active",
		"page=" + url.QueryEscape(*p1.NextPage) + "&starting_after=" + a.ID,
		// Forged tokens: a NUL (\u0000) in the cursor or the customer, a
		// lone surrogate, a customer over 255 bytes (a 500 once).
		"page=eyJzIjoiIiwibCI6MTAsImEiOiJzdWJfXHUwMDAweCJ9", "page=eyJzIjoiIiwiYyI6ImN1c19cdTAwMDAiLCJsIjoxMCwiYSI6InN1Yl94In0", "page=eyJzIjoiIiwiYyI6ImN1c19hYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWEiLCJsIjoxMCwiYSI6InN1Yl94In0", "page=eyJzIjoiIiwibCI6MTAsImEiOiJzdWJfXHVkY2ZmIn0",
	} {
		wantError(t, h.do("GET", "/v1/subscriptions?"+q, s.key, nil), 400, "validation_error")
	}
}

// TestSubscriptionCancelResume: the spec's transitions and the refused
// ones, each change with its events.
func TestSubscriptionCancelResume(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	count := func(typ string) int { return countType(events(t, h, s.id, false), typ) }
	cancel := func(id string, body any) *response {
		return h.do("POST", "/v1/subscriptions/"+id+"/cancel", s.key, body)
	}

	sub := newSubscription(t, h, s.key)
	// At period end, by default (no body at all).
	r := cancel(sub.ID, nil)
	wantOK(t, r)
	var got subscriptionView
	r.data(t, &got)
	if got.Status != "active" || !got.CancelAtPeriodEnd || got.CanceledAt != nil || got.EndedAt != nil {
		t.Errorf("cancel at period end: got %+v", got)
	}
	if n := count("customer.subscription.updated"); n != 1 {
		t.Errorf("got %d updated events, want 1", n)
	}
	// Again: nothing changes, nothing is recorded.
	wantOK(t, cancel(sub.ID, map[string]any{"at_period_end": true}))
	if n := count("customer.subscription.updated"); n != 1 {
		t.Errorf("scheduling twice: got %d updated events, want 1", n)
	}
	// Resume clears it.
	r = h.do("POST", "/v1/subscriptions/"+sub.ID+"/resume", s.key, map[string]any{})
	wantOK(t, r)
	r.data(t, &got)
	if got.CancelAtPeriodEnd || got.Status != "active" {
		t.Errorf("resume: got %+v", got)
	}
	// Nothing scheduled: resume is refused.
	wantError(t, h.do("POST", "/v1/subscriptions/"+sub.ID+"/resume", s.key, nil), 400, "validation_error")
	if n := count("customer.subscription.updated"); n != 2 {
		t.Errorf("got %d updated events, want 2", n)
	}
	// Now: canceled, with the end's event.
	r = cancel(sub.ID, map[string]any{"at_period_end": false})
	wantOK(t, r)
	r.data(t, &got)
	if got.Status != "canceled" || got.CancelAtPeriodEnd || got.CanceledAt == nil || got.EndedAt == nil || *got.CanceledAt != *got.EndedAt {
		t.Errorf("cancel now: got %+v", got)
	}
	if n := count("customer.subscription.deleted"); n != 1 {
		t.Errorf("got %d deleted events, want 1", n)
	}
	// The two share their created time: newest first is .deleted, then
	// .updated, in the order they were recorded (their ids break the tie).
	var page struct {
		Data []struct{ Type string } `json:"data"`
	}
	r = h.do("GET", "/v1/events?limit=2", s.key, nil)
	wantOK(t, r)
	r.data(t, &page)
	if len(page.Data) != 2 || page.Data[0].Type != "customer.subscription.deleted" || page.Data[1].Type != "customer.subscription.updated" {
		t.Errorf("newest events: got %+v, want .deleted then .updated", page.Data)
	}
	// Ended: every change is refused.
	wantError(t, cancel(sub.ID, nil), 400, "validation_error")
	wantError(t, cancel(sub.ID, map[string]any{"at_period_end": false}), 400, "validation_error")
	wantError(t, h.do("POST", "/v1/subscriptions/"+sub.ID+"/resume", s.key, nil), 400, "validation_error")
	wantError(t, cancel(sub.ID, map[string]any{"at_period_end": "no"}), 400, "validation_error")
	if n := count("customer.subscription.deleted") + count("customer.subscription.updated"); n != 4 {
		t.Errorf("got %d subscription events after refused changes, want 4", n)
	}

	// A scheduled cancellation whose period is over (the clock moved past
	// it) cannot be resumed any more, even before the worker ends it.
	late := newSubscription(t, h, s.key, "interval", "day")
	wantOK(t, cancel(late.ID, map[string]any{"at_period_end": true}))
	if _, err := h.store.AdvanceClock(context.Background(), s.sc, 25*time.Hour); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.do("POST", "/v1/subscriptions/"+late.ID+"/resume", s.key, nil), 400, "validation_error")
	// Malformed bodies are refused.
	wantError(t, h.do("POST", "/v1/subscriptions/"+late.ID+"/resume", s.key, map[string]any{"x": 1}), 400, "validation_error")
	wantError(t, h.do("POST", "/v1/subscriptions/"+late.ID+"/cancel", s.key, []int{1}), 400, "validation_error")
}

// TestSubscriptionSessionMachinery: a subscription session is a checkout
// session like any other: an Idempotency-Key replays its creation, and the
// expiry sweep closes it on its merchant's clock (checkout.session.expired),
// after which the page no longer takes a card and nothing is created.
func TestSubscriptionSessionMachinery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	body := inlineSubBody("name", "Club")
	first := h.do("POST", "/v1/subscription-sessions", s.key, body, "Idempotency-Key", "sub-session-1")
	again := h.do("POST", "/v1/subscription-sessions", s.key, body, "Idempotency-Key", "sub-session-1")
	wantOK(t, first)
	wantOK(t, again)
	var a, b subSessionView
	first.data(t, &a)
	again.data(t, &b)
	if a.ID != b.ID || again.Header.Get("Idempotent-Replayed") != "true" || sessionCount(t, h, s.id) != 1 {
		t.Errorf("replay: got %s then %s (replayed %q), %d sessions; want one session replayed",
			a.ID, b.ID, again.Header.Get("Idempotent-Replayed"), sessionCount(t, h, s.id))
	}

	if _, err := h.store.AdvanceClock(context.Background(), s.sc, 25*time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.ExpireSessions(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if got := getSessionOK(t, h, s.key, a.ID); got.Status != "expired" || got.URL != nil {
		t.Errorf("after expiry: got status %s url %v, want expired and no url", got.Status, deref(got.URL))
	}
	if got := countType(events(t, h, s.id, false), "checkout.session.expired"); got != 1 {
		t.Errorf("got %d checkout.session.expired events, want 1", got)
	}
	if r := payCheckout(t, h, a.ID, cardForm(sandbox.CardSuccess, "ada@example.com", "Ada")); r.Status != http.StatusGone {
		t.Errorf("paying an expired session: got %d, want 410", r.Status)
	}
	if n := subscriptionRows(t, h, s.id); n != 0 {
		t.Errorf("got %d subscriptions from an expired session, want 0", n)
	}
}

// TestSubscriptionCheckoutConcurrent: submits of one session racing each
// other (a double click, two tabs) create one subscription and charge once;
// the others see the session complete.
func TestSubscriptionCheckoutConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	cs := createSubSessionOK(t, h, s.key, inlineSubBody())
	const n = 8
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := postCheckout(h, cs.ID, cardForm(sandbox.CardSuccess, "ada@example.com", "Ada"))
			if err != nil {
				t.Error(err)
				return
			}
			statuses <- r.Status
		}()
	}
	wg.Wait()
	close(statuses)
	ok := 0
	for st := range statuses {
		switch st {
		case http.StatusSeeOther:
			ok++
		case http.StatusGone:
		default:
			t.Errorf("got status %d, want 303 once and 410 for the others", st)
		}
	}
	ps, _ := listPayments(t, h, s.key, "")
	if ok != 1 || subscriptionRows(t, h, s.id) != 1 || len(ps) != 1 {
		t.Errorf("got %d successes, %d subscriptions, %d payments; want one of each", ok, subscriptionRows(t, h, s.id), len(ps))
	}
}
