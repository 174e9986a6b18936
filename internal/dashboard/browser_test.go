package dashboard_test

// Browser tests of the dashboard: a real headless Chromium (Debian's
// chromium, driven by chromedp, as internal/hosted's tests) against the API
// and the dashboard on one server, on a real PostgreSQL and Redis.
// Screenshots of the main pages go to .artifacts/dashboard/ at the
// repository's root (or SCREENSHOT_DIR), never committed.

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"paysvc/internal/dashboard"
	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("%s: %v (page at %s)", what, err, loc)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css), chromedp.NodeVisible))
	if err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		t.Fatalf("text of %s: %v (page at %s)", css, err, loc)
	}
	return strings.TrimSpace(s)
}

// screenshot saves a full-page PNG for reviewers under .artifacts/dashboard.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := os.Getenv("SCREENSHOT_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", ".artifacts", "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signIn fills the sign-in form through its labelled fields.
func signIn(t *testing.T, ctx context.Context, s *stack, email string) {
	t.Helper()
	do(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/dashboard/test"),
		chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("test-banner")),
	)
}

// The path: sign in, create a test key, use it against the API,
// revoke it and see 401 key_revoked; refund a payment from its page.
func TestBrowserKeysAndRefund(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	// A balance the refund can come out of, and the payment to refund.
	s.pay(m, 20000, sandbox.CardSuccess)
	pi := s.pay(m, 5000, sandbox.CardSuccess)
	if _, err := s.svc.CreateCustomer(context.Background(), payments.Scope{MerchantID: m}, payments.CustomerInput{Email: ptr("ada@example.com"), Name: ptr("Ada Lovelace")}); err != nil {
		t.Fatal(err)
	}
	browser := testenv.Browser(t, 1200, 900)
	ctx := testenv.BrowserStep(t, browser)

	signIn(t, ctx, s, email)
	if got := text(t, ctx, "#mode"); got != "Test" {
		t.Errorf("got mode %q, want Test", got)
	}
	if got := text(t, ctx, "[data-available]"); got != "$236.95" {
		t.Errorf("got available balance %q, want $236.95 (250.00 less 4.9%% + 0.40 a payment)", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("svg.bars rect").length`); n != 30 {
		t.Errorf("got %d bars in the volume chart, want 30", n)
	}
	// The stylesheet and the script load under the page's CSP: the banner
	// is styled, and the script re-rendered the times in the browser's zone.
	if bg := eval[string](t, ctx, `getComputedStyle(document.getElementById("test-banner")).backgroundColor`); bg != "rgb(245, 166, 35)" {
		t.Errorf("got banner background %q, want rgb(245, 166, 35): the stylesheet did not load", bg)
	}
	if !eval[bool](t, ctx, `Array.from(document.querySelectorAll("time")).every(t => t.title !== "")`) {
		t.Error("the times were not re-rendered by the page's script")
	}
	screenshot(t, ctx, "home.png")

	// Create a test key; its secret is shown once, with a copy button.
	do(t, ctx, "create a key",
		chromedp.Click(chromedp.CSS(`nav.side a[href$="/apikeys"]`)),
		chromedp.WaitVisible(chromedp.ID("create-key")),
		chromedp.Click(chromedp.ID("create")),
		chromedp.WaitVisible(chromedp.ID("secret")),
	)
	secret := eval[string](t, ctx, `document.getElementById("secret").value`)
	if !strings.HasPrefix(secret, "svc_test_") {
		t.Fatalf("got secret %q, want svc_test_…", secret)
	}
	if eval[int](t, ctx, `document.querySelectorAll("[data-copy]").length`) != 1 {
		t.Error("want a copy button beside the secret")
	}
	screenshot(t, ctx, "apikeys-created.png")
	if st, code := s.apiStatus("/v1/customers", secret); st != http.StatusOK {
		t.Fatalf("the new key against the API: got %d %s, want 200", st, code)
	}

	// Reload: the secret is gone for good; the key is listed, used.
	do(t, ctx, "reload the keys page", chromedp.Navigate(s.url+"/dashboard/test/apikeys"), chromedp.WaitVisible(chromedp.ID("keys")))
	if eval[bool](t, ctx, `document.body.innerHTML.includes(`+jsString(secret)+`)`) {
		t.Error("the secret is shown again after a reload")
	}
	if got := text(t, ctx, "[data-key] [data-status]"); got != "active" {
		t.Errorf("got key status %q, want active", got)
	}
	do(t, ctx, "revoke the key",
		chromedp.Click(chromedp.CSS(`[data-key] button.danger`)),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	if got := text(t, ctx, "[data-key] [data-status]"); got != "revoked" {
		t.Errorf("got key status %q after revoking, want revoked", got)
	}
	if st, code := s.apiStatus("/v1/customers", secret); st != http.StatusUnauthorized || code != "key_revoked" {
		t.Errorf("the revoked key: got %d %s, want 401 key_revoked", st, code)
	}
	screenshot(t, ctx, "apikeys.png")

	// Refund $12.50 of the payment from its page.
	do(t, ctx, "open the payment",
		chromedp.Click(chromedp.CSS(`nav.side a[href$="/payments"]`)),
		chromedp.WaitVisible(chromedp.ID("payments")),
	)
	screenshot(t, ctx, "payments.png")
	do(t, ctx, "refund part of it",
		chromedp.Click(chromedp.CSS(`#payments a[href$="`+pi+`"]`)),
		chromedp.WaitVisible(chromedp.ID("refund-form")),
		chromedp.SendKeys(chromedp.ID("amount"), "12.50"),
		chromedp.Click(chromedp.ID("refund")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	if got := text(t, ctx, "#refunded"); !strings.Contains(got, "$12.50 pending") {
		t.Errorf("got refunded %q, want $12.50 pending", got)
	}
	p, err := s.svc.Payment(context.Background(), payments.Scope{MerchantID: m}, pi)
	if err != nil || p.AmountRefundPending+p.AmountRefunded != 1250 {
		t.Errorf("got payment %+v (%v), want 1250 refunded or pending", p, err)
	}
	screenshot(t, ctx, "payment.png")

	// A refund larger than what remains: the API's code, as a message.
	do(t, ctx, "refund too much",
		chromedp.SendKeys(chromedp.ID("amount"), "100"),
		chromedp.Click(chromedp.ID("refund")),
		chromedp.WaitVisible(chromedp.ID("error")),
	)
	if got := text(t, ctx, "#error"); !strings.Contains(got, "refund_amount_too_large") {
		t.Errorf("got error %q, want refund_amount_too_large", got)
	}

	// Re-enable a disabled webhook endpoint from its page.
	sc := payments.Scope{MerchantID: m}
	we, err := s.svc.CreateEndpoint(context.Background(), sc, payments.EndpointInput{URL: ptr("https://hooks.example/in")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.svc.UpdateEndpoint(context.Background(), sc, we.ID, payments.EndpointUpdate{Status: ptr(payments.EndpointDisabled)}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "enable the endpoint",
		chromedp.Click(chromedp.CSS(`nav.side a[href$="/webhooks"]`)),
		chromedp.WaitVisible(chromedp.ID("endpoints")),
		chromedp.Click(chromedp.CSS(`#endpoints a[href$="`+we.ID+`"]`)),
		chromedp.WaitVisible(chromedp.ID("enable")),
		chromedp.Click(chromedp.ID("enable")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	)
	if got := text(t, ctx, "#status"); got != "enabled" {
		t.Errorf("got endpoint status %q after enabling, want enabled", got)
	}
	// An event now reaches it; resend that delivery from its page.
	s.pay(m, 1000, sandbox.CardSuccess)
	do(t, ctx, "resend a delivery",
		chromedp.Navigate(s.url+"/dashboard/test/webhooks/"+we.ID),
		chromedp.WaitVisible(chromedp.ID("deliveries")),
		chromedp.Click(chromedp.CSS(`#deliveries a[href*="/deliveries/"]`)),
		chromedp.WaitVisible(chromedp.ID("resend")),
	)
	screenshot(t, ctx, "webhook-delivery.png")
	do(t, ctx, "click resend", chromedp.Click(chromedp.ID("resend")), chromedp.WaitVisible(chromedp.ID("notice")))
	var n int
	if err := s.db.Get(&n, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, we.ID); err != nil || n != 2 {
		t.Errorf("got %d deliveries after resending (%v), want 2", n, err)
	}
	do(t, ctx, "back to the endpoint", chromedp.Navigate(s.url+"/dashboard/test/webhooks/"+we.ID), chromedp.WaitVisible(chromedp.ID("deliveries")))
	screenshot(t, ctx, "webhook-endpoint.png")

	sub := s.subscription(m)
	do(t, ctx, "open the subscription",
		chromedp.Click(chromedp.CSS(`nav.side a[href$="/subscriptions"]`)),
		chromedp.WaitVisible(chromedp.ID("subscriptions")),
		chromedp.Click(chromedp.CSS(`#subscriptions a[href$="`+sub+`"]`)),
		chromedp.WaitVisible(chromedp.ID("cancel-form")),
		chromedp.Click(chromedp.ID("cancel")),
		chromedp.WaitVisible(chromedp.ID("cancels")),
	)
	screenshot(t, ctx, "subscription.png")

	for _, page := range []string{"refunds", "disputes", "customers", "products", "events", "webhooks", "subscriptions", "settings"} {
		do(t, ctx, "open "+page, chromedp.Navigate(s.url+"/dashboard/test/"+page), chromedp.WaitVisible(chromedp.CSS("main h1")))
		screenshot(t, ctx, page+".png")
	}
	// The live switch, always there, leaves test mode.
	do(t, ctx, "switch to live", chromedp.Click(chromedp.ID("mode-switch")), chromedp.WaitVisible(chromedp.CSS("main h1")))
	if got := text(t, ctx, "#mode"); got != "Live" {
		t.Errorf("got mode %q after switching, want Live", got)
	}
	if eval[bool](t, ctx, `!!document.getElementById("test-banner")`) {
		t.Error("live mode shows the test banner")
	}
}

// At a phone's width the pages need no sideways scrolling of the page
// itself (tables scroll on their own), and the sign-in form is usable.
func TestBrowserPhoneWidth(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	s.pay(m, 5000, sandbox.CardSuccess)
	browser := testenv.Browser(t, 375, 800)
	ctx := testenv.BrowserStep(t, browser)
	signIn(t, ctx, s, email)
	for _, page := range []string{"", "/payments", "/apikeys"} {
		do(t, ctx, "open "+page, chromedp.Navigate(s.url+"/dashboard/test"+page), chromedp.WaitVisible(chromedp.CSS("main h1")))
		if over := eval[bool](t, ctx, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
			t.Errorf("%s: the page is wider than the phone", page)
		}
	}
	screenshot(t, ctx, "phone-apikeys.png")
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
