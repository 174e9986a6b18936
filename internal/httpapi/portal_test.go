package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// subscribed stores an active monthly subscription (USD 15.00 × 2) of a
// new customer of sc, as a paid subscription checkout leaves it.
func subscribed(t *testing.T, h *harness, sc payments.Scope) payments.Subscription {
	t.Helper()
	ctx := context.Background()
	email := "ada@example.com"
	cus, err := h.svc.CreateCustomer(ctx, sc, payments.CustomerInput{Email: &email})
	if err != nil {
		t.Fatal(err)
	}
	iv, err := payments.UnitInterval(payments.Month, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := h.svc.Now(ctx, sc).UTC().Truncate(time.Second)
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: start,
		CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1), Live: sc.Live, Created: start,
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Pro plan", Quantity: 2,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
	}
	if err := h.store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
		t.Fatal(err)
	}
	return sub
}

type portalSessionView struct {
	ID           string `json:"id"`
	Object       string `json:"object"`
	URL          string `json:"url"`
	ReturnURL    string `json:"return_url"`
	Subscription string `json:"subscription"`
	Customer     string `json:"customer"`
	ExpiresAt    int64  `json:"expires_at"`
	Created      int64  `json:"created"`
	Livemode     bool   `json:"livemode"`
}

// TestPortalSessionCreate: the route returns a bps_ session whose url is
// the public base's /portal/ page with a signed token, expiring after the
// TTL on the merchant's clock; the url opens the page. return_url is
// required and must be https; another merchant's or mode's subscription
// is subscription_not_found.
func TestPortalSessionCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mid := h.merchant(payments.PlanFree)
	key := h.key(mid, false)
	sc := payments.Scope{MerchantID: mid}
	sub := subscribed(t, h, sc)
	path := "/v1/subscriptions/" + sub.ID + "/portal-session"

	r := h.do("POST", path, key, map[string]any{"return_url": "https://shop.example/account"})
	if r.Status != http.StatusOK {
		t.Fatalf("create: got %d %s, want 200", r.Status, r.Raw)
	}
	var ps portalSessionView
	r.data(t, &ps)
	if !strings.HasPrefix(ps.ID, "bps_") || ps.Object != "billing_portal.session" || ps.Subscription != sub.ID ||
		ps.Customer != sub.CustomerID || ps.ReturnURL != "https://shop.example/account" || ps.Livemode {
		t.Errorf("got %+v, want a bps_ session of %s and %s returning to the shop, test mode", ps, sub.ID, sub.CustomerID)
	}
	if want := h.url + "/portal/" + ps.ID + "."; !strings.HasPrefix(ps.URL, want) || len(ps.URL) < len(want)+40 {
		t.Errorf("got url %q, want %s<signature>", ps.URL, want)
	}
	if got := ps.ExpiresAt - ps.Created; got != int64(time.Hour/time.Second) {
		t.Errorf("got expires_at - created = %ds, want the TTL, 3600s", got)
	}

	// The clock of the merchant decides: moved a day ahead, a new session
	// is created and expires on that clock.
	if _, err := h.svc.AdvanceClock(context.Background(), sc, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	var later portalSessionView
	h.do("POST", path, key, map[string]any{"return_url": "https://shop.example/account"}).data(t, &later)
	if got := later.ExpiresAt - time.Now().Unix(); got < 24*3600 || got > 25*3600+5 {
		t.Errorf("after a day's advance got expires_at %ds from real now, want about 25h", got)
	}

	resp, err := http.Get(ps.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("GET the first url a day later: got %d, want 410 (expired on the merchant's clock)", resp.StatusCode)
	}
	resp, err = http.Get(later.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET the new url: got %d, want 200", resp.StatusCode)
	}

	for _, tt := range []struct {
		name, key, path string
		body            any
		status          int
		code            string
	}{
		{"no return_url", key, path, map[string]any{}, 400, "validation_error"},
		{"empty return_url", key, path, map[string]any{"return_url": ""}, 400, "validation_error"},
		{"http return_url", key, path, map[string]any{"return_url": "http://shop.example/account"}, 400, "invalid_url"},
		{"not a url", key, path, map[string]any{"return_url": "shop.example"}, 400, "invalid_url"},
		{"unknown field", key, path, map[string]any{"return_url": "https://shop.example/", "customer": "cus_x"}, 400, "validation_error"},
		{"unknown subscription", key, "/v1/subscriptions/sub_unknown/portal-session", map[string]any{"return_url": "https://shop.example/"}, 404, "subscription_not_found"},
		{"another merchant", h.testKey(), path, map[string]any{"return_url": "https://shop.example/"}, 404, "subscription_not_found"},
		{"live mode of the merchant", h.key(mid, true), path, map[string]any{"return_url": "https://shop.example/"}, 404, "subscription_not_found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do("POST", tt.path, tt.key, tt.body)
			if r.Status != tt.status || r.code() != tt.code {
				t.Errorf("got %d %s, want %d %s", r.Status, r.Raw, tt.status, tt.code)
			}
		})
	}
}
