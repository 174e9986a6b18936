package stripe_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor"
	"paysvc/internal/testenv"
)

// subscribe opens a subscription session through the service (inline
// monthly price, quantity qty) and completes it as Stripe's
// checkout.session.completed would, naming Stripe's subscription
// stripeSub; it returns our subscription.
func (e *inboundEnv) subscribe(stripeSub string, qty int64) payments.Subscription {
	e.t.Helper()
	ctx := context.Background()
	amount, cur, unit, ok, cancel := int64(1000), "usd", "month", "https://shop.example/ok", "https://shop.example/no"
	cs, err := e.svc.CreateSubscriptionSession(ctx, e.sc, payments.SubscriptionSessionInput{
		AmountCents: &amount, Currency: &cur, Interval: &unit, Quantity: &qty, SuccessURL: &ok, CancelURL: &cancel,
	})
	if err != nil {
		e.t.Fatalf("subscription session: %v", err)
	}
	if !strings.HasPrefix(cs.URL, "https://checkout.stripe.com/") {
		e.t.Errorf("session url: got %q, want Stripe Checkout's", cs.URL)
	}
	e.send("evt_cs_"+stripeSub, "checkout.session.completed", map[string]any{
		"id": "cs_test_" + stripeSub, "object": "checkout.session", "mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": cs.ID, "subscription": stripeSub, "amount_total": amount * qty,
		"customer_details": map[string]any{"email": "ada@example.com", "name": "Ada"},
	})
	if n := e.work(); n != 0 {
		e.t.Fatalf("%d events not applied", n)
	}
	var id string
	if err := e.db.Get(&id, `SELECT id FROM subscriptions WHERE merchant_id = $1 AND processor_subscription_id = $2`, e.sc.MerchantID, stripeSub); err != nil {
		e.t.Fatalf("our subscription of %s: %v", stripeSub, err)
	}
	sub, err := e.svc.Subscription(ctx, e.sc, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return sub
}

func (e *inboundEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Get(&n, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// With Stripe as processor a subscription is Stripe Billing's: its
// checkout is Stripe Checkout in subscription mode on a mirrored price;
// cancel, resume, quantity and the portal are calls on Stripe's
// subscription (idempotency keys from our ids); the renewal sweep leaves
// it alone.
func TestStripeBillingRoutes(t *testing.T) {
	e := newInboundEnv(t)
	ctx := context.Background()
	sub := e.subscribe("sub_stripe_routes", 2)
	if sub.Status != payments.SubActive || sub.Quantity() != 2 || sub.CardID != nil || sub.ProcessorID != "sub_stripe_routes" {
		t.Errorf("subscription: got %+v, want active, quantity 2, no saved card here, Stripe's id recorded", sub)
	}
	if n := e.count(`SELECT count(*) FROM payment_intents WHERE merchant_id = $1 AND subscription_id = $2 AND status = 'succeeded'`, e.sc.MerchantID, sub.ID); n != 1 {
		t.Errorf("first payments: got %d, want 1", n)
	}

	// The first invoice is the checkout's: no second payment; Stripe's
	// payment intent is found through our session for refunds.
	e.send("evt_first_invoice", "invoice.paid", map[string]any{"id": "in_first", "object": "invoice", "subscription": "sub_stripe_routes",
		"billing_reason": "subscription_create", "amount_paid": 2000, "currency": "usd", "payment_intent": "pi_stripe_first",
		"subscription_details": map[string]any{"metadata": map[string]string{"paysvc_checkout_session": *sub.SessionID}}})
	if n := e.work(); n != 0 {
		t.Fatalf("%d events not applied", n)
	}
	if n := e.count(`SELECT count(*) FROM payment_intents WHERE merchant_id = $1 AND subscription_id = $2`, e.sc.MerchantID, sub.ID); n != 1 {
		t.Errorf("payments after the first invoice: got %d, want 1 (the checkout's)", n)
	}
	if got := e.stripeID(*sub.SessionID); got != "pi_stripe_first" {
		t.Errorf("Stripe payment of the session: got %q, want pi_stripe_first", got)
	}

	yes, no := true, false
	got, err := e.svc.CancelSubscription(ctx, e.sc, sub.ID, payments.CancelInput{AtPeriodEnd: &yes})
	if err != nil || !got.CancelAtPeriodEnd {
		t.Fatalf("cancel at period end: got %+v, %v", got, err)
	}
	if got, err = e.svc.ResumeSubscription(ctx, e.sc, sub.ID); err != nil || got.CancelAtPeriodEnd {
		t.Fatalf("resume: got %+v, %v", got, err)
	}
	for _, pb := range []string{"always_invoice", "create_prorations", "none"} {
		q := 3
		if pb == "create_prorations" {
			q = 5
		}
		pb := pb
		if got, err = e.svc.ChangeQuantity(ctx, e.sc, sub.ID, payments.QuantityInput{Quantity: &q, ProrationBehavior: &pb}); err != nil || got.Quantity() != q {
			t.Fatalf("quantity %s: got %+v, %v", pb, got, err)
		}
		if got.PendingProration != 0 {
			t.Errorf("quantity %s: pending proration %d, want 0 (Stripe prorates)", pb, got.PendingProration)
		}
	}
	if n := e.count(`SELECT count(*) FROM subscription_charges WHERE subscription_id = $1 AND kind <> 'first'`, sub.ID) +
		e.count(`SELECT count(*) FROM subscription_proration_items WHERE subscription_id = $1`, sub.ID); n != 0 {
		t.Errorf("charges or proration items of ours: got %d, want none (Stripe bills)", n)
	}
	// Stripe's proration invoices: a failed one changes nothing (as a
	// declined proration charge in the sandbox), a paid one is a payment.
	proration := func(id string, paid bool) map[string]any {
		o := map[string]any{"id": id, "object": "invoice", "subscription": "sub_stripe_routes", "billing_reason": "subscription_update",
			"currency": "usd", "payment_intent": "pi_" + id, "amount_paid": 0, "next_payment_attempt": time.Now().Add(72 * time.Hour).Unix(),
			"subscription_details": map[string]any{"metadata": map[string]string{"paysvc_checkout_session": *sub.SessionID}}}
		if paid {
			o["amount_paid"] = 700
			delete(o, "next_payment_attempt")
		}
		return o
	}
	e.send("evt_proration_failed", "invoice.payment_failed", proration("in_prorate1", false))
	e.send("evt_proration_paid", "invoice.paid", proration("in_prorate2", true))
	if n := e.work(); n != 0 {
		t.Fatalf("%d events not applied", n)
	}
	if got, err = e.svc.Subscription(ctx, e.sc, sub.ID); err != nil || got.Status != payments.SubActive {
		t.Errorf("after a failed proration invoice: got %+v, %v, want still active", got, err)
	}
	if n := e.count(`SELECT count(*) FROM payment_intents WHERE subscription_id = $1 AND amount = 700 AND description = 'Subscription quantity change'`, sub.ID); n != 1 {
		t.Errorf("payments of the paid proration invoice: got %d, want 1", n)
	}
	// The fee recorded is what Stripe takes: application_fee_percent of the
	// invoice, with no fixed part (there was one once: 40 more).
	var plan string
	var fee, net int64
	if err := e.db.QueryRow(`SELECT m.plan, p.fee_amount, l.amount FROM payment_intents p JOIN merchants m ON m.id = p.merchant_id
		JOIN ledger_entries l ON l.source_id = p.id AND l.type = 'payment'
		WHERE p.subscription_id = $1 AND p.amount = 700`, sub.ID).Scan(&plan, &fee, &net); err != nil {
		t.Fatal(err)
	}
	if want := int64(math.Round(700 * payments.FeePercent(payments.Plan(plan)) / 100)); fee != want || net != 700-want {
		t.Errorf("paid invoice of 700 on plan %s: fee %d, net %d; want %d (%.1f%%, no fixed part), net %d",
			plan, fee, net, want, payments.FeePercent(payments.Plan(plan)), 700-want)
	}

	ret := "https://shop.example/account"
	ps, err := e.svc.CreatePortalSession(ctx, e.sc, sub.ID, payments.PortalSessionInput{ReturnURL: &ret})
	if err != nil || !strings.HasPrefix(ps.URL, "https://") || strings.Contains(ps.URL, "/portal/") {
		t.Errorf("portal: got %+v, %v, want Stripe's billing portal URL", ps, err)
	}

	// Due on our clock: our sweep skips it (Stripe renews it).
	if _, err := e.db.Exec(`UPDATE subscriptions SET anchor = now() - interval '40 days', current_period_start = now() - interval '40 days', current_period_end = now() - interval '1 day' WHERE id = $1`, sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.RenewDueSubscriptions(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT count(*) FROM subscription_charges WHERE subscription_id = $1 AND kind = 'renewal'`, sub.ID); n != 0 {
		t.Errorf("renewal charges written by our sweep: %d, want 0", n)
	}

	if got, err = e.svc.CancelSubscription(ctx, e.sc, sub.ID, payments.CancelInput{AtPeriodEnd: &no}); err != nil || got.Status != payments.SubCanceled {
		t.Errorf("cancel now: got %+v, %v", got, err)
	}
}

// What the service sends Stripe: the mirrored price and Checkout in
// subscription mode keyed by our ids, cancel/resume keyed by the event
// each change records, quantity by the change's sqp_ id, the portal by
// the bps_ id.
func TestStripeBillingRequests(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	base, rec := recordingStripe(t)
	p := newProcessor(db, base)
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(p))
	acct := connected(t, db, false)
	e := &inboundEnv{t: t, db: db, svc: svc, p: p, in: p.Inbound(whsec, svc), acct: acct, sc: payments.Scope{MerchantID: acct.MerchantID}}
	e.stripe = stripeAccountOf(t, db, acct)
	sub := e.subscribe("sub_stripe_req", 1)
	reqs := rec.take()
	want := []string{"/v1/products", "/v1/prices", "/v1/checkout/sessions"}
	if len(reqs) != len(want) {
		t.Fatalf("requests for the session: got %d %+v, want %v", len(reqs), reqs, want)
	}
	for i, r := range reqs {
		if r.Path != want[i] || r.Account != e.stripe || r.Key == "" {
			t.Errorf("request %d: got %s %s account %q key %q, want %s on the connected account with a key", i, r.Method, r.Path, r.Account, r.Key, want[i])
		}
	}
	if cs := reqs[2]; cs.Form.Get("mode") != "subscription" || cs.Form.Get("line_items[0][price]") == "" || !strings.HasPrefix(cs.Key, "cs_") ||
		cs.Form.Get("subscription_data[application_fee_percent]") == "" {
		t.Errorf("checkout: got %v key %q, want subscription mode on the mirrored price, our cs_ id as key, the fee percent", cs.Form, cs.Key)
	}
	yes := true
	if _, err := svc.CancelSubscription(ctx, e.sc, sub.ID, payments.CancelInput{AtPeriodEnd: &yes}); err != nil {
		t.Fatal(err)
	}
	q, pb := 4, "always_invoice"
	if _, err := svc.ChangeQuantity(ctx, e.sc, sub.ID, payments.QuantityInput{Quantity: &q, ProrationBehavior: &pb}); err != nil {
		t.Fatal(err)
	}
	reqs = rec.take()
	var update []sent
	for _, r := range reqs {
		if r.Method == "POST" && r.Path == "/v1/subscriptions/sub_stripe_req" {
			update = append(update, r)
		}
	}
	if len(update) != 2 || update[0].Form.Get("cancel_at_period_end") != "true" || !strings.HasPrefix(update[0].Key, "evt_") ||
		update[1].Form.Get("items[0][quantity]") != "4" || update[1].Form.Get("proration_behavior") != "always_invoice" || !strings.HasPrefix(update[1].Key, "sqp_") {
		t.Errorf("updates of Stripe's subscription: got %+v", update)
	}
	var changeID string
	if err := db.Get(&changeID, `SELECT id FROM subscription_quantity_previews WHERE subscription_id = $1`, sub.ID); err != nil || changeID != update[1].Key {
		t.Errorf("the quantity change's key: got %q, our row %q (%v)", update[1].Key, changeID, err)
	}
}

// A Stripe failure leaves nothing written here: no session; the
// subscription as it was after a cancel, resume, quantity change or portal
// session that Stripe refused.
func TestStripeBillingFaults(t *testing.T) {
	e := newInboundEnv(t)
	ctx := context.Background()
	sub := e.subscribe("sub_stripe_faults", 1)
	down := newProcessor(e.db, closedPort(t))
	svc := payments.NewService(postgres.New(e.db), nil, time.Now, payments.WithProcessor(down))
	isProcessorError := func(what string, err error) {
		t.Helper()
		if payments.ErrorCode(err) != payments.ProcessorError && !isPE(err) {
			t.Errorf("%s: got %v, want a processor error", what, err)
		}
	}
	before := e.count(`SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1`, e.sc.MerchantID)
	amount, cur, unit, ok, cancel := int64(1000), "usd", "month", "https://shop.example/ok", "https://shop.example/no"
	_, err := svc.CreateSubscriptionSession(ctx, e.sc, payments.SubscriptionSessionInput{AmountCents: &amount, Currency: &cur, Interval: &unit, SuccessURL: &ok, CancelURL: &cancel})
	isProcessorError("session", err)
	if n := e.count(`SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1`, e.sc.MerchantID); n != before {
		t.Errorf("sessions: got %d, want %d", n, before)
	}
	yes := true
	_, err = svc.CancelSubscription(ctx, e.sc, sub.ID, payments.CancelInput{AtPeriodEnd: &yes})
	isProcessorError("cancel", err)
	q := 7
	_, err = svc.ChangeQuantity(ctx, e.sc, sub.ID, payments.QuantityInput{Quantity: &q})
	isProcessorError("quantity", err)
	ret := "https://shop.example/account"
	_, err = svc.CreatePortalSession(ctx, e.sc, sub.ID, payments.PortalSessionInput{ReturnURL: &ret})
	isProcessorError("portal", err)
	after, err := e.svc.Subscription(ctx, e.sc, sub.ID)
	if err != nil || after.CancelAtPeriodEnd || after.Quantity() != 1 {
		t.Errorf("subscription after refused changes: got %+v, %v, want unchanged", after, err)
	}
	if n := e.count(`SELECT count(*) FROM events WHERE merchant_id = $1 AND type = 'customer.subscription.updated'`, e.sc.MerchantID) +
		e.count(`SELECT count(*) FROM subscription_quantity_previews WHERE subscription_id = $1`, sub.ID) +
		e.count(`SELECT count(*) FROM portal_sessions WHERE subscription_id = $1`, sub.ID); n != 0 {
		t.Errorf("rows written by refused changes: %d, want 0", n)
	}
}

func isPE(err error) bool {
	_, ok := err.(*processor.Error)
	return ok
}

// One Stripe subscription's renewal, dunning and end, as Stripe's events,
// delivered in order, or reversed with redeliveries, or with the
// subscription's events before its checkout's completion: the same end
// state (canceled, quantity 2, the renewal's payment recorded once) and,
// delivered in order, the events the sandbox records for the same story.
func TestStripeBillingEventsOutOfOrder(t *testing.T) {
	e := newInboundEnv(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	p1 := t0.Add(30 * 24 * time.Hour)
	p2 := p1.Add(31 * 24 * time.Hour)
	type stripeEvent struct {
		id, typ string
		obj     map[string]any
		at      time.Time
	}
	story := func(stripeSub, cs string) []stripeEvent {
		meta := map[string]string{"paysvc_checkout_session": cs}
		state := func(status string, start, end time.Time, qty int, cancelAtEnd bool, extra map[string]any) map[string]any {
			o := map[string]any{"id": stripeSub, "object": "subscription", "status": status, "metadata": meta,
				"current_period_start": start.Unix(), "current_period_end": end.Unix(), "cancel_at_period_end": cancelAtEnd,
				"billing_cycle_anchor": t0.Unix(),
				"items":                map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_" + stripeSub, "object": "subscription_item", "quantity": qty}}}}
			for k, v := range extra {
				o[k] = v
			}
			return o
		}
		invoice := func(id string, paid bool) map[string]any {
			o := map[string]any{"id": id, "object": "invoice", "subscription": stripeSub, "billing_reason": "subscription_cycle",
				"currency": "usd", "subscription_details": map[string]any{"metadata": meta}, "payment_intent": "pi_" + id,
				"charge": map[string]any{"id": "ch_" + id, "object": "charge", "payment_method_details": map[string]any{"type": "card", "card": map[string]any{"brand": "visa", "last4": "4242"}}},
				"lines": map[string]any{"object": "list", "data": []any{map[string]any{"id": "il_" + id, "object": "line_item", "type": "subscription",
					"period": map[string]any{"start": p1.Unix(), "end": p2.Unix()}}}}}
			if paid {
				o["amount_paid"] = 2000
			} else {
				o["amount_paid"], o["next_payment_attempt"] = 0, p1.Add(3*24*time.Hour).Unix()
			}
			return o
		}
		return []stripeEvent{
			{"evt_upd_qty_" + stripeSub, "customer.subscription.updated", state("active", t0, p1, 2, false, nil), t0.Add(time.Minute)},
			{"evt_inv_failed_" + stripeSub, "invoice.payment_failed", invoice("in_"+stripeSub, false), p1},
			{"evt_upd_past_due_" + stripeSub, "customer.subscription.updated", state("past_due", p1, p2, 2, false, nil), p1},
			{"evt_inv_paid_" + stripeSub, "invoice.paid", invoice("in_"+stripeSub, true), p1.Add(time.Hour)},
			{"evt_upd_active_" + stripeSub, "customer.subscription.updated", state("active", p1, p2, 2, false, nil), p1.Add(time.Hour)},
			{"evt_upd_cancel_" + stripeSub, "customer.subscription.updated", state("active", p1, p2, 2, true, nil), p1.Add(2 * time.Hour)},
			{"evt_deleted_" + stripeSub, "customer.subscription.deleted", state("canceled", p1, p2, 2, false,
				map[string]any{"canceled_at": p2.Unix(), "ended_at": p2.Unix()}), p2},
		}
	}
	deliver := func(evs []stripeEvent) {
		t.Helper()
		for _, ev := range evs {
			// Signed with the time of sending (Stripe signs each delivery
			// anew); the event's own created is the story's.
			payload, _ := e.event(ev.id, ev.typ, ev.obj, ev.at)
			sig := signNow(t, payload)
			if kept, err := e.in.Receive(context.Background(), payload, sig); err != nil || !kept {
				t.Fatalf("receive %s: kept=%v, %v", ev.id, kept, err)
			}
		}
	}
	settle := func() {
		t.Helper()
		for i := 0; i < 5 && e.work() > 0; i++ {
		}
		if n := e.work(); n != 0 {
			t.Fatalf("%d events still waiting", n)
		}
	}

	// In order.
	inOrder := e.subscribe("sub_in_order", 1)
	since := time.Now()
	deliver(story("sub_in_order", *inOrder.SessionID))
	settle()

	// Reversed, with redeliveries.
	reversed := e.subscribe("sub_reversed", 1)
	evs := story("sub_reversed", *reversed.SessionID)
	var back []stripeEvent
	for i := len(evs) - 1; i >= 0; i-- {
		back = append(back, evs[i])
	}
	for i := range back {
		deliver(back[i : i+1])
		e.work()
	}
	deliver(evs[3:4]) // invoice.paid again
	deliver(back[:1]) // deleted again
	settle()

	// Before the end: in order, and reversed (stale states arrive last).
	deliver(story("sub_mid_order", *e.subscribe("sub_mid_order", 1).SessionID)[:6])
	mid := story("sub_mid_reversed", *e.subscribe("sub_mid_reversed", 1).SessionID)[:6]
	for i := len(mid) - 1; i >= 0; i-- {
		deliver(mid[i : i+1])
		e.work() // applied as it arrives, as the worker does
	}
	settle()

	// The subscription's events before its checkout completed.
	earlySub := "sub_early"
	amount, cur, unit, ok, cancel, qty := int64(1000), "usd", "month", "https://shop.example/ok", "https://shop.example/no", int64(1)
	cs, err := e.svc.CreateSubscriptionSession(context.Background(), e.sc, payments.SubscriptionSessionInput{
		AmountCents: &amount, Currency: &cur, Interval: &unit, Quantity: &qty, SuccessURL: &ok, CancelURL: &cancel,
	})
	if err != nil {
		t.Fatal(err)
	}
	deliver(story(earlySub, cs.ID))
	if n := e.work(); n == 0 {
		t.Errorf("events of a subscription whose checkout is not applied: none waiting, want them retried")
	}
	e.send("evt_cs_early", "checkout.session.completed", map[string]any{
		"id": "cs_test_early", "object": "checkout.session", "mode": "subscription", "status": "complete",
		"payment_status": "paid", "client_reference_id": cs.ID, "subscription": earlySub, "amount_total": amount,
	})
	settle()

	end := func(stripeSub string) (map[string]any, int) {
		t.Helper()
		var id string
		if err := e.db.Get(&id, `SELECT id FROM subscriptions WHERE processor_subscription_id = $1`, stripeSub); err != nil {
			t.Fatal(err)
		}
		sub, err := e.svc.Subscription(context.Background(), e.sc, id)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(sub.Object())
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		for _, k := range []string{"id", "customer", "created", "metadata"} {
			delete(m, k)
		}
		delete(m["items"].([]any)[0].(map[string]any), "id")
		delete(m["items"].([]any)[0].(map[string]any)["price"].(map[string]any), "id")
		renewals := e.count(`SELECT count(*) FROM payment_intents WHERE subscription_id = $1 AND status = 'succeeded' AND amount = 2000 AND card_last4 = '4242'`, id)
		return m, renewals
	}
	want, n := end("sub_in_order")
	if want["status"] != payments.SubCanceled || want["quantity"] != float64(2) || want["current_period_end"] != float64(p2.Unix()) || n != 1 {
		t.Errorf("in order: got %v, %d renewal payments, want canceled at %d, quantity 2, one renewal payment", want, n, p2.Unix())
	}
	for _, s := range []string{"sub_reversed", "sub_early"} {
		got, n := end(s)
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		if string(gj) != string(wj) || n != 1 {
			t.Errorf("%s: got %s with %d renewal payments, want %s with 1", s, gj, n, wj)
		}
	}

	wantMid, _ := end("sub_mid_order")
	gotMid, n := end("sub_mid_reversed")
	gj, _ := json.Marshal(gotMid)
	wj, _ := json.Marshal(wantMid)
	if string(gj) != string(wj) || n != 1 || wantMid["status"] != payments.SubActive || wantMid["cancel_at_period_end"] != true {
		t.Errorf("before the end, reversed: got %s with %d renewal payments, want %s (active, canceling) with 1", gj, n, wj)
	}

	// In order, the events the sandbox records for the same story.
	var types []string
	if err := e.db.Select(&types, `SELECT type FROM events WHERE merchant_id = $1 AND created_at >= $2 AND data::text LIKE '%' || $3 || '%'
		ORDER BY created_at, id`, e.sc.MerchantID, since, inOrder.ID); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, ty := range types {
		counts[ty]++
	}
	if counts["payment_intent.succeeded"] != 1 || counts["customer.subscription.deleted"] != 1 || counts["customer.subscription.updated"] < 4 {
		t.Errorf("events recorded in order: got %v, want one renewal payment, subscription updates and one deletion", types)
	}
}

// signNow signs payload as Stripe signs a delivery now.
func signNow(t *testing.T, payload []byte) string {
	t.Helper()
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: whsec, Timestamp: time.Now()}).Header
}
