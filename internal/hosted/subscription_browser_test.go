package hosted_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"paysvc/internal/testenv"
)

const cardDeclinesAfterSave = "4000 0000 0000 0341"

// subscriptionView is what these tests read of a subscription.
type subscriptionView struct {
	ID       string  `json:"id"`
	Status   string  `json:"status"`
	TrialEnd *int64  `json:"trial_end"`
	Customer string  `json:"customer"`
	PeriodE  int64   `json:"current_period_end"`
	PeriodS  int64   `json:"current_period_start"`
	Sub      *string `json:"subscription"`
}

// createSubSession creates a subscription session; its url must be set.
func (s *stack) createSubSession(key string, body map[string]any) sessionView {
	s.t.Helper()
	var cs sessionView
	s.api("POST", "/v1/subscription-sessions", key, body, &cs)
	if cs.URL == nil || !strings.HasPrefix(*cs.URL, s.url+"/checkout/") {
		s.t.Fatalf("session url = %v, want %s/checkout/…", cs.URL, s.url)
	}
	return cs
}

// subscriptionOf reads the subscription a completed session created.
func (s *stack) subscriptionOf(key, sessionID string) subscriptionView {
	s.t.Helper()
	var cs struct {
		Subscription *string `json:"subscription"`
	}
	s.api("GET", "/v1/payment-sessions/"+sessionID, key, nil, &cs)
	if cs.Subscription == nil {
		s.t.Fatalf("session %s has no subscription", sessionID)
	}
	var sub subscriptionView
	s.api("GET", "/v1/subscriptions/"+*cs.Subscription, key, nil, &sub)
	return sub
}

// TestBrowserSubscribe: the hosted page in subscription mode shows the plan
// and its terms, and subscribing starts the subscription: paid now without
// a trial, trialing (nothing charged, even with the 0341 card) with one;
// without a trial the 0341 card's decline is shown and nothing is created.
func TestBrowserSubscribe(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)

	t.Run("no trial", func(t *testing.T) {
		ctx := testenv.BrowserStep(t, browser)
		key := s.testKey()
		cs := s.createSubSession(key, map[string]any{
			"amount_cents": 1500, "currency": "usd", "interval": "week", "interval_count": 2, "name": "Coffee beans",
			"quantity": 2, "success_url": sh.successURL(), "cancel_url": sh.cancelURL(),
		})
		do(t, ctx, "open the checkout page", chromedp.Navigate(*cs.URL), chromedp.WaitVisible(chromedp.ID("pay")))
		if got, want := text(t, ctx, "#plan-name"), "Coffee beans"; got != want {
			t.Errorf("plan: got %q, want %q", got, want)
		}
		if got, want := text(t, ctx, "#plan-terms"), "USD 30.00 every 2 weeks"; got != want {
			t.Errorf("terms: got %q, want %q", got, want)
		}
		if got, want := text(t, ctx, "#total"), "USD 30.00"; got != want {
			t.Errorf("due today: got %q, want %q", got, want)
		}
		if got := text(t, ctx, "#pay"); got != "Subscribe and pay USD 30.00" {
			t.Errorf("button: got %q", got)
		}

		// The 0341 card is declined for a first charge: the page says so.
		fillCard(t, ctx, validCard(cardDeclinesAfterSave))
		do(t, ctx, "subscribe", chromedp.Click(chromedp.ID("pay")), chromedp.WaitVisible(chromedp.ID("payment-error")))
		if got := text(t, ctx, "#payment-error"); !strings.Contains(got, "declined") {
			t.Errorf("decline message: got %q", got)
		}
		if got := s.session(key, cs.ID); got.Status != "open" || len(s.testPayments(key)) != 0 {
			t.Errorf("after the decline: session %s, %d payments; want open and none", got.Status, len(s.testPayments(key)))
		}

		// The page never echoes the card number or CVC back.
		fillCard(t, ctx, card{number: cardSuccess, cvc: "123"})
		do(t, ctx, "subscribe", chromedp.Click(chromedp.ID("pay")))
		waitLocation(t, ctx, sh.successOf(cs.ID))
		sub := s.subscriptionOf(key, cs.ID)
		if sub.Status != "active" || sub.TrialEnd != nil || sub.PeriodE-sub.PeriodS != 14*86400 {
			t.Errorf("got %+v, want active for two weeks", sub)
		}
		ps := s.testPayments(key)
		if len(ps) != 1 || ps[0].Amount != 3000 || ps[0].Status != "succeeded" {
			t.Errorf("payments: got %+v, want the first period's 3000", ps)
		}
	})

	t.Run("trial", func(t *testing.T) {
		ctx := testenv.BrowserStep(t, browser)
		key := s.testKey()
		var prod struct {
			Price struct {
				ID string `json:"id"`
			} `json:"price"`
		}
		s.api("POST", "/v1/subscription-products", key, map[string]any{
			"name": "Pro plan", "amount": 4900, "currency": "usd", "interval": "monthly", "trial_period_days": 14,
		}, &prod)
		cs := s.createSubSession(key, map[string]any{"price_id": prod.Price.ID, "success_url": sh.successURL(), "cancel_url": sh.cancelURL()})
		do(t, ctx, "open the checkout page", chromedp.Navigate(*cs.URL), chromedp.WaitVisible(chromedp.ID("pay")))
		if got, want := text(t, ctx, "#plan-terms"), "14 days free, then USD 49.00 every month"; got != want {
			t.Errorf("terms: got %q, want %q", got, want)
		}
		if got := text(t, ctx, "#first-charge"); !strings.HasPrefix(got, "Nothing is charged today. First charge of USD 49.00 on ") {
			t.Errorf("first charge: got %q", got)
		}
		if got, want := text(t, ctx, "#total"), "USD 0.00"; got != want {
			t.Errorf("due today: got %q, want %q", got, want)
		}
		if got := text(t, ctx, "#pay"); got != "Start trial" {
			t.Errorf("button: got %q", got)
		}
		fillCard(t, ctx, validCard(cardDeclinesAfterSave))
		do(t, ctx, "start the trial", chromedp.Click(chromedp.ID("pay")))
		waitLocation(t, ctx, sh.successOf(cs.ID))
		sub := s.subscriptionOf(key, cs.ID)
		if sub.Status != "trialing" || sub.TrialEnd == nil || *sub.TrialEnd-sub.PeriodS != 14*86400 {
			t.Errorf("got %+v, want trialing for 14 days", sub)
		}
		if ps := s.testPayments(key); len(ps) != 0 {
			t.Errorf("got %d payments for a trial, want 0", len(ps))
		}
	})
}
