package hosted_test

// The customer portal's links and forms over plain HTTP: what a tampered,
// foreign, unknown or expired token shows (no data, never a 500), and the
// forms' CSRF token. The browser tests (portal_browser_test.go) drive the
// page itself.

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// portalFixture is a subscription of a new customer of a new merchant,
// paid with a saved Visa ending 4242, and a portal session for it.
type portalFixture struct {
	key       string
	sc        payments.Scope
	sub       payments.Subscription
	url       string // the portal page
	returnURL string
}

// portal stores a monthly subscription (Pro plan, USD 15.00 × 2) in status
// with a saved card, as a paid subscription checkout leaves it, and
// creates its portal session through the API.
func (s *stack) portal(status, returnURL string) portalFixture {
	s.t.Helper()
	ctx := context.Background()
	mid, key := s.merchantKey()
	sc := payments.Scope{MerchantID: mid}
	email := "ada@example.com"
	cus, err := s.svc.CreateCustomer(ctx, sc, payments.CustomerInput{Email: &email})
	if err != nil {
		s.t.Fatal(err)
	}
	cardID := payments.NewID("card_")
	const q = `INSERT INTO sandbox_cards (merchant_id, livemode, id, customer_id, brand, last4, exp_month, exp_year, behavior)
	VALUES ($1, false, $2, $3, 'visa', '4242', 12, 2030, 'succeeds')`
	if _, err := s.db.ExecContext(ctx, q, mid, cardID, cus.ID); err != nil {
		s.t.Fatal(err)
	}
	iv, err := payments.ProductInterval(payments.Monthly)
	if err != nil {
		s.t.Fatal(err)
	}
	start := s.svc.Now(ctx, sc).UTC().Truncate(time.Second)
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: status, Currency: "usd", Anchor: start,
		CurrentPeriodStart: start, CurrentPeriodEnd: payments.PeriodEnd(start, iv, 1), CardID: &cardID, Created: start,
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Pro plan", Quantity: 2,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
	}
	if status == payments.SubTrialing {
		end := sub.CurrentPeriodEnd
		sub.TrialEnd = &end
	}
	if err := s.store.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
		s.t.Fatal(err)
	}
	var ps struct{ URL string }
	s.api("POST", "/v1/subscriptions/"+sub.ID+"/portal-session", key, map[string]any{"return_url": returnURL}, &ps)
	return portalFixture{key: key, sc: sc, sub: sub, url: ps.URL, returnURL: returnURL}
}

// subscription reads the fixture's subscription back.
func (s *stack) subscription(f portalFixture) payments.Subscription {
	s.t.Helper()
	sub, err := s.svc.Subscription(context.Background(), f.sc, f.sub.ID)
	if err != nil {
		s.t.Fatal(err)
	}
	return sub
}

// page is an answer of a hosted page.
type page struct {
	status int
	header http.Header
	body   string
}

// fetch sends a request with client (which keeps cookies) without
// following redirects.
func fetch(t *testing.T, client *http.Client, method, rawURL string, form url.Values) page {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func newClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// assertNoData fails when the page shows anything of the fixture.
func assertNoData(t *testing.T, p page, f portalFixture) {
	t.Helper()
	for _, secret := range []string{f.sub.ID, f.sub.CustomerID, "Pro plan", "4242", "30.00", "Browser test shop", f.returnURL, "form_token"} {
		if strings.Contains(p.body, secret) {
			t.Errorf("page shows %q: %s", secret, p.body)
		}
	}
}

// formToken is the form token in a portal page.
func formToken(t *testing.T, body string) string {
	t.Helper()
	const marker = `name="form_token" value="`
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("no form token in the page: %s", body)
	}
	rest := body[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}

// TestPortalLinks: a genuine link shows its subscription; a tampered,
// truncated, swapped, unknown or foreign (signed under another key) token
// shows a 404 page with no data, an expired one (on its merchant's clock,
// not another's) a 410 page with none.
func TestPortalLinks(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	f := s.portal(payments.SubActive, "https://shop.example/account")
	other := s.portal(payments.SubActive, "https://other.example/account")
	client := newClient(t)

	p := fetch(t, client, "GET", f.url, nil)
	if p.status != http.StatusOK {
		t.Fatalf("genuine link: got %d %s, want 200", p.status, p.body)
	}
	for _, want := range []string{"Pro plan × 2", "USD 30.00 every month", "Visa •••• 4242", "Active", "https://shop.example/account"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("genuine link: page lacks %q", want)
		}
	}
	if got := p.header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") || !strings.Contains(got, "frame-ancestors 'none'") {
		t.Errorf("got CSP %q, want the hosted pages' policy", got)
	}
	if got := p.header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("got Cache-Control %q, want no-store", got)
	}
	if got := p.header.Get("Set-Cookie"); !strings.Contains(got, "portal_nonce=") || !strings.Contains(got, "HttpOnly") || !strings.Contains(got, "SameSite=Strict") {
		t.Errorf("got Set-Cookie %q, want an HttpOnly SameSite=Strict portal_nonce", got)
	}

	base, token, _ := strings.Cut(f.url, "/portal/")
	id, sig, _ := strings.Cut(token, ".")
	_, otherToken, _ := strings.Cut(other.url, "/portal/")
	otherID, otherSig, _ := strings.Cut(otherToken, ".")
	// flip changes the signature's i-th character to its neighbour in the
	// base64url alphabet (the lowest of its six bits).
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	flip := func(s string, i int) string {
		b := []byte(s)
		b[i] = alphabet[strings.IndexByte(alphabet, b[i])^1]
		return string(b)
	}
	foreign := newStackKey(t, 0, []byte("another deployment's portal key!"))
	ff := foreign.portal(payments.SubActive, "https://shop.example/account")
	_, foreignToken, _ := strings.Cut(ff.url, "/portal/")

	for _, tt := range []struct{ name, token string }{
		{"signature changed", id + "." + flip(sig, 10)},
		// 32 bytes take 43 characters, whose last carries 2 spare bits:
		// the same signature spelled otherwise is refused too.
		{"signature's spare bits changed", id + "." + flip(sig, len(sig)-1)},
		{"signature truncated", id + "." + sig[:len(sig)-2]},
		{"no signature", id},
		{"empty signature", id + "."},
		{"signature not base64", id + ".!!!!"},
		{"another session's id with this signature", otherID + "." + sig},
		{"this id with another session's signature", id + "." + otherSig},
		{"unknown id", "bps_" + strings.Repeat("x", 24) + "." + sig},
		{"not a portal id", "cs_123." + sig},
		{"signed under another key", foreignToken},
		{"garbage", "%F0%9F%92%A9"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := fetch(t, client, "GET", base+"/portal/"+tt.token, nil)
			if p.status != http.StatusNotFound {
				t.Errorf("got %d, want 404", p.status)
			}
			assertNoData(t, p, f)
			assertNoData(t, p, ff)
			p = fetch(t, client, "POST", base+"/portal/"+tt.token+"/cancel", url.Values{"form_token": {"x"}})
			if p.status != http.StatusNotFound {
				t.Errorf("cancel: got %d, want 404", p.status)
			}
		})
	}
	// The foreign deployment's link works on its own server.
	if p := fetch(t, client, "GET", ff.url, nil); p.status != http.StatusOK {
		t.Errorf("foreign link on its own server: got %d, want 200", p.status)
	}

	// Expiry is judged on the session's merchant's clock: moving another
	// merchant's clock past it changes nothing; moving its own does.
	ctx := context.Background()
	if _, err := s.svc.AdvanceClock(ctx, other.sc, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if p := fetch(t, client, "GET", f.url, nil); p.status != http.StatusOK {
		t.Errorf("after another merchant's clock moved: got %d, want 200", p.status)
	}
	if p := fetch(t, client, "GET", other.url, nil); p.status != http.StatusGone {
		t.Errorf("its merchant's clock 2h ahead (TTL 1h): got %d, want 410", p.status)
	} else {
		assertNoData(t, p, other)
	}
	if _, err := s.svc.AdvanceClock(ctx, f.sc, time.Hour-time.Minute); err != nil {
		t.Fatal(err)
	}
	if p := fetch(t, client, "GET", f.url, nil); p.status != http.StatusOK {
		t.Errorf("a minute before expiry: got %d, want 200", p.status)
	}
	if _, err := s.svc.AdvanceClock(ctx, f.sc, time.Minute); err != nil {
		t.Fatal(err)
	}
	p = fetch(t, client, "GET", f.url, nil)
	if p.status != http.StatusGone {
		t.Errorf("at expiry: got %d, want 410", p.status)
	}
	assertNoData(t, p, f)
	if p := fetch(t, client, "POST", f.url+"/cancel", url.Values{"form_token": {"x"}}); p.status != http.StatusGone {
		t.Errorf("cancel at expiry: got %d, want 410", p.status)
	}
	if got := s.subscription(f); got.CancelAtPeriodEnd {
		t.Errorf("an expired link canceled the subscription")
	}
}

// TestPortalCancelForm: the cancel form needs the page's form token and
// the cookie it is bound to; with both it schedules the cancellation
// through the API's domain method (customer.subscription.updated) and
// redirects to the page, which then offers no cancel form.
func TestPortalCancelForm(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	f := s.portal(payments.SubActive, "https://shop.example/account")
	client := newClient(t)
	tok := formToken(t, fetch(t, client, "GET", f.url, nil).body)

	stranger := newClient(t) // another browser: the URL but not the cookie
	strangerTok := formToken(t, fetch(t, stranger, "GET", f.url, nil).body)
	for _, tt := range []struct {
		name   string
		client *http.Client
		form   url.Values
	}{
		{"no form token", client, url.Values{}},
		{"wrong form token", client, url.Values{"form_token": {strangerTok}}},
		{"no cookie", &http.Client{CheckRedirect: client.CheckRedirect}, url.Values{"form_token": {tok}}},
		{"another browser's cookie", stranger, url.Values{"form_token": {tok}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := fetch(t, tt.client, "POST", f.url+"/cancel", tt.form)
			if p.status != http.StatusForbidden {
				t.Errorf("got %d, want 403", p.status)
			}
			if got := s.subscription(f); got.CancelAtPeriodEnd {
				t.Fatalf("the subscription was canceled")
			}
		})
	}

	p := fetch(t, client, "POST", f.url+"/cancel", url.Values{"form_token": {tok}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != strings.TrimPrefix(f.url, s.url)+"?done=canceled" {
		t.Fatalf("cancel: got %d to %q, want 303 to the page", p.status, p.header.Get("Location"))
	}
	got := s.subscription(f)
	if !got.CancelAtPeriodEnd || got.Status != payments.SubActive || got.CanceledAt != nil {
		t.Errorf("got %s cancel_at_period_end %v canceled_at %v, want active, scheduled, not yet canceled", got.Status, got.CancelAtPeriodEnd, got.CanceledAt)
	}
	var evs struct {
		Data []struct {
			Data struct {
				ID                string `json:"id"`
				CancelAtPeriodEnd bool   `json:"cancel_at_period_end"`
			} `json:"data"`
		} `json:"data"`
	}
	s.api("GET", "/v1/events?type=customer.subscription.updated", f.key, nil, &evs)
	if len(evs.Data) != 1 || evs.Data[0].Data.ID != f.sub.ID || !evs.Data[0].Data.CancelAtPeriodEnd {
		t.Errorf("got events %+v, want one customer.subscription.updated of %s with cancel_at_period_end", evs.Data, f.sub.ID)
	}
	p = fetch(t, client, "GET", f.url+"?done=canceled", nil)
	if !strings.Contains(p.body, "canceled at the end of the current period") || strings.Contains(p.body, `id="cancel-subscription"`) {
		t.Errorf("after canceling, the page should say so and offer no cancel form: %s", p.body)
	}
	// Posting again (a stale page) changes nothing and records no event.
	if p := fetch(t, client, "POST", f.url+"/cancel", url.Values{"form_token": {tok}}); p.status != http.StatusSeeOther {
		t.Errorf("cancel again: got %d, want 303", p.status)
	}
	s.api("GET", "/v1/events?type=customer.subscription.updated", f.key, nil, &evs)
	if len(evs.Data) != 1 {
		t.Errorf("got %d events after canceling twice, want 1", len(evs.Data))
	}
}

// TestPortalCardRetriesPastDue: a subscription whose trial ended on a
// card that declines (4000…0341) is past_due; a card that works, entered
// in the portal, pays the open charge at once and makes it active again.
func TestPortalCardRetriesPastDue(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	ctx := context.Background()
	mid, key := s.merchantKey()
	sc := payments.Scope{MerchantID: mid}
	var prod struct {
		Price struct{ ID string } `json:"price"`
	}
	s.api("POST", "/v1/subscription-products", key, map[string]any{
		"name": "Pro plan", "amount": 4900, "currency": "usd", "interval": "monthly", "trial_period_days": 3,
	}, &prod)
	cs := s.createSubSession(key, map[string]any{"price_id": prod.Price.ID,
		"success_url": "https://shop.example/ok", "cancel_url": "https://shop.example/cancel"})
	client := newClient(t)
	year := strconv.Itoa(time.Now().Year() + 1)
	p := fetch(t, client, "POST", *cs.URL, url.Values{"email": {"ada@example.com"}, "name": {"Ada Lovelace"},
		"card_number": {"4000000000000341"}, "exp_month": {"12"}, "exp_year": {year}, "cvc": {"123"}})
	if p.status != http.StatusSeeOther {
		t.Fatalf("start the trial: got %d, want 303", p.status)
	}
	subID := s.subscriptionOf(key, cs.ID).ID
	if _, err := s.svc.AdvanceClock(ctx, sc, 4*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, err := s.svc.Subscription(ctx, sc, subID); err != nil || got.Status != payments.SubPastDue {
		t.Fatalf("after the trial on a declining card got %s (%v), want past_due", got.Status, err)
	}

	var ps struct{ URL string }
	s.api("POST", "/v1/subscriptions/"+subID+"/portal-session", key, map[string]any{"return_url": "https://shop.example/account"}, &ps)
	page := fetch(t, client, "GET", ps.URL, nil)
	if !strings.Contains(page.body, "Past due") {
		t.Errorf("the page does not say past due: %s", page.body)
	}
	// Its period ended unpaid: canceling ends it now, not at a past date.
	if !strings.Contains(page.body, "has not been paid, so it ends at once") || !strings.Contains(page.body, "Cancel now") ||
		strings.Contains(page.body, "stays active until") {
		t.Errorf("the overdue subscription's cancel box: %s", page.body)
	}
	p = fetch(t, client, "POST", ps.URL+"/card", url.Values{"form_token": {formToken(t, page.body)},
		"card_number": {"4242424242424242"}, "exp_month": {"12"}, "exp_year": {year}, "cvc": {"123"}})
	if p.status != http.StatusSeeOther || !strings.HasSuffix(p.header.Get("Location"), "?done=retried") {
		t.Fatalf("update the card: got %d to %q, want 303 to ?done=retried", p.status, p.header.Get("Location"))
	}
	got, err := s.svc.Subscription(ctx, sc, subID)
	if err != nil || got.Status != payments.SubActive {
		t.Errorf("after the new card got %s (%v), want active", got.Status, err)
	}
	pays := s.testPayments(key)
	if len(pays) != 1 || pays[0].Status != payments.IntentSucceeded || pays[0].AmountReceived != 4900 {
		t.Errorf("got payments %+v, want the open charge paid once (4900)", pays)
	}
}

// TestFormsNeverEchoCardNumbers: a card number typed into another field of
// the checkout or the portal's card form is not rendered back with the
// form's errors (the number and CVC fields never are).
func TestFormsNeverEchoCardNumbers(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	_, key := s.merchantKey()
	var prod struct {
		Price struct{ ID string } `json:"price"`
	}
	s.api("POST", "/v1/subscription-products", key, map[string]any{
		"name": "Pro plan", "amount": 4900, "currency": "usd", "interval": "monthly",
	}, &prod)
	cs := s.createSubSession(key, map[string]any{"price_id": prod.Price.ID,
		"success_url": "https://shop.example/ok", "cancel_url": "https://shop.example/cancel"})
	client := newClient(t)
	year := strconv.Itoa(time.Now().Year() + 1)
	const pan, spaced = "4242424242424242", "4242 4242-4242 4242"
	valid := url.Values{"email": {"ada@example.com"}, "name": {"Ada Lovelace"}, "card_number": {"4242"},
		"exp_month": {"12"}, "exp_year": {year}, "cvc": {"123"}}
	for _, field := range []string{"email", "name", "exp_month", "exp_year"} {
		for _, typed := range []string{pan, spaced, pan + "@example.com"} {
			form := url.Values{}
			for k, v := range valid {
				form[k] = v
			}
			form.Set(field, typed)
			p := fetch(t, client, "POST", *cs.URL, form)
			if p.status != http.StatusBadRequest {
				t.Errorf("%s=%q: got %d, want 400", field, typed, p.status)
			}
			if strings.Contains(p.body, typed) || strings.Contains(p.body, pan) {
				t.Errorf("%s=%q: the page echoes the card number", field, typed)
			}
			if field == "name" && !strings.Contains(fetch(t, client, "POST", *cs.URL, url.Values{"name": {"Ada Lovelace"}}).body, "Ada Lovelace") {
				t.Errorf("a name without a card number is no longer echoed")
			}
		}
	}

	valid.Set("card_number", pan)
	if p := fetch(t, client, "POST", *cs.URL, valid); p.status != http.StatusSeeOther {
		t.Fatalf("subscribe: got %d, want 303", p.status)
	}
	var ps struct{ URL string }
	s.api("POST", "/v1/subscriptions/"+s.subscriptionOf(key, cs.ID).ID+"/portal-session", key,
		map[string]any{"return_url": "https://shop.example/account"}, &ps)
	page := fetch(t, client, "GET", ps.URL, nil)
	for _, field := range []string{"exp_month", "exp_year"} {
		form := url.Values{"form_token": {formToken(t, page.body)}, "card_number": {"4242"}, "exp_month": {"12"}, "exp_year": {year}, "cvc": {"123"}}
		form.Set(field, spaced)
		p := fetch(t, client, "POST", ps.URL+"/card", form)
		if p.status != http.StatusBadRequest || strings.Contains(p.body, spaced) {
			t.Errorf("portal card form, %s holding a card number: got %d, echoed %v; want 400, not echoed", field, p.status, strings.Contains(p.body, spaced))
		}
	}
}
