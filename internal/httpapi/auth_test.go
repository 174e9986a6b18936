package httpapi_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
)

// withAuth sends a request whose Authorization header is exactly auth
// (absent when auth is "").
func (h *harness) withAuth(method, path, auth string, body string) *response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return h.send(req)
}

// newKey creates a key and returns its record with the secret.
func (h *harness) newKey(merchantID string, live bool, expiresIn time.Duration) payments.NewKey {
	h.t.Helper()
	k, err := h.svc.CreateKey(context.Background(), merchantID, live, expiresIn)
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

// violate sends one product create with prohibited content (the harness
// must screen "badword") and asserts it is refused.
func (h *harness) violate(key string) {
	h.t.Helper()
	r := h.do("POST", "/v1/products", key, map[string]any{"name": "badword"})
	wantError(h.t, r, http.StatusBadRequest, "prohibited_content")
}

const productBody = `{"name":"Mug","price":{"amount":1200,"currency":"usd"}}`

func TestAuthRejectsMissingAndInvalidKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	valid := h.testKey()
	live := h.key(h.merchant(payments.PlanFree), true)
	secret := strings.TrimPrefix(valid, "svc_test_")
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }

	// The valid key works, so every rejection below is about the header.
	wantOK(t, h.withAuth("GET", "/v1/products", "Bearer "+valid, ""))

	for _, c := range []struct{ name, auth string }{
		{"no header", ""},
		{"empty bearer", "Bearer "},
		{"bearer with spaces only", "Bearer    "},
		{"scheme only", "Bearer"},
		{"basic", basic("user:password")},
		{"basic carrying a valid key", basic(valid + ":")},
		{"key without scheme", valid},
		{"random test key", "Bearer svc_test_" + strings.Repeat("a", 32)},
		{"random live key", "Bearer svc_live_" + strings.Repeat("Z", 32)},
		{"wrong prefix", "Bearer sk_test_" + secret},
		{"test secret with live prefix", "Bearer svc_live_" + secret},
		{"live secret with test prefix", "Bearer svc_test_" + strings.TrimPrefix(live, "svc_live_")},
		{"truncated key", "Bearer " + valid[:len(valid)-1]},
		{"key with extra character", "Bearer " + valid + "x"},
		{"prefix only", "Bearer svc_test_"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, m := range []struct{ method, path, body string }{
				{"GET", "/v1/products", ""},
				{"POST", "/v1/products", productBody},
				{"GET", "/v1/customers/cus_123", ""},
			} {
				r := h.withAuth(m.method, m.path, c.auth, m.body)
				wantError(t, r, http.StatusUnauthorized, "unauthorized")
			}
		})
	}
}

func TestAuthRevokedKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	k := h.newKey(m, false, 0)
	other := h.key(m, false)
	wantOK(t, h.do("GET", "/v1/products", k.Secret, nil))

	if _, err := h.svc.RevokeKey(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.do("GET", "/v1/products", k.Secret, nil), http.StatusUnauthorized, "key_revoked")
	wantError(t, h.do("POST", "/v1/products", k.Secret, productBody), http.StatusUnauthorized, "key_revoked")
	// Revoking one key leaves the merchant's other keys working.
	wantOK(t, h.do("GET", "/v1/products", other, nil))
}

func TestAuthExpiredKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	k := h.newKey(m, false, 2*time.Second)
	if k.ExpiresAt == nil {
		t.Fatalf("got no expires_at for a key created with an expiry")
	}
	wantOK(t, h.do("GET", "/v1/products", k.Secret, nil))

	time.Sleep(time.Until(*k.ExpiresAt) + 100*time.Millisecond)
	wantError(t, h.do("GET", "/v1/products", k.Secret, nil), http.StatusUnauthorized, "key_expired")
	wantError(t, h.do("POST", "/v1/products", k.Secret, productBody), http.StatusUnauthorized, "key_expired")

	// A key with a long expiry is not expired.
	long := h.newKey(m, false, time.Hour)
	wantOK(t, h.do("GET", "/v1/products", long.Secret, nil))
}

func TestAuthSuspendedMerchant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: "badword"})
	m := h.merchant(payments.PlanFree)
	test, live := h.key(m, false), h.key(m, true)
	bystander := h.testKey() // another merchant

	for i := 0; i < 5; i++ {
		h.violate(test)
	}
	for _, c := range []struct{ name, key string }{{"test key", test}, {"live key", live}} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("GET", "/v1/products", c.key, nil), http.StatusUnauthorized, "key_revoked")
			wantError(t, h.do("POST", "/v1/products", c.key, productBody), http.StatusUnauthorized, "key_revoked")
		})
	}
	// A key created while suspended is refused too: the merchant is suspended, not its keys.
	fresh := h.key(m, false)
	wantError(t, h.do("GET", "/v1/products", fresh, nil), http.StatusUnauthorized, "key_revoked")
	// Other merchants are not affected.
	wantOK(t, h.do("GET", "/v1/products", bystander, nil))

	if _, err := h.svc.UnsuspendMerchant(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{test, live, fresh} {
		wantOK(t, h.do("POST", "/v1/products", key, productBody))
	}
	// Violations before the unsuspension no longer count: one more does not
	// suspend again.
	h.violate(test)
	wantOK(t, h.do("GET", "/v1/products", test, nil))
}

func TestAuthKeyModeIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	test, live := h.key(m, false), h.key(m, true)

	made := map[bool]string{}
	for _, c := range []struct {
		name string
		key  string
		live bool
	}{{"test key", test, false}, {"live key", live, true}} {
		r := h.do("POST", "/v1/products", c.key, productBody)
		wantOK(t, r)
		var p struct {
			ID       string
			Livemode *bool
		}
		r.data(t, &p)
		if p.Livemode == nil || *p.Livemode != c.live {
			t.Errorf("%s: got livemode %v, want %v", c.name, p.Livemode, c.live)
		}
		made[c.live] = p.ID
	}

	for _, c := range []struct {
		name string
		key  string
		live bool
	}{{"test key", test, false}, {"live key", live, true}} {
		t.Run(c.name, func(t *testing.T) {
			wantOK(t, h.do("GET", "/v1/products/"+made[c.live], c.key, nil))
			wantError(t, h.do("GET", "/v1/products/"+made[!c.live], c.key, nil), http.StatusNotFound, "product_not_found")
			wantError(t, h.do("PUT", "/v1/products/"+made[!c.live], c.key, map[string]any{"name": "x"}), http.StatusNotFound, "product_not_found")
			r := h.do("GET", "/v1/products?limit=100", c.key, nil)
			wantOK(t, r)
			var list struct{ Data []struct{ ID string } }
			r.data(t, &list)
			if len(list.Data) != 1 || list.Data[0].ID != made[c.live] {
				t.Errorf("got list %+v, want only %s", list.Data, made[c.live])
			}
		})
	}
}

// madeUpKey is a well-formed test key no merchant has: the n-th of a
// series named by tag (tag and n together at most 32 characters).
func madeUpKey(tag string, n int) string {
	s := fmt.Sprintf("%s%d", tag, n)
	return "svc_test_" + s + strings.Repeat("0", 32-len(s))
}

// TestUnknownKeysPerAddress: each client address may present a budget of
// keys the database does not hold; past it, what would read another key
// for it is answered 429 with Retry-After (a key the process has seen
// found still works), and other addresses are not affected. Behind a
// trusted proxy the address is X-Forwarded-For's.
func TestUnknownKeysPerAddress(t *testing.T) {
	t.Parallel()
	prefix := "unknownkeys-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	h := newHarness(t, harnessOpts{
		authCacheTTL:   200 * time.Millisecond,
		trustedProxies: []string{"127.0.0.1", "::1"},
		unknownKeys: func(rdb redis.UniversalClient) *ratelimit.Strikes {
			return ratelimit.NewStrikes(rdb, prefix, 3, time.Minute)
		},
	})
	m := h.merchant(payments.PlanFree)
	cached, uncached := h.key(m, false), h.key(m, false)
	from := func(addr, key string) *response {
		return h.do("GET", "/v1/products", key, nil, "X-Forwarded-For", addr)
	}
	wantOK(t, from("203.0.113.5", cached)) // read once: cached from now on

	// Three strikes are the budget; the fourth read happens and is
	// refused, which refuses the address.
	for i := range 4 {
		wantError(t, from("203.0.113.5", madeUpKey("a", i)), http.StatusUnauthorized, "unauthorized")
	}
	r := from("203.0.113.5", madeUpKey("a", 4))
	wantError(t, r, http.StatusTooManyRequests, "rate_limit_exceeded")
	if secs, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || secs < 1 || secs > 60 {
		t.Errorf("Retry-After %q: want 1..60 seconds", r.Header.Get("Retry-After"))
	}
	if r.Body.Error == nil || !strings.Contains(r.Body.Error.Message, "unknown API keys") {
		t.Errorf("body %s: want a message that says why", r.Raw)
	}
	if r.Header.Get("X-Ratelimit-Limit") != "" {
		t.Error("an address's refusal carries a key's X-RateLimit-Limit")
	}

	// A key no cache has seen waits with the rest of the address; a
	// made-up key the cache remembers is still answered 401.
	wantError(t, from("203.0.113.5", uncached), http.StatusTooManyRequests, "rate_limit_exceeded")
	wantError(t, from("203.0.113.5", madeUpKey("a", 3)), http.StatusUnauthorized, "unauthorized")
	// A key the cache has seen found still works from the address, also
	// once its record is past the TTL and read again.
	wantOK(t, from("203.0.113.5", cached))
	time.Sleep(300 * time.Millisecond)
	wantOK(t, from("203.0.113.5", cached))
	// Another address, and another proxy hop's client, are their own.
	wantError(t, from("198.51.100.9", madeUpKey("b", 0)), http.StatusUnauthorized, "unauthorized")
	wantOK(t, from("198.51.100.9", uncached))
	wantError(t, from("203.0.113.5, 198.51.100.10", madeUpKey("c", 0)), http.StatusUnauthorized, "unauthorized")
	// The refused address through one more trusted hop is still itself.
	wantError(t, from("203.0.113.5, 127.0.0.1", madeUpKey("a", 5)), http.StatusTooManyRequests, "rate_limit_exceeded")
}
