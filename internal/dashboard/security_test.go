package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"paysvc/internal/clientaddr"
	"paysvc/internal/dashboard"
	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// Every page of the dashboard, signed in, answers 200 with the CSP; an
// unknown path answers the HTML 404 page.
func TestPagesRender(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	pi := s.pay(m, 5000, sandbox.CardSuccess)
	c := s.client()
	c.mustSignIn(email)
	if a := c.do("GET", "/dashboard/test/payments/"+pi, nil); a.status != http.StatusOK {
		t.Errorf("GET the test payment: got %d, want 200", a.status)
	}
	if a := c.do("GET", "/dashboard/payments/"+pi, nil); a.status != http.StatusNotFound {
		t.Errorf("GET the test payment in live mode: got %d, want 404", a.status)
	}
	for _, path := range []string{"", "/payments", "/subscriptions", "/webhooks", "/settings", "/refunds", "/disputes", "/customers", "/products", "/events", "/apikeys"} {
		for _, base := range []string{"/dashboard", "/dashboard/test"} {
			a := c.do("GET", base+path, nil)
			if a.status != http.StatusOK {
				t.Errorf("GET %s%s: got %d, want 200: %.300s", base, path, a.status, a.body)
			}
			if !strings.Contains(a.header.Get("Content-Security-Policy"), "default-src 'none'") {
				t.Errorf("GET %s%s: got CSP %q, want default-src 'none'", base, path, a.header.Get("Content-Security-Policy"))
			}
		}
	}
	a := c.do("GET", "/dashboard/test/payments", nil)
	if !strings.Contains(a.body, pi) || !strings.Contains(a.body, "$50.00") {
		t.Errorf("test payments page: want %s at $50.00 listed", pi)
	}
	if !strings.Contains(a.body, `id="test-banner"`) {
		t.Error("test payments page: want the test-mode banner")
	}
	if live := c.do("GET", "/dashboard/payments", nil); strings.Contains(live.body, pi) || strings.Contains(live.body, `id="test-banner"`) {
		t.Error("live payments page: got the test payment or the test banner, want neither")
	}
	if a := c.do("GET", "/dashboard/test/events?type=payment_intent.*", nil); a.status != http.StatusOK || !strings.Contains(a.body, "payment_intent.succeeded") {
		t.Errorf("events filtered by payment_intent.*: got %d, want the payment's event", a.status)
	}
	if a := c.do("GET", "/dashboard/test/events?type=charge.*", nil); strings.Contains(a.body, "<code>payment_intent.succeeded</code>") {
		t.Error("events filtered by charge.*: got the payment's event")
	}
	if a := c.do("GET", "/dashboard/test/events?type=nope", nil); a.status != http.StatusBadRequest || !strings.Contains(a.body, "validation_error") {
		t.Errorf("events filtered by an unknown type: got %d, want 400 validation_error", a.status)
	}
	if a := c.do("GET", "/dashboard/test/settings", nil); !strings.Contains(a.body, `id="account"`) || !strings.Contains(a.body, "acct_") {
		t.Errorf("settings: want the connected account (acct_…) shown: %.300s", a.body)
	}
	// Times in the viewer's zone: the page's script keeps it in dash_tz.
	c.c.Jar.SetCookies(mustURL(s.url+"/dashboard"), []*http.Cookie{{Name: "dash_tz", Value: "Asia/Tokyo", Path: "/dashboard"}})
	if a := c.do("GET", "/dashboard/test/payments/"+pi, nil); !strings.Contains(a.body, " JST</time>") {
		t.Error("with dash_tz=Asia/Tokyo: want times rendered in JST")
	}
	c.c.Jar.SetCookies(mustURL(s.url+"/dashboard"), []*http.Cookie{{Name: "dash_tz", Value: "Not/AZone", Path: "/dashboard"}})
	if a := c.do("GET", "/dashboard/test/payments/"+pi, nil); a.status != http.StatusOK || !strings.Contains(a.body, " UTC</time>") {
		t.Errorf("with an unknown zone: got %d, want times in UTC", a.status)
	}
	if a := c.do("GET", "/dashboard/test/", nil); a.status != http.StatusMovedPermanently || a.header.Get("Location") != "/dashboard/test" {
		t.Errorf("GET /dashboard/test/: got %d to %q, want 301 to /dashboard/test", a.status, a.header.Get("Location"))
	}
	for _, path := range []string{"/dashboard/nope", "/dashboard/test/payments/pi_unknown", "/dashboard/test/payments/%00", "/dashboard/test/refunds/x/y"} {
		a := c.do("GET", path, nil)
		if a.status != http.StatusNotFound || !strings.Contains(a.header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: got %d %s, want the 404 page", path, a.status, a.header.Get("Content-Type"))
		}
	}
}

// A signed-out browser is sent to the sign-in page, and back after it.
func TestSignInRedirects(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	_, email := s.merchant(payments.RoleAdmin)
	c := s.client()
	a := c.do("GET", "/dashboard/test/payments", nil)
	if a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "/dashboard/login?next=") {
		t.Fatalf("signed out: got %d to %q, want 303 to the sign-in page", a.status, a.header.Get("Location"))
	}
	tok := c.csrf("/dashboard/login")
	a = c.do("POST", "/dashboard/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {tok}, "next": {"/dashboard/test/payments"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != "/dashboard/test/payments" {
		t.Errorf("sign in: got %d to %q, want 303 to /dashboard/test/payments", a.status, a.header.Get("Location"))
	}
	for _, cookie := range strings.Split(strings.Join(a.header.Values("Set-Cookie"), "\n"), "\n") {
		if strings.HasPrefix(cookie, "dash_session=") && (!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Lax") || !strings.Contains(cookie, "Max-Age=")) {
			t.Errorf("session cookie %q: want HttpOnly, SameSite=Lax and an expiry", cookie)
		}
	}
	// An open redirect is refused: next must be a dashboard path.
	c2 := s.client()
	tok = c2.csrf("/dashboard/login")
	a = c2.do("POST", "/dashboard/login", url.Values{"email": {email}, "password": {password}, "csrf_token": {tok}, "next": {"//evil.example/x"}})
	if a.header.Get("Location") != "/dashboard" {
		t.Errorf("sign in with next=//evil.example: got Location %q, want /dashboard", a.header.Get("Location"))
	}
}

// One merchant's user never sees another merchant's data, even by typing
// its ids into the URL, and cannot revoke its keys.
func TestMerchantIsolation(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	mA, emailA := s.merchant(payments.RoleAdmin)
	mB, _ := s.merchant(payments.RoleAdmin)
	piB := s.pay(mB, 7000, sandbox.CardSuccess)
	keyB, err := s.svc.CreateKey(context.Background(), mB, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	cusB, err := s.svc.CreateCustomer(context.Background(), payments.Scope{MerchantID: mB}, payments.CustomerInput{Email: ptr("b@example.com")})
	if err != nil {
		t.Fatal(err)
	}
	_ = mA
	c := s.client()
	c.mustSignIn(emailA)
	for _, path := range []string{"/dashboard/test/payments/" + piB, "/dashboard/test/customers/" + cusB.ID} {
		if a := c.do("GET", path, nil); a.status != http.StatusNotFound || strings.Contains(a.body, "b@example.com") {
			t.Errorf("GET %s of another merchant: got %d, want 404", path, a.status)
		}
	}
	for _, path := range []string{"/dashboard/test/payments", "/dashboard/test", "/dashboard/test/customers", "/dashboard/test/apikeys", "/dashboard/test/events"} {
		if a := c.do("GET", path, nil); strings.Contains(a.body, piB) || strings.Contains(a.body, keyB.ID) || strings.Contains(a.body, cusB.ID) {
			t.Errorf("GET %s: shows another merchant's objects", path)
		}
	}
	tok := c.csrf("/dashboard/test/apikeys")
	if a := c.do("POST", "/dashboard/test/apikeys/"+keyB.ID+"/revoke", url.Values{"csrf_token": {tok}}); a.status != http.StatusNotFound {
		t.Errorf("revoke another merchant's key: got %d, want 404", a.status)
	}
	if st, _ := s.apiStatus("/v1/customers", keyB.Secret); st != http.StatusOK {
		t.Errorf("the other merchant's key after the attempt: got %d, want 200", st)
	}
	tok = c.csrf("/dashboard/test/apikeys")
	if a := c.do("POST", "/dashboard/test/payments/"+piB+"/refund", url.Values{"csrf_token": {tok}}); a.status != http.StatusNotFound {
		t.Errorf("refund another merchant's payment: got %d, want 404", a.status)
	}
}

func ptr[T any](v T) *T { return &v }

// A state-changing form without the session's CSRF token is refused and
// changes nothing.
func TestCSRF(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	c := s.client()
	c.mustSignIn(email)
	for name, tok := range map[string]string{"missing": "", "forged": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"} {
		form := url.Values{"mode": {"test"}}
		if tok != "" {
			form.Set("csrf_token", tok)
		}
		if a := c.do("POST", "/dashboard/test/apikeys", form); a.status != http.StatusForbidden {
			t.Errorf("%s token: got %d, want 403", name, a.status)
		}
	}
	if keys, _ := s.svc.Keys(context.Background(), m, false); len(keys) != 0 {
		t.Errorf("got %d keys after refused forms, want 0", len(keys))
	}
	// The sign-in form has its own token (no session yet).
	c2 := s.client()
	if a := c2.do("POST", "/dashboard/login", url.Values{"email": {email}, "password": {password}}); a.status != http.StatusForbidden {
		t.Errorf("sign-in without its token: got %d, want 403", a.status)
	}
}

// A viewer sees the pages but every change is a 403 page.
func TestViewerCannotChange(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleViewer)
	pi := s.pay(m, 5000, sandbox.CardSuccess)
	c := s.client()
	c.mustSignIn(email)
	page := c.do("GET", "/dashboard/test/apikeys", nil)
	if page.status != http.StatusOK || strings.Contains(page.body, `id="create-key"`) {
		t.Errorf("viewer's keys page: got %d, want 200 without the create form", page.status)
	}
	tok := c.csrf("/dashboard/test/apikeys")
	if a := c.do("POST", "/dashboard/test/apikeys", url.Values{"csrf_token": {tok}, "mode": {"test"}}); a.status != http.StatusForbidden || !strings.Contains(a.body, "viewer") {
		t.Errorf("viewer creates a key: got %d, want the 403 page", a.status)
	}
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", url.Values{"csrf_token": {tok}}); a.status != http.StatusForbidden {
		t.Errorf("viewer refunds: got %d, want 403", a.status)
	}
	if keys, _ := s.svc.Keys(context.Background(), m, false); len(keys) != 0 {
		t.Errorf("got %d keys, want 0", len(keys))
	}
	if p, _ := s.svc.Payment(context.Background(), payments.Scope{MerchantID: m}, pi); p.AmountRefundPending+p.AmountRefunded != 0 {
		t.Errorf("viewer's refund went through: %+v", p)
	}
	// Viewers still sign out.
	if a := c.do("POST", "/dashboard/logout", url.Values{"csrf_token": {tok}}); a.status != http.StatusSeeOther {
		t.Errorf("viewer signs out: got %d, want 303", a.status)
	}
}

// Sign-in attempts are limited per account and per address, with one
// answer for an unknown email and a wrong password.
func TestSignInRateLimit(t *testing.T) {
	s := newStack(t, dashboard.Options{AccountAttempts: 3, AddressAttempts: 6, AttemptWindow: time.Hour})
	// The other tests of this package sign in from the same address.
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := s.rdb.Keys(ctx, "*signin:address*").Result()
		for _, k := range keys {
			s.rdb.Del(ctx, k)
		}
	})
	_, email := s.merchant(payments.RoleAdmin)
	c := s.client()
	wrong := c.signIn(email, "wrong password!")
	unknown := c.signIn("nobody@example.com", "wrong password!")
	if wrong.status != http.StatusUnauthorized || unknown.status != http.StatusUnauthorized {
		t.Fatalf("got %d and %d, want 401 for both", wrong.status, unknown.status)
	}
	if !strings.Contains(wrong.body, "Incorrect email or password.") || !strings.Contains(unknown.body, "Incorrect email or password.") {
		t.Error("want the same message for a wrong password and an unknown email")
	}
	c.signIn(email, "wrong password!")
	c.signIn(email, "wrong password!")
	// The account's 3 attempts are spent: even the right password waits.
	if a := c.signIn(email, password); a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "Too many sign-in attempts") {
		t.Errorf("4th attempt on the account: got %d, want 429", a.status)
	}
	// The address has spent 5 of 6; one more on another account, then it
	// is refused whatever the account.
	if a := c.signIn("a@example.com", "x-wrong-pass"); a.status != http.StatusUnauthorized {
		t.Errorf("6th attempt from the address: got %d, want 401", a.status)
	}
	if a := c.signIn("b@example.com", "x-wrong-pass"); a.status != http.StatusTooManyRequests {
		t.Errorf("7th attempt from the address: got %d, want 429", a.status)
	}
}

// A session ends at its expiry and at sign-out; its cookie then opens
// nothing.
func TestSessionExpiryAndSignOut(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	_, email := s.merchant(payments.RoleAdmin)
	c := s.client()
	c.mustSignIn(email)
	if a := c.do("GET", "/dashboard/test", nil); a.status != http.StatusOK {
		t.Fatalf("signed in: got %d", a.status)
	}
	if _, err := s.db.Exec(`UPDATE dashboard_sessions SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if a := c.do("GET", "/dashboard/test", nil); a.status != http.StatusSeeOther {
		t.Errorf("expired session: got %d, want 303 to sign in", a.status)
	}
	c.mustSignIn(email)
	tok := c.csrf("/dashboard/test")
	jar := c.c.Jar.Cookies(mustURL(s.url + "/dashboard"))
	if a := c.do("POST", "/dashboard/logout", url.Values{"csrf_token": {tok}}); a.status != http.StatusSeeOther {
		t.Fatalf("sign out: got %d", a.status)
	}
	// The old cookie, replayed, is dead.
	c2 := s.client()
	c2.c.Jar.SetCookies(mustURL(s.url+"/dashboard"), jar)
	if a := c2.do("GET", "/dashboard/test", nil); a.status != http.StatusSeeOther {
		t.Errorf("replayed cookie after sign-out: got %d, want 303 to sign in", a.status)
	}
	var n int
	const q = `SELECT count(*) FROM dashboard_sessions s JOIN dashboard_users u ON u.id = s.user_id WHERE u.email = $1`
	if err := s.db.Get(&n, q, email); err != nil || n != 0 {
		t.Errorf("got %d sessions stored after sign-out (%v), want 0", n, err)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// forwardedFor is a proxy's hop: it names the client in X-Forwarded-For.
type forwardedFor string

func (f forwardedFor) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", string(f))
	return http.DefaultTransport.RoundTrip(r)
}

// Behind a trusted proxy (API_TRUSTED_PROXIES), sign-in attempts count
// against the client the proxy names, not against the proxy.
func TestSignInRateLimitBehindProxy(t *testing.T) {
	clients, err := clientaddr.New([]string{"127.0.0.1", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, dashboard.Options{AccountAttempts: 100, AddressAttempts: 2, AttemptWindow: time.Hour, Clients: clients})
	forget := func() {
		ctx := context.Background()
		for _, addr := range []string{"203.0.113.5", "198.51.100.9"} {
			keys, _ := s.rdb.Keys(ctx, "*signin:address:"+addr).Result()
			for _, k := range keys {
				s.rdb.Del(ctx, k)
			}
		}
	}
	forget() // a run before this one in the same Redis database
	t.Cleanup(forget)
	from := func(addr string) *client {
		c := s.client()
		c.c.Transport = forwardedFor(addr)
		return c
	}
	a, b := from("203.0.113.5"), from("198.51.100.9")
	for i := range 2 {
		if r := a.signIn(fmt.Sprintf("a%d@example.com", i), "x-wrong-pass"); r.status != http.StatusUnauthorized {
			t.Fatalf("attempt %d from the first client: got %d, want 401", i+1, r.status)
		}
	}
	if r := a.signIn("a2@example.com", "x-wrong-pass"); r.status != http.StatusTooManyRequests {
		t.Errorf("3rd attempt from the first client: got %d, want 429", r.status)
	}
	if r := b.signIn("b0@example.com", "x-wrong-pass"); r.status != http.StatusUnauthorized {
		t.Errorf("first attempt from a second client behind the same proxy: got %d, want 401", r.status)
	}
}
