package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"paysvc/internal/payments"
)

// productID returns the id of the product in a success response.
func productID(t *testing.T, r *response) string {
	t.Helper()
	var p struct{ ID string }
	r.data(t, &p)
	if !strings.HasPrefix(p.ID, "prod_") {
		t.Fatalf("got product id %q, want prefix prod_", p.ID)
	}
	return p.ID
}

// wantReplayOf asserts that r replays first: same status and body bytes,
// the same request id, and Idempotent-Replayed: true.
func wantReplayOf(t *testing.T, r, first *response) {
	t.Helper()
	if r.Status != first.Status || !bytes.Equal(r.Raw, first.Raw) {
		t.Errorf("got %d %s, want the replay %d %s", r.Status, r.Raw, first.Status, first.Raw)
	}
	if got := r.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("got Idempotent-Replayed %q, want true", got)
	}
	if got, want := r.Header.Get("X-Request-Id"), first.Header.Get("X-Request-Id"); got != want {
		t.Errorf("got X-Request-Id %q, want the first request's %q", got, want)
	}
}

// wantNotReplayed asserts that r was not served from an idempotency record.
func wantNotReplayed(t *testing.T, r *response) {
	t.Helper()
	if got := r.Header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("got Idempotent-Replayed %q, want none", got)
	}
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	first := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "order-1")
	wantOK(t, first)
	wantNotReplayed(t, first)
	id := productID(t, first)

	for _, c := range []struct{ name, body string }{
		{"same body", productBody},
		{"same body again", productBody},
		{"same body with other whitespace", "\n{ \"name\": \"Mug\",\n  \"price\": {\"amount\": 1200, \"currency\": \"usd\"} }\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantReplayOf(t, h.do("POST", "/v1/products", key, c.body, "Idempotency-Key", "order-1"), first)
		})
	}

	if got := countRows(t, h, "products", m); got != 1 {
		t.Errorf("got %d products in the database, want 1", got)
	}
	r := h.do("GET", "/v1/products?limit=100", key, nil)
	wantOK(t, r)
	var list struct{ Data []struct{ ID string } }
	r.data(t, &list)
	if len(list.Data) != 1 || list.Data[0].ID != id {
		t.Errorf("got list %+v, want only %s", list.Data, id)
	}

	// Another key value is another request.
	other := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "order-2")
	wantOK(t, other)
	wantNotReplayed(t, other)
	if productID(t, other) == id {
		t.Errorf("got the same product for another Idempotency-Key")
	}
}

func TestIdempotencyKeyReuseRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	first := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "k-1")
	wantOK(t, first)

	for _, c := range []struct{ name, path, body string }{
		{"other body", "/v1/products", `{"name":"Cup","price":{"amount":1200,"currency":"usd"}}`},
		{"other body, field added", "/v1/products", `{"name":"Mug","price":{"amount":1200,"currency":"usd"},"shippable":true}`},
		{"empty object", "/v1/products", `{}`},
		{"other path", "/v1/customers", `{"email":"buyer@example.com"}`},
		{"other path, same body", "/v1/customers", productBody},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", c.path, key, c.body, "Idempotency-Key", "k-1")
			wantError(t, r, http.StatusBadRequest, "validation_error")
			wantNotReplayed(t, r)
		})
	}
	// The mismatches neither created anything nor spoiled the record.
	if got := countRows(t, h, "products", m); got != 1 {
		t.Errorf("got %d products, want 1", got)
	}
	if got := countRows(t, h, "customers", m); got != 0 {
		t.Errorf("got %d customers, want 0", got)
	}
	wantReplayOf(t, h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "k-1"), first)
}

func TestIdempotencyKeyScope(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	a, b := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aTest2, aLive := h.key(a, false), h.key(a, false), h.key(a, true)
	bTest := h.key(b, false)
	const idem = "shared-key"

	first := h.do("POST", "/v1/products", aTest, productBody, "Idempotency-Key", idem)
	wantOK(t, first)
	aID := productID(t, first)

	type made struct {
		ID       string
		Livemode bool
	}
	for _, c := range []struct {
		name string
		key  string
		live bool
	}{{"other merchant", bTest, false}, {"same merchant, live mode", aLive, true}} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/products", c.key, productBody, "Idempotency-Key", idem)
			wantOK(t, r)
			wantNotReplayed(t, r)
			var p made
			r.data(t, &p)
			if p.ID == aID || p.Livemode != c.live {
				t.Errorf("got %+v, want a new product (not %s) with livemode %v", p, aID, c.live)
			}
		})
	}
	// The scope is the merchant and mode, not the key: another test key of
	// merchant A replays A's response.
	wantReplayOf(t, h.do("POST", "/v1/products", aTest2, productBody, "Idempotency-Key", idem), first)

	if got := countRows(t, h, "products", a); got != 2 {
		t.Errorf("got %d products of merchant A, want 2 (test and live)", got)
	}
	if got := countRows(t, h, "products", b); got != 1 {
		t.Errorf("got %d products of merchant B, want 1", got)
	}
}

func TestIdempotencyKeyLength(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	for _, c := range []struct {
		name   string
		idem   string
		status int
	}{
		{"1 character", "a", 200},
		{"255 characters", strings.Repeat("b", 255), 200},
		{"256 characters", strings.Repeat("c", 256), 400},
		{"1000 characters", strings.Repeat("d", 1000), 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := countRows(t, h, "products", m)
			r := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", c.idem)
			after := countRows(t, h, "products", m)
			if c.status == 200 {
				wantOK(t, r)
				wantReplayOf(t, h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", c.idem), r)
				if after != before+1 {
					t.Errorf("got %d new products, want 1", after-before)
				}
				return
			}
			wantError(t, r, c.status, "validation_error")
			if after != before {
				t.Errorf("got %d new products, want 0", after-before)
			}
		})
	}
}

func TestIdempotencyReplaysValidationError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	for _, c := range []struct{ name, body string }{
		{"domain validation", `{"name":"","price":{"amount":0,"currency":"usd"}}`},
		{"strict JSON", `{"name":"Mug","colour":"red"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			idem := "bad-" + c.name
			first := h.do("POST", "/v1/products", key, c.body, "Idempotency-Key", idem)
			wantError(t, first, http.StatusBadRequest, "validation_error")
			wantNotReplayed(t, first)
			wantReplayOf(t, h.do("POST", "/v1/products", key, c.body, "Idempotency-Key", idem), first)
			// The key is spent on the failed request: a corrected body is
			// another request with the same key.
			wantError(t, h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", idem), http.StatusBadRequest, "validation_error")
		})
	}
	if got := countRows(t, h, "products", m); got != 0 {
		t.Errorf("got %d products, want 0", got)
	}
}

func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	const n = 20
	type result struct {
		status   int
		raw      []byte
		replayed string
		err      error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		req, err := http.NewRequest("POST", h.url+"/v1/products", strings.NewReader(productBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", "race-1")
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results[i].err = err
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			results[i] = result{status: resp.StatusCode, raw: raw, replayed: resp.Header.Get("Idempotent-Replayed"), err: err}
		}()
	}
	close(start)
	wg.Wait()

	fresh := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if r.status != http.StatusOK {
			t.Errorf("request %d: got %d %s, want 200", i, r.status, r.raw)
		}
		if !bytes.Equal(r.raw, results[0].raw) {
			t.Errorf("request %d: got body %s, want the same as request 0: %s", i, r.raw, results[0].raw)
		}
		switch r.replayed {
		case "":
			fresh++
		case "true":
		default:
			t.Errorf("request %d: got Idempotent-Replayed %q", i, r.replayed)
		}
	}
	if fresh != 1 {
		t.Errorf("got %d responses that were not replays, want exactly 1", fresh)
	}
	var env struct{ Data struct{ ID string } }
	if err := json.Unmarshal(results[0].raw, &env); err != nil || !strings.HasPrefix(env.Data.ID, "prod_") {
		t.Errorf("got body %s, want a product", results[0].raw)
	}
	if got := countRows(t, h, "products", m); got != 1 {
		t.Errorf("got %d products, want 1", got)
	}
}

func TestIdempotencyKeyIgnoredOnReads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)

	first := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "read-1")
	wantOK(t, first)
	id := productID(t, first)

	for _, c := range []struct{ name, path, idem string }{
		{"list with a used key", "/v1/products", "read-1"},
		{"get with a used key", "/v1/products/" + id, "read-1"},
		{"list with an overlong key", "/v1/products", strings.Repeat("x", 300)},
		{"list with a fresh key", "/v1/products", "read-2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 2 {
				r := h.do("GET", c.path, key, nil, "Idempotency-Key", c.idem)
				wantOK(t, r)
				wantNotReplayed(t, r)
				if bytes.Equal(r.Raw, first.Raw) {
					t.Errorf("got the POST's response replayed for a GET")
				}
			}
		})
	}
	// The GETs did not claim read-2 for themselves.
	r := h.do("POST", "/v1/products", key, productBody, "Idempotency-Key", "read-2")
	wantOK(t, r)
	wantNotReplayed(t, r)
}

func TestIdempotencyIgnoresRejectedRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{ratePerHour: 2})
	m := h.merchant(payments.PlanFree)
	limited, revoked, good := h.key(m, false), h.newKey(m, false, 0), h.key(m, false)
	if _, err := h.svc.RevokeKey(context.Background(), revoked.ID); err != nil {
		t.Fatal(err)
	}
	const first = `{"name":"First"}`

	wantError(t, h.do("POST", "/v1/products", revoked.Secret, first, "Idempotency-Key", "k-auth"), http.StatusUnauthorized, "key_revoked")
	wantOK(t, h.do("GET", "/v1/products", limited, nil))
	wantOK(t, h.do("GET", "/v1/products", limited, nil))
	wantError(t, h.do("POST", "/v1/products", limited, first, "Idempotency-Key", "k-rate"), http.StatusTooManyRequests, "rate_limit_exceeded")

	// Had either refused request been stored, another body with its key
	// would be a validation_error (same merchant, same mode).
	for _, idem := range []string{"k-auth", "k-rate"} {
		t.Run(idem, func(t *testing.T) {
			r := h.do("POST", "/v1/products", good, productBody, "Idempotency-Key", idem)
			wantOK(t, r)
			wantNotReplayed(t, r)
		})
	}
	if got := countRows(t, h, "products", m); got != 2 {
		t.Errorf("got %d products, want 2", got)
	}
}
