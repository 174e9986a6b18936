package stripe_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/processortest"
	"paysvc/internal/processor/stripe/stripemock"
	"paysvc/internal/testenv"
)

// sent is one request the adapter made to Stripe.
type sent struct {
	Method, Path, Account, Key string
	Form                       url.Values
}

// recorder stands between the adapter and stripe-mock and keeps what was
// sent: stripe-mock validates each request against Stripe's OpenAPI but
// answers canned objects, so what we asked for is checked here.
type recorder struct {
	mu   sync.Mutex
	reqs []sent
}

func (r *recorder) take() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

func recordingStripe(t *testing.T) (string, *recorder) {
	t.Helper()
	target, err := url.Parse(stripemock.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, sent{req.Method, req.URL.Path, req.Header.Get("Stripe-Account"), req.Header.Get("Idempotency-Key"), form})
		rec.mu.Unlock()
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, rec
}

// stripeAccountOf is the merchant's connected account as recorded.
func stripeAccountOf(t *testing.T, db *sqlx.DB, acct processor.Account) string {
	t.Helper()
	var id string
	if err := db.Get(&id, `SELECT account_id FROM stripe_accounts WHERE merchant_id = $1 AND livemode = $2`, acct.MerchantID, acct.Live); err != nil {
		t.Fatal(err)
	}
	return id
}

func code(err error) string {
	var pe *processor.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// A price is mirrored once (a product and a recurring price, idempotency
// keys from our price id), then sold with Checkout in subscription mode on
// the merchant's account with the trial, the quantity and the plan's fee
// as application_fee_percent.
func TestSubscriptionCheckoutOnStripe(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	base, rec := recordingStripe(t)
	p := newProcessor(db, base)
	acct := connected(t, db, false) // plan pro: 4.2%
	connectedID := stripeAccountOf(t, db, acct)

	cs := processor.SubscriptionCheckout{ID: payments.NewID("cs_"), PriceID: payments.NewID("price_"), Quantity: 3,
		TrialPeriodDays: 14, CustomerEmail: "ada@example.com",
		SuccessURL: "https://shop.example/ok?s={CHECKOUT_SESSION_ID}", CancelURL: "https://shop.example/no",
		ExpiresAt: time.Now().Add(2 * time.Hour)}
	if _, err := p.CreateSubscriptionCheckout(ctx, acct, cs); code(err) != "unknown_price" {
		t.Fatalf("checkout before the mirror: got %v, want unknown_price", err)
	}

	price := processor.RecurringPrice{ID: cs.PriceID, ProductName: "Pro plan", Amount: 1500, Currency: "usd", Months: 12}
	if err := p.MirrorPrice(ctx, acct, price); err != nil {
		t.Fatalf("mirror: %v", err)
	}
	reqs := rec.take()
	if len(reqs) != 2 || reqs[0].Path != "/v1/products" || reqs[1].Path != "/v1/prices" {
		t.Fatalf("mirror sent %+v, want a product then a price", reqs)
	}
	for _, r := range reqs {
		if r.Account != connectedID || r.Key == "" {
			t.Errorf("%s: Stripe-Account %q, Idempotency-Key %q: want %s and a key", r.Path, r.Account, r.Key, connectedID)
		}
	}
	if f := reqs[1].Form; f.Get("unit_amount") != "1500" || f.Get("recurring[interval]") != "year" || f.Get("recurring[interval_count]") != "1" {
		t.Errorf("price: got %v, want 1500 every 1 year", f)
	}
	// Mirrored once: asking again sends nothing, even with Stripe gone.
	if err := newProcessor(db, closedPort(t)).MirrorPrice(ctx, acct, price); err != nil {
		t.Errorf("mirror again: %v", err)
	}

	hc, err := p.CreateSubscriptionCheckout(ctx, acct, cs)
	if err != nil || hc.URL == "" {
		t.Fatalf("checkout: %q, %v", hc.URL, err)
	}
	reqs = rec.take()
	if len(reqs) != 1 || reqs[0].Path != "/v1/checkout/sessions" {
		t.Fatalf("checkout sent %+v", reqs)
	}
	f := reqs[0].Form
	want := map[string]string{
		"mode": "subscription", "line_items[0][quantity]": "3", "subscription_data[trial_period_days]": "14",
		"subscription_data[application_fee_percent]": "4.2000", "client_reference_id": cs.ID,
		"success_url": "https://shop.example/ok?s=" + cs.ID, "customer_email": "ada@example.com",
		"subscription_data[metadata][paysvc_checkout_session]": cs.ID,
	}
	for k, v := range want {
		if f.Get(k) != v {
			t.Errorf("checkout %s: got %q, want %q", k, f.Get(k), v)
		}
	}
	if f.Get("line_items[0][price]") == "" || reqs[0].Key != cs.ID || reqs[0].Account != connectedID {
		t.Errorf("checkout: price %q, key %q, account %q: want the mirrored price, %s, %s", f.Get("line_items[0][price]"), reqs[0].Key, reqs[0].Account, cs.ID, connectedID)
	}
}

// Cancel, resume, quantity and the portal act on Stripe's subscription
// recorded for ours, each with our row id as idempotency key.
func TestSubscriptionManagementOnStripe(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	base, rec := recordingStripe(t)
	p := newProcessor(db, base)
	acct := connected(t, db, true)
	sub := payments.NewID("sub_")

	if err := p.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: "k1", SubscriptionID: sub, AtPeriodEnd: true}); code(err) != "unknown_subscription" {
		t.Fatalf("cancel of a subscription Stripe does not know: got %v, want unknown_subscription", err)
	}
	if len(rec.take()) != 0 {
		t.Errorf("a request was sent for an unknown subscription")
	}
	if err := p.Remember(ctx, acct, sub, "sub_stripe1"); err != nil {
		t.Fatal(err)
	}

	one := func(what, method, path, key string, form map[string]string) {
		t.Helper()
		reqs := rec.take()
		if len(reqs) == 0 {
			t.Fatalf("%s: nothing sent", what)
		}
		r := reqs[len(reqs)-1]
		if r.Method != method || r.Path != path || r.Key != key || r.Account != stripeAccountOf(t, db, acct) {
			t.Errorf("%s: sent %s %s key %q account %q, want %s %s key %q", what, r.Method, r.Path, r.Key, r.Account, method, path, key)
		}
		for k, v := range form {
			if r.Form.Get(k) != v {
				t.Errorf("%s: %s = %q, want %q", what, k, r.Form.Get(k), v)
			}
		}
	}

	if err := p.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: "evt_cancel", SubscriptionID: sub, AtPeriodEnd: true}); err != nil {
		t.Fatalf("cancel at period end: %v", err)
	}
	one("cancel at period end", http.MethodPost, "/v1/subscriptions/sub_stripe1", "evt_cancel", map[string]string{"cancel_at_period_end": "true"})

	if err := p.ResumeSubscription(ctx, acct, "evt_resume", sub); err != nil {
		t.Fatalf("resume: %v", err)
	}
	one("resume", http.MethodPost, "/v1/subscriptions/sub_stripe1", "evt_resume", map[string]string{"cancel_at_period_end": "false"})

	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for _, b := range []string{"create_prorations", "always_invoice", "none"} {
		key := payments.NewID("sqp_")
		err := p.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: key, SubscriptionID: sub, Quantity: 5, ProrationBehavior: b, ProrationDate: at})
		if err != nil {
			t.Fatalf("quantity %s: %v", b, err)
		}
		date := ""
		if b != "none" {
			date = itoa(at.Unix())
		}
		one("quantity "+b, http.MethodPost, "/v1/subscriptions/sub_stripe1", key, map[string]string{
			"items[0][quantity]": "5", "proration_behavior": b, "proration_date": date})
	}
	if err := p.ChangeQuantity(ctx, acct, processor.QuantityChange{Key: "k", SubscriptionID: sub, Quantity: 2, ProrationBehavior: "sometimes"}); code(err) != "invalid_proration_behavior" {
		t.Errorf("unknown proration behavior: got %v", err)
	}

	if err := p.CancelSubscription(ctx, acct, processor.SubscriptionCancel{Key: "evt_now", SubscriptionID: sub}); err != nil {
		t.Fatalf("cancel now: %v", err)
	}
	one("cancel now", http.MethodDelete, "/v1/subscriptions/sub_stripe1", "evt_now", map[string]string{"prorate": "false"})
	rec.take()

	bps := payments.NewID("bps_")
	u, err := p.CreatePortalSession(ctx, acct, processor.PortalSession{ID: bps, SubscriptionID: sub, ReturnURL: "https://shop.example/account"})
	if err != nil || u == "" {
		t.Fatalf("portal: %q, %v", u, err)
	}
	one("portal", http.MethodPost, "/v1/billing_portal/sessions", bps, map[string]string{"return_url": "https://shop.example/account"})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestBillingContract runs processor.Billing's contract on the adapter
// against stripe-mock.
func TestBillingContract(t *testing.T) {
	db := testenv.DB(t)
	p := newProcessor(db, stripemock.Start(t))
	processortest.RunBilling(t, processortest.BillingHarness{
		Harness: processortest.Harness{
			New:         func(t *testing.T) processor.Processor { return p },
			Account:     func(t *testing.T, live bool) processor.Account { return connected(t, db, live) },
			Unavailable: func(t *testing.T) processor.Processor { return newProcessor(db, closedPort(t)) },
			NewID:       payments.NewID,
			Stateless:   true,
		},
		Subscribed: func(t *testing.T, acct processor.Account, id string) {
			if err := p.Remember(context.Background(), acct, id, "sub_"+id[4:]); err != nil {
				t.Fatal(err)
			}
		},
	})
}
