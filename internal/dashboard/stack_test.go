package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/dashboard"
	"paysvc/internal/hosted"
	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
	"paysvc/internal/testenv"
)

// stack is the API and the dashboard on one listener, as cmd/api serves
// them, on a real PostgreSQL and Redis with the sandbox processor.
type stack struct {
	t     *testing.T
	url   string
	svc   *payments.Service
	db    *sqlx.DB
	sb    *sandbox.Sandbox
	rdb   *redis.Client
	store *postgres.Store
}

func newStack(t *testing.T, o dashboard.Options) *stack {
	t.Helper()
	db := testenv.DB(t)
	store := postgres.New(db)
	bl, err := payments.LoadBlocklist("")
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	sb := sandbox.New(db, srv.URL)
	box, err := secrets.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	svc := payments.NewService(store, bl, time.Now, payments.WithProcessor(sb), payments.WithSecrets(box))
	rdb := testenv.Redis(t)
	api := httpapi.New(httpapi.Deps{
		Service: svc, Store: store, Limiter: ratelimit.New(rdb, 100000),
		Pages: hosted.New(svc, sb.Cards(svc), nil), Secrets: box,
	})
	o.Service, o.Redis = svc, rdb
	if o.AddressAttempts == 0 {
		o.AddressAttempts = 100000 // every test signs in from 127.0.0.1
	}
	handler = dashboard.New(o).Wrap(api)
	return &stack{t: t, url: srv.URL, svc: svc, db: db, sb: sb, rdb: rdb, store: store}
}

const password = "correct horse battery"

// merchant creates a merchant with a user of role and returns both ids'
// merchant and the user's email.
func (s *stack) merchant(role payments.Role) (string, string) {
	s.t.Helper()
	ctx := context.Background()
	m, err := s.svc.CreateMerchant(ctx, "Shop "+string(role), "", payments.PlanFree)
	if err != nil {
		s.t.Fatal(err)
	}
	email := strings.ToLower(m.ID) + "@example.com"
	if _, err := s.svc.CreateUser(ctx, m.ID, email, role, password); err != nil {
		s.t.Fatal(err)
	}
	return m.ID, email
}

// pay makes a succeeded test payment of amount usd for the merchant.
func (s *stack) pay(merchantID string, amount int64, card string) string {
	s.t.Helper()
	ctx := context.Background()
	cur := "usd"
	sc := payments.Scope{MerchantID: merchantID}
	created, err := s.svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.sb.Cards(s.svc).ConfirmPayment(ctx, created.PaymentIntentID, created.PublishableKey, created.ClientSecret, card); err != nil {
		s.t.Fatal(err)
	}
	return created.PaymentIntentID
}

// client is a browser without a browser: cookies, no redirects followed.
type client struct {
	t *testing.T
	s *stack
	c *http.Client
}

func (s *stack) client() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: s.t, s: s, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type answer struct {
	status int
	body   string
	header http.Header
}

func (c *client) do(method, path string, form url.Values) answer {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.s.url+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

var csrfField = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// csrf is the CSRF token of the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	a := c.do("GET", path, nil)
	m := csrfField.FindStringSubmatch(a.body)
	if m == nil {
		c.t.Fatalf("GET %s: got %d, no csrf_token in the page", path, a.status)
	}
	return m[1]
}

// signIn signs in through the form and returns the answer to the POST.
func (c *client) signIn(email, pw string) answer {
	c.t.Helper()
	tok := c.csrf("/dashboard/login")
	return c.do("POST", "/dashboard/login", url.Values{"email": {email}, "password": {pw}, "csrf_token": {tok}})
}

func (c *client) mustSignIn(email string) {
	c.t.Helper()
	if a := c.signIn(email, password); a.status != http.StatusSeeOther {
		c.t.Fatalf("sign in %s: got %d, want 303: %s", email, a.status, a.body)
	}
}

// apiStatus is the status and error code of a GET on the API with key.
func (s *stack) apiStatus(path, key string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	code := regexp.MustCompile(`"code":"([a-z_]+)"`).FindStringSubmatch(string(b))
	if code == nil {
		return resp.StatusCode, ""
	}
	return resp.StatusCode, code[1]
}
