package hosted_test

// Browser tests of the hosted pages: a real headless Chromium (Debian's
// chromium, driven by chromedp) against a real API server on a real
// PostgreSQL database and Redis, paying with the sandbox's test cards and
// landing on a TLS "shop" that stands in for the merchant's site.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jmoiron/sqlx"

	"paysvc/internal/hosted"
	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
	"paysvc/internal/testenv"
)

const (
	cardSuccess      = "4242 4242 4242 4242"
	cardDeclined     = "4000000000000002"
	cardInsufficient = "4000000000009995"
)

// ---- the stack: API server, hosted pages, sandbox, PostgreSQL, Redis ----

// stack is a real API server with the sandbox processor and the hosted
// pages, like internal/httpapi's harness.
type stack struct {
	t     *testing.T
	url   string
	svc   *payments.Service
	store *postgres.Store
	db    *sqlx.DB
}

func newStack(t *testing.T, sessionTTL time.Duration) *stack {
	t.Helper()
	return newStackKey(t, sessionTTL, testPortalKey)
}

// newStackKey is newStack signing portal URLs with portalKey.
func newStackKey(t *testing.T, sessionTTL time.Duration, portalKey []byte) *stack {
	t.Helper()
	if sessionTTL == 0 {
		sessionTTL = 24 * time.Hour
	}
	db := testenv.DB(t)
	store := postgres.New(db)
	bl, err := payments.LoadBlocklist("")
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox needs the server's URL for the session urls, so the
	// handler is set after the server starts.
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	sb := sandbox.New(db, srv.URL)
	box, err := secrets.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	svc := payments.NewService(store, bl, time.Now, payments.WithProcessor(sb), payments.WithSessionTTL(sessionTTL),
		payments.WithSandboxClocks(), payments.WithPortal(portalKey, time.Hour, srv.URL))
	handler = httpapi.New(httpapi.Deps{
		Service: svc,
		Store:   store,
		Limiter: ratelimit.New(testenv.Redis(t), 100000),
		Pages:   hosted.New(svc, sb.Cards(svc), nil),
		Secrets: box,
	})
	return &stack{t: t, url: srv.URL, svc: svc, store: store, db: db}
}

// testPortalKey signs portal URLs in tests.
var testPortalKey = bytes.Repeat([]byte{7}, 32)

// testKey creates a merchant on the free plan and returns a test-mode key.
func (s *stack) testKey() string {
	s.t.Helper()
	_, key := s.merchantKey()
	return key
}

// merchantKey creates a merchant on the free plan and returns its id and a
// test-mode key.
func (s *stack) merchantKey() (string, string) {
	s.t.Helper()
	ctx := context.Background()
	m, err := s.svc.CreateMerchant(ctx, "Browser test shop", "", payments.PlanFree)
	if err != nil {
		s.t.Fatal(err)
	}
	k, err := s.svc.CreateKey(ctx, m.ID, false, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	return m.ID, k.Secret
}

// api sends a request to the API with the key and decodes the success
// payload into out; anything but 200 fails the test.
func (s *stack) api(method, path, key string, body, out any) {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	var env struct {
		Success bool            `json:"success"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil || resp.StatusCode != http.StatusOK || !env.Success {
		s.t.Fatalf("%s %s: got %d %s, want 200 with success", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(env.Data, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, env.Data, err)
		}
	}
}

// sessionView is a payment session as the API returns it.
type sessionView struct {
	ID              string  `json:"id"`
	URL             *string `json:"url"`
	Status          string  `json:"status"`
	PaymentStatus   string  `json:"payment_status"`
	AmountSubtotal  int64   `json:"amount_subtotal"`
	AmountTotal     int64   `json:"amount_total"`
	CustomerEmail   *string `json:"customer_email"`
	PaymentIntent   *string `json:"payment_intent"`
	ShippingDetails *struct {
		Address payments.Address        `json:"address"`
		Option  payments.ShippingOption `json:"option"`
	} `json:"shipping_details"`
	BillingDetails *payments.Address `json:"billing_details"`
}

// paymentView is a payment of GET /v1/test-payments.
type paymentView struct {
	ID             string  `json:"id"`
	Amount         int64   `json:"amount"`
	AmountReceived int64   `json:"amount_received"`
	Status         string  `json:"status"`
	CustomerName   *string `json:"customer_name"`
	CustomerEmail  *string `json:"customer_email"`
	PaymentSession *string `json:"payment_session"`
	LastDecline    *string `json:"last_decline_code"`
	Livemode       bool    `json:"livemode"`
}

func (s *stack) session(key, id string) sessionView {
	s.t.Helper()
	var cs sessionView
	s.api("GET", "/v1/payment-sessions/"+id, key, nil, &cs)
	return cs
}

// createSession creates a session and returns it; its url must be set.
func (s *stack) createSession(key string, body map[string]any) sessionView {
	s.t.Helper()
	var cs sessionView
	s.api("POST", "/v1/payment-sessions", key, body, &cs)
	if cs.URL == nil || !strings.HasPrefix(*cs.URL, s.url+"/checkout/") {
		s.t.Fatalf("session url = %v, want %s/checkout/…", cs.URL, s.url)
	}
	return cs
}

// testPayments returns the test-mode payments of the key's merchant.
func (s *stack) testPayments(key string) []paymentView {
	s.t.Helper()
	var page struct {
		Data []paymentView `json:"data"`
	}
	s.api("GET", "/v1/test-payments?limit=100", key, nil, &page)
	return page.Data
}

// ---- the shop: the merchant's https site with the success and cancel pages ----

type shop struct{ url string }

// newShop starts a TLS server whose /success and /cancel pages show their
// query string in #query.
func newShop(t *testing.T) shop {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/success" && r.URL.Path != "/cancel" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><html lang="en"><title>Shop %s</title><h1 id="page">%s</h1><p id="query">%s</p></html>`,
			r.URL.Path, r.URL.Path, html.EscapeString(r.URL.RawQuery))
	}))
	t.Cleanup(srv.Close)
	return shop{url: srv.URL}
}

func (sh shop) successURL() string { return sh.url + "/success?session={CHECKOUT_SESSION_ID}" }
func (sh shop) cancelURL() string  { return sh.url + "/cancel?from=checkout" }

// ---- the browser ----

// newBrowser starts the tests' headless Chromium (testenv.Browser).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	return testenv.Browser(t, 1024, 900)
}

// do runs browser actions; an error fails the test.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (page at %s)", what, err, location(ctx))
	}
}

// eval evaluates a JavaScript expression in the page; an error fails the test.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// location is the page's URL, or the error reading it.
func location(ctx context.Context) string {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	loc, err := chromedp.Run(c, chromedp.Location())
	if err != nil {
		return "(location: " + err.Error() + ")"
	}
	return loc
}

// waitLocation waits until the page's URL is want and its document has
// loaded.
func waitLocation(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	var got string
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := chromedp.Run(c, chromedp.Evaluate[string](`document.readyState === "complete" ? location.href : ""`))
		cancel()
		if err == nil {
			got = v
			if got == want {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("got location %q, want %q (waited until %v)", got, want, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// text is the trimmed text of the first element matching the CSS selector.
func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("text of %s: %v (page at %s)", css, err, location(ctx))
	}
	return strings.TrimSpace(s)
}

// card is what the customer types into the card form.
type card struct {
	email, name, number, expMonth, expYear, cvc string
}

func validCard(number string) card {
	return card{
		email: "ada@example.com", name: "Ada Lovelace", number: number,
		expMonth: "12", expYear: strconv.Itoa(time.Now().Year() + 1), cvc: "123",
	}
}

// fillCard types the card form's fields that are given, through the
// labelled inputs.
func fillCard(t *testing.T, ctx context.Context, c card) {
	t.Helper()
	var steps []chromedp.Action[chromedp.Void]
	for _, f := range []struct{ id, v string }{
		{"email", c.email}, {"name", c.name}, {"card_number", c.number},
		{"exp_month", c.expMonth}, {"exp_year", c.expYear}, {"cvc", c.cvc},
	} {
		if f.v != "" {
			steps = append(steps, chromedp.SendKeys(chromedp.ID(f.id), f.v, chromedp.NodeVisible))
		}
	}
	do(t, ctx, "fill the card form", steps...)
}

// successOf is the shop's success URL for a session.
func (sh shop) successOf(id string) string { return sh.url + "/success?session=" + id }

// ---- 1. the happy path ----

func TestBrowserCheckoutPays(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	ctx := testenv.BrowserStep(t, browser)
	key := s.testKey()

	var product struct {
		DefaultPrice struct {
			ID string `json:"id"`
		} `json:"default_price"`
	}
	s.api("POST", "/v1/products", key, map[string]any{
		"name": "Stoneware mug", "price": map[string]any{"amount": 1999, "currency": "usd"},
	}, &product)
	cs := s.createSession(key, map[string]any{
		"line_items": []map[string]any{
			{"price_id": product.DefaultPrice.ID, "quantity": 2},
			{"amount": 350, "currency": "usd", "name": "Gift wrap", "quantity": 1},
		},
		"success_url": sh.successURL(),
		"cancel_url":  sh.cancelURL(),
	})

	do(t, ctx, "open the checkout page", chromedp.Navigate(*cs.URL), chromedp.WaitVisible(chromedp.ID("pay")))
	rows := eval[[][]string](t, ctx, `Array.from(document.querySelectorAll("tbody tr"), r => Array.from(r.cells, c => c.textContent.trim()))`)
	wantRows := [][]string{{"Stoneware mug", "2", "USD 39.98"}, {"Gift wrap", "1", "USD 3.50"}}
	if fmt.Sprint(rows) != fmt.Sprint(wantRows) {
		t.Errorf("got line items %q, want %q", rows, wantRows)
	}
	if got, want := text(t, ctx, "#total"), "USD 43.48"; got != want {
		t.Errorf("got total %q, want %q", got, want)
	}
	if got, want := text(t, ctx, "#pay"), "Pay USD 43.48"; got != want {
		t.Errorf("got pay button %q, want %q", got, want)
	}
	saveScreenshot(t, ctx, "checkout.png")

	fillCard(t, ctx, validCard(cardSuccess))
	do(t, ctx, "click pay", chromedp.Click(chromedp.ID("pay")))
	waitLocation(t, ctx, sh.successOf(cs.ID))
	if got, want := text(t, ctx, "#query"), "session="+cs.ID; got != want {
		t.Errorf("got shop query %q, want %q", got, want)
	}

	got := s.session(key, cs.ID)
	if got.Status != payments.SessionComplete || got.PaymentStatus != payments.PaymentPaid {
		t.Errorf("got session %s/%s, want complete/paid", got.Status, got.PaymentStatus)
	}
	if got.AmountTotal != 4348 || got.URL != nil || got.PaymentIntent == nil {
		t.Errorf("got amount_total %d, url %v, payment_intent %v; want 4348, null, set", got.AmountTotal, got.URL, got.PaymentIntent)
	}
	if got.CustomerEmail == nil || *got.CustomerEmail != "ada@example.com" {
		t.Errorf("got customer_email %v, want ada@example.com", got.CustomerEmail)
	}
	pays := s.testPayments(key)
	if len(pays) != 1 {
		t.Fatalf("got %d test payments, want 1: %+v", len(pays), pays)
	}
	p := pays[0]
	if p.Status != payments.IntentSucceeded || p.AmountReceived != 4348 || p.PaymentSession == nil || *p.PaymentSession != cs.ID ||
		p.CustomerName == nil || *p.CustomerName != "Ada Lovelace" || p.Livemode {
		t.Errorf("got payment %+v, want succeeded, 4348 received, session %s, customer Ada Lovelace, test mode", p, cs.ID)
	}
}

// ---- 2. declines ----

func TestBrowserCheckoutDecline(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	tests := []struct {
		name, card, wantAlert, wantCode string
	}{
		{"card declined", cardDeclined, "declined", "card_declined"},
		{"insufficient funds", cardInsufficient, "insufficient funds", "insufficient_funds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testenv.BrowserStep(t, browser)
			key := s.testKey()
			cs := s.createSession(key, map[string]any{
				"line_items":  []map[string]any{{"amount": 1200, "currency": "usd", "name": "Poster", "quantity": 1}},
				"success_url": sh.successURL(), "cancel_url": sh.cancelURL(),
			})
			do(t, ctx, "open the checkout page", chromedp.Navigate(*cs.URL), chromedp.WaitVisible(chromedp.ID("pay")))
			fillCard(t, ctx, validCard(tt.card))
			do(t, ctx, "click pay", chromedp.Click(chromedp.ID("pay")))
			do(t, ctx, "wait for the alert", chromedp.WaitVisible(chromedp.CSS(`[role="alert"]`)))
			if got := text(t, ctx, `[role="alert"]`); !strings.Contains(got, tt.wantAlert) {
				t.Errorf("got alert %q, want it to contain %q", got, tt.wantAlert)
			}
			if got, want := location(ctx), *cs.URL; got != want {
				t.Errorf("got location %q, want %q", got, want)
			}
			if got := s.session(key, cs.ID); got.Status != payments.SessionOpen || got.PaymentStatus != payments.PaymentUnpaid {
				t.Errorf("after a decline got session %s/%s, want open/unpaid", got.Status, got.PaymentStatus)
			}
			// The page keeps what was typed, except the card number and CVC.
			kept := eval[map[string]string](t, ctx, `Object.fromEntries(["email","name","card_number","exp_month","cvc"].map(id => [id, document.getElementById(id).value]))`)
			wantKept := map[string]string{"email": "ada@example.com", "name": "Ada Lovelace", "card_number": "", "exp_month": "12", "cvc": ""}
			if fmt.Sprint(kept) != fmt.Sprint(wantKept) {
				t.Errorf("got fields %v after the decline, want %v", kept, wantKept)
			}

			fillCard(t, ctx, card{number: cardSuccess, cvc: "123"})
			do(t, ctx, "click pay again", chromedp.Click(chromedp.ID("pay")))
			waitLocation(t, ctx, sh.successOf(cs.ID))
			if got := s.session(key, cs.ID); got.Status != payments.SessionComplete || got.PaymentStatus != payments.PaymentPaid {
				t.Errorf("after paying got session %s/%s, want complete/paid", got.Status, got.PaymentStatus)
			}
			pays := s.testPayments(key)
			if len(pays) != 1 || pays[0].Status != payments.IntentSucceeded || pays[0].AmountReceived != 1200 {
				t.Errorf("got payments %+v, want one succeeded with 1200 received", pays)
			}
		})
	}
}

// ---- 3. shipping and billing ----

func TestBrowserCheckoutShippingBilling(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	ctx := testenv.BrowserStep(t, browser)
	key := s.testKey()
	cs := s.createSession(key, map[string]any{
		"line_items":               []map[string]any{{"amount": 2000, "currency": "usd", "name": "Lamp", "quantity": 1}},
		"success_url":              sh.successURL(),
		"cancel_url":               sh.cancelURL(),
		"collect_shipping_address": true,
		"shipping_countries":       []string{"US", "CA"},
		"shipping_options": []map[string]any{
			{"label": "Standard", "amount": 500},
			{"label": "Express", "amount": 1500},
		},
		"billing_address_collection": "required",
	})

	do(t, ctx, "open the checkout page", chromedp.Navigate(*cs.URL), chromedp.WaitVisible(chromedp.ID("pay")))
	for _, id := range []string{"ship_line1", "ship_line2", "ship_city", "ship_postal_code", "ship_country", "bill_line1", "bill_city", "bill_postal_code", "bill_country"} {
		do(t, ctx, "find #"+id, chromedp.WaitVisible(chromedp.ID(id)))
	}
	if got := eval[string](t, ctx, `document.getElementById("ship_country").tagName`); got != "SELECT" {
		t.Errorf("got #ship_country a %s, want a SELECT", got)
	}
	countries := eval[[]string](t, ctx, `Array.from(document.querySelectorAll("#ship_country option"), o => o.value)`)
	if fmt.Sprint(countries) != "[US CA]" {
		t.Errorf("got countries %v, want [US CA]", countries)
	}
	radios := eval[[]string](t, ctx, `Array.from(document.querySelectorAll('input[type="radio"][name="shipping_option"]'), r => r.closest("label").textContent.trim())`)
	wantRadios := []string{"Standard — USD 5.00 (total USD 25.00)", "Express — USD 15.00 (total USD 35.00)"}
	if fmt.Sprint(radios) != fmt.Sprint(wantRadios) {
		t.Errorf("got shipping options %q, want %q", radios, wantRadios)
	}

	fillCard(t, ctx, validCard(cardSuccess))
	do(t, ctx, "fill the addresses",
		chromedp.SendKeys(chromedp.ID("ship_line1"), "1 Main St"),
		chromedp.SendKeys(chromedp.ID("ship_city"), "Toronto"),
		chromedp.SendKeys(chromedp.ID("ship_postal_code"), "M5V 2T6"),
		chromedp.SetValue(chromedp.ID("ship_country"), "CA"),
		chromedp.SendKeys(chromedp.ID("bill_line1"), "2 Side Ave"),
		chromedp.SendKeys(chromedp.ID("bill_city"), "Boston"),
		chromedp.SendKeys(chromedp.ID("bill_postal_code"), "02110"),
		chromedp.SendKeys(chromedp.ID("bill_country"), "US"),
	)
	// No shipping method chosen: the page asks for one and charges nothing.
	do(t, ctx, "click pay without a shipping method", chromedp.Click(chromedp.ID("pay")))
	do(t, ctx, "wait for the alert", chromedp.WaitVisible(chromedp.CSS(`[role="alert"]`)))
	fieldErrs := eval[[]string](t, ctx, `Array.from(document.querySelectorAll(".field-error"), e => e.textContent.trim())`)
	if fmt.Sprint(fieldErrs) != "[Choose a shipping method.]" {
		t.Errorf("got field errors %q, want only [Choose a shipping method.]", fieldErrs)
	}
	saveScreenshot(t, ctx, "checkout-shipping-error.png")
	if got := s.session(key, cs.ID); got.Status != payments.SessionOpen {
		t.Errorf("after the field error got session %s, want open", got.Status)
	}
	if pays := s.testPayments(key); len(pays) != 0 {
		t.Errorf("after the field error got payments %+v, want none", pays)
	}
	if got := eval[string](t, ctx, `document.getElementById("ship_country").value`); got != "CA" {
		t.Errorf("after the field error got country %q, want CA kept", got)
	}

	fillCard(t, ctx, card{number: cardSuccess, cvc: "123"})
	do(t, ctx, "choose Express and pay",
		chromedp.Click(chromedp.CSS(`input[name="shipping_option"][value="1"]`)),
		chromedp.Click(chromedp.ID("pay")),
	)
	waitLocation(t, ctx, sh.successOf(cs.ID))

	got := s.session(key, cs.ID)
	if got.Status != payments.SessionComplete || got.AmountTotal != 3500 || got.AmountSubtotal != 2000 {
		t.Errorf("got session %s, amount_subtotal %d, amount_total %d; want complete, 2000, 3500 (with Express)",
			got.Status, got.AmountSubtotal, got.AmountTotal)
	}
	wantShip := payments.Address{Name: "Ada Lovelace", Line1: "1 Main St", City: "Toronto", PostalCode: "M5V 2T6", Country: "CA"}
	wantOpt := payments.ShippingOption{Label: "Express", Amount: 1500}
	if got.ShippingDetails == nil || got.ShippingDetails.Address != wantShip || got.ShippingDetails.Option != wantOpt {
		t.Errorf("got shipping_details %+v, want address %+v and option %+v", got.ShippingDetails, wantShip, wantOpt)
	}
	wantBill := payments.Address{Name: "Ada Lovelace", Line1: "2 Side Ave", City: "Boston", PostalCode: "02110", Country: "US"}
	if got.BillingDetails == nil || *got.BillingDetails != wantBill {
		t.Errorf("got billing_details %+v, want %+v", got.BillingDetails, wantBill)
	}
	if pays := s.testPayments(key); len(pays) != 1 || pays[0].AmountReceived != 3500 {
		t.Errorf("got payments %+v, want one with 3500 received", pays)
	}
}

// ---- 4. the cancel link ----

func TestBrowserCheckoutCancel(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	ctx := testenv.BrowserStep(t, browser)
	key := s.testKey()
	cs := s.createSession(key, map[string]any{
		"line_items":  []map[string]any{{"amount": 800, "currency": "usd", "name": "Socks", "quantity": 3}},
		"success_url": sh.successURL(), "cancel_url": sh.cancelURL(),
	})
	do(t, ctx, "open the checkout page and cancel", chromedp.Navigate(*cs.URL), chromedp.Click(chromedp.ID("cancel")))
	waitLocation(t, ctx, sh.url+"/cancel?from=checkout")
	if got := text(t, ctx, "#page"); got != "/cancel" {
		t.Errorf("got shop page %q, want /cancel", got)
	}
	if got := s.session(key, cs.ID); got.Status != payments.SessionOpen {
		t.Errorf("after cancel got session %s, want open", got.Status)
	}
}

// ---- 5. closed sessions ----

func TestBrowserCheckoutClosed(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	short := newStack(t, time.Second)
	sh := newShop(t)
	browser := newBrowser(t)
	body := map[string]any{
		"line_items":  []map[string]any{{"amount": 1000, "currency": "usd", "name": "Book", "quantity": 1}},
		"success_url": sh.successURL(), "cancel_url": sh.cancelURL(),
	}
	tests := []struct {
		name     string
		open     func(t *testing.T) string // returns the url of a closed session
		wantText string
	}{
		{"paid", func(t *testing.T) string {
			key := s.testKey()
			cs := s.createSession(key, body)
			payByForm(t, *cs.URL, sh.successOf(cs.ID))
			if got := s.session(key, cs.ID); got.Status != payments.SessionComplete {
				t.Fatalf("got session %s after paying, want complete", got.Status)
			}
			return *cs.URL
		}, "already been paid"},
		{"expired", func(t *testing.T) string {
			cs := short.createSession(short.testKey(), body)
			time.Sleep(1200 * time.Millisecond)
			return *cs.URL
		}, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := tt.open(t)
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusGone {
				t.Errorf("GET %s: got %d, want 410", u, resp.StatusCode)
			}
			ctx := testenv.BrowserStep(t, browser)
			do(t, ctx, "open the closed session", chromedp.Navigate(u))
			if got := text(t, ctx, "#message"); !strings.Contains(got, tt.wantText) {
				t.Errorf("got message %q, want it to contain %q", got, tt.wantText)
			}
			if n := eval[int](t, ctx, `document.querySelectorAll("form, #card_number, #pay").length`); n != 0 {
				t.Errorf("got %d form elements on a closed session's page, want none", n)
			}
		})
	}
}

// payByForm pays a session by posting the hosted form as a browser would,
// and checks the redirect to the shop.
func payByForm(t *testing.T, sessionURL, wantLocation string) {
	t.Helper()
	c := validCard("4242424242424242")
	form := url.Values{"email": {c.email}, "name": {c.name}, "card_number": {c.number},
		"exp_month": {c.expMonth}, "exp_year": {c.expYear}, "cvc": {c.cvc}}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.PostForm(sessionURL, form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != wantLocation {
		t.Fatalf("POST %s: got %d to %q, want 303 to %q", sessionURL, resp.StatusCode, resp.Header.Get("Location"), wantLocation)
	}
}

// ---- 6. embedded payments through the JS client ----

func TestBrowserEmbeddedPayment(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	browser := newBrowser(t)
	key := s.testKey()
	tests := []struct {
		name, card, wantStatus, wantPayment string
		wantDecline                         *string
		wantReceived                        int64
	}{
		{"default test card", "", "succeeded", payments.IntentSucceeded, nil, 2500},
		{"insufficient funds", cardInsufficient, "insufficient_funds", payments.IntentRequiresPaymentMethod, ptr("insufficient_funds"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testenv.BrowserStep(t, browser)
			var pi struct {
				ClientSecret    string `json:"client_secret"`
				PaymentIntentID string `json:"payment_intent_id"`
				PublishableKey  string `json:"publishable_key"`
			}
			s.api("POST", "/v1/payment-intents", key, map[string]any{"amount": 2500, "currency": "usd"}, &pi)
			frag := url.Values{"publishable_key": {pi.PublishableKey}, "client_secret": {pi.ClientSecret}}.Encode()
			// about:blank first: a new fragment on the same page would not reload it.
			do(t, ctx, "open the example page",
				chromedp.Navigate("about:blank"),
				chromedp.Navigate(s.url+"/sandbox/example#"+frag),
				chromedp.WaitVisible(chromedp.ID("pay")),
			)
			filled := eval[[]string](t, ctx, `["publishable_key","client_secret","card_number"].map(id => document.getElementById(id).value)`)
			if want := []string{pi.PublishableKey, pi.ClientSecret, "4242 4242 4242 4242"}; fmt.Sprint(filled) != fmt.Sprint(want) {
				t.Errorf("got fields %q from the fragment, want %q", filled, want)
			}
			if tt.card != "" {
				// Not SetValue(…, ""): chromedp v0.23 drops an empty string
				// argument (omitempty), so the field would read "undefined".
				eval[chromedp.Void](t, ctx, `document.getElementById("card_number").value = "", undefined`)
				do(t, ctx, "type the card", chromedp.SendKeys(chromedp.ID("card_number"), tt.card))
			}
			do(t, ctx, "click pay", chromedp.Click(chromedp.ID("pay")))
			status, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("result").dataset.status`,
				chromedp.WithPollingTimeout(testenv.StepTimeout), chromedp.WithPollingInterval(50*time.Millisecond)))
			if err != nil {
				t.Fatalf("wait for #result data-status: %v (result text %q)", err, eval[string](t, ctx, `document.getElementById("result").textContent`))
			}
			if status != tt.wantStatus {
				t.Errorf("got data-status %q, want %q", status, tt.wantStatus)
			}
			var found *paymentView
			for _, p := range s.testPayments(key) {
				if p.ID == pi.PaymentIntentID {
					found = &p
				}
			}
			switch {
			case found == nil:
				t.Errorf("payment %s not in GET /v1/test-payments", pi.PaymentIntentID)
			case found.Status != tt.wantPayment || found.AmountReceived != tt.wantReceived || fmt.Sprint(deref(found.LastDecline)) != fmt.Sprint(deref(tt.wantDecline)):
				t.Errorf("got payment status %s, received %d, last_decline_code %v; want %s, %d, %v",
					found.Status, found.AmountReceived, deref(found.LastDecline), tt.wantPayment, tt.wantReceived, deref(tt.wantDecline))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// ---- 7. accessibility basics and no outside assets ----

func TestBrowserPagesAccessible(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	key := s.testKey()
	full := s.createSession(key, map[string]any{
		"line_items":                 []map[string]any{{"amount": 2000, "currency": "usd", "name": "Lamp", "quantity": 1}},
		"success_url":                sh.successURL(),
		"cancel_url":                 sh.cancelURL(),
		"collect_shipping_address":   true,
		"shipping_countries":         []string{"US", "CA"},
		"shipping_options":           []map[string]any{{"label": "Standard", "amount": 500}, {"label": "Express", "amount": 1500}},
		"billing_address_collection": "required",
		"pass_fees_to_customer":      true,
	})
	paid := s.createSession(key, map[string]any{
		"line_items":  []map[string]any{{"amount": 2000, "currency": "usd", "name": "Lamp", "quantity": 1}},
		"success_url": sh.successURL(), "cancel_url": sh.cancelURL(),
	})
	payByForm(t, *paid.URL, sh.successOf(paid.ID))

	tests := []struct {
		name, url  string
		wantInputs int // visible inputs and selects, to show the check saw the form
	}{
		{"checkout with shipping and billing", *full.URL, 17},
		{"paid session message", *paid.URL, 0},
		{"embedded example", s.url + "/sandbox/example", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testenv.BrowserStep(t, browser)
			do(t, ctx, "open the page", chromedp.Navigate(tt.url), chromedp.WaitVisible(chromedp.CSS("h1")))
			if got := eval[string](t, ctx, `document.documentElement.lang`); got != "en" {
				t.Errorf("got lang %q, want en", got)
			}
			if got := eval[string](t, ctx, `document.title.trim()`); got == "" {
				t.Errorf("got an empty <title>, want one")
			}
			// Every visible form control has a label (el.labels: a <label for>
			// or a wrapping <label>, as the radio buttons use) with text.
			type labelCheck struct {
				Inputs    int      `json:"inputs"`
				Unlabeled []string `json:"unlabeled"`
			}
			res := eval[labelCheck](t, ctx, `(() => {
				const out = {inputs: 0, unlabeled: []};
				for (const el of document.querySelectorAll("input, select, textarea")) {
					if (el.type === "hidden" || el.getClientRects().length === 0) continue;
					out.inputs++;
					const labels = Array.from(el.labels || []).filter(l => l.textContent.trim() !== "");
					const forLabel = el.id && Array.from(document.querySelectorAll("label[for]")).some(l => l.htmlFor === el.id && l.textContent.trim() !== "");
					if (labels.length === 0 || (el.type !== "radio" && !forLabel)) out.unlabeled.push(el.outerHTML);
				}
				return out;
			})()`)
			if res.Inputs != tt.wantInputs {
				t.Errorf("got %d visible inputs, want %d", res.Inputs, tt.wantInputs)
			}
			if len(res.Unlabeled) > 0 {
				t.Errorf("got inputs without a non-empty <label for>: %q", res.Unlabeled)
			}
			// Nothing is referenced or loaded from another origin.
			foreign := eval[[]string](t, ctx, `(() => {
				const urls = [];
				for (const el of document.querySelectorAll("script[src], link[href], img[src], iframe[src], source[src], video[src], audio[src], object[data], embed[src]")) {
					urls.push(el.src || el.href || el.data);
				}
				for (const e of performance.getEntriesByType("resource")) urls.push(e.name);
				return urls.filter(u => new URL(u, location.href).origin !== location.origin);
			})()`)
			if len(foreign) > 0 {
				t.Errorf("got assets from other origins %q, want none", foreign)
			}
		})
	}
}

// ---- the screenshot ----

// saveScreenshot takes a full-page PNG of the current page into a temp dir
// and, when SCREENSHOT_DIR is set, copies it there.
func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("SCREENSHOT_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot saved to %s", filepath.Join(dir, name))
	}
}
