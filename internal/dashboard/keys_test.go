package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"paysvc/internal/dashboard"
	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// Keys: the CLI's limits answer with their codes as messages; a key's
// last use shows once it is used; a live key created from the test pages
// is listed with the live keys.
func TestKeysPage(t *testing.T) {
	var logs testenv.LogBuffer
	s := newStack(t, dashboard.Options{Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	m, email := s.merchant(payments.RoleAdmin)
	c := s.client()
	c.mustSignIn(email)
	tok := c.csrf("/dashboard/test/apikeys")
	t.Cleanup(func() {
		if !strings.Contains(logs.String(), `"action":"api_key.create"`) {
			t.Error("want key creations in the audit log")
		}
		if strings.Contains(logs.String(), "svc_test_") || strings.Contains(logs.String(), password) {
			t.Error("a key secret or the password is in the logs")
		}
	})
	create := func(mode, expiry string) answer {
		return c.do("POST", "/dashboard/test/apikeys", url.Values{"csrf_token": {tok}, "mode": {mode}, "expires_in": {expiry}})
	}
	secretOf := regexp.MustCompile(`id="secret" readonly value="([^"]+)"`)
	a := create("test", "7d")
	first := secretOf.FindStringSubmatch(a.body)
	if a.status != http.StatusCreated || first == nil || !strings.HasPrefix(first[1], "svc_test_") {
		t.Fatalf("create a test key: got %d, want 201 with its secret", a.status)
	}
	a = create("live", "")
	if live := secretOf.FindStringSubmatch(a.body); a.status != http.StatusCreated || live == nil || !strings.HasPrefix(live[1], "svc_live_") ||
		!strings.Contains(a.body, `id="mode">Live`) && !strings.Contains(a.body, "<td>live</td>") {
		t.Errorf("create a live key: got %d, want 201 with a svc_live_ secret and the live keys listed", a.status)
	}
	create("test", "")
	a = create("test", "")
	if a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "key_creation_rate_exceeded") || !strings.Contains(a.body, "10 minutes") {
		t.Errorf("4th key in 10 minutes: got %d, want 429 key_creation_rate_exceeded with the limit: %.300s", a.status, a.body)
	}
	if a := create("sandbox", ""); a.status != http.StatusBadRequest || !strings.Contains(a.body, "validation_error") {
		t.Errorf("an unknown mode: got %d, want 400 validation_error", a.status)
	}

	// Last used: written off the request's path, at most once a minute.
	if st, _ := s.apiStatus("/v1/customers", first[1]); st != http.StatusOK {
		t.Fatalf("the key against the API: got %d", st)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		keys, err := s.svc.Keys(context.Background(), m, false)
		if err != nil {
			t.Fatal(err)
		}
		var used bool
		for _, k := range keys {
			used = used || k.LastUsedAt != nil
		}
		if used {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key's last use was not recorded within 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The two test keys: the used, expiring one shows dates in both
	// columns; the other "Never" in both.
	page := c.do("GET", "/dashboard/test/apikeys", nil)
	var nevers []int
	for _, row := range regexp.MustCompile(`(?s)<tr data-key="[^"]+">.*?</tr>`).FindAllString(page.body, -1) {
		nevers = append(nevers, strings.Count(row, "Never"))
	}
	if len(nevers) != 2 || nevers[0]+nevers[1] != 2 || (nevers[0] != 0 && nevers[1] != 0) {
		t.Errorf("keys page: got \"Never\" counts %v per test key, want one key with 0 and the other with 2", nevers)
	}
}

// A refund with no amount refunds all that remains; a second one is
// already_refunded, shown as a message.
func TestFullRefund(t *testing.T) {
	s := newStack(t, dashboard.Options{})
	m, email := s.merchant(payments.RoleAdmin)
	s.pay(m, 20000, sandbox.CardSuccess)
	pi := s.pay(m, 3000, sandbox.CardSuccess)
	c := s.client()
	c.mustSignIn(email)
	page := c.do("GET", "/dashboard/test/payments/"+pi, nil)
	key := regexp.MustCompile(`name="refund_key" value="([^"]+)"`).FindStringSubmatch(page.body)
	tok := csrfField.FindStringSubmatch(page.body)
	if key == nil || tok == nil {
		t.Fatal("payment page: no refund form")
	}
	form := url.Values{"csrf_token": {tok[1]}, "refund_key": {key[1]}, "reason": {"requested_by_customer"}}
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", form); a.status != http.StatusSeeOther {
		t.Fatalf("full refund: got %d: %.300s", a.status, a.body)
	}
	// The same form sent twice (a double click) is the one refund.
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", form); a.status != http.StatusSeeOther {
		t.Errorf("the same form again: got %d, want 303 (the first refund)", a.status)
	}
	refunds, err := s.svc.PaymentRefunds(context.Background(), payments.Scope{MerchantID: m}, pi)
	if err != nil || len(refunds) != 1 || refunds[0].Amount != 3000 {
		t.Fatalf("got refunds %+v (%v), want one of 3000", refunds, err)
	}
	form.Set("refund_key", "another-form")
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", form); a.status != http.StatusBadRequest || !strings.Contains(a.body, "already_refunded") {
		t.Errorf("refund again: got %d, want 400 already_refunded (the API's status)", a.status)
	}
	if a := c.do("POST", "/dashboard/test/payments/"+pi+"/refund", url.Values{"csrf_token": {tok[1]}, "amount": {"1.234"}}); a.status != http.StatusBadRequest || !strings.Contains(a.body, "validation_error") {
		t.Errorf("an amount with 3 decimals: got %d, want 400 validation_error", a.status)
	}
}
