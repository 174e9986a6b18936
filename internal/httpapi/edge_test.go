package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestProductRoundTrip(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	r := h.do("POST", "/v1/products", key, map[string]any{
		"name": "T-shirt", "description": "Cotton", "images": []string{"https://img.example/a.png"},
		"metadata": map[string]string{"sku": "ts-1"}, "url": "https://shop.example/ts",
		"statement_descriptor": "SHOP TSHIRT", "price": map[string]any{"amount": 1999, "currency": "USD", "tax_behavior": "exclusive"},
	})
	wantOK(t, r)
	var p struct {
		ID           string
		Active       bool
		DefaultPrice struct {
			ID       string
			Amount   int64
			Currency string
		} `json:"default_price"`
	}
	r.data(t, &p)
	if !p.Active || p.DefaultPrice.Amount != 1999 || p.DefaultPrice.Currency != "usd" {
		t.Errorf("created product = %+v", p)
	}
	got := h.do("GET", "/v1/products/"+p.ID, key, nil)
	wantOK(t, got)
	del := h.do("DELETE", "/v1/products/"+p.ID, key, nil)
	wantOK(t, del)
	after := h.do("GET", "/v1/products/"+p.ID, key, nil)
	wantOK(t, after)
	var archived struct{ Active bool }
	after.data(t, &archived)
	if archived.Active {
		t.Errorf("archived product still active")
	}
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/nope"}, {"PATCH", "/v1/products"}, {"GET", "/"}, {"GET", "/v1/products/"},
	} {
		r := h.do(c.method, c.path, "", nil)
		wantError(t, r, http.StatusNotFound, "endpoint_not_found")
	}
}

// TestLongResponseHasContentLength: a response longer than net/http's
// 2 KiB buffer (a list page) is sent with its length, not chunked
// (checkEnvelope checks Content-Length on every response).
func TestLongResponseHasContentLength(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for i := range 10 {
		wantOK(t, h.do("POST", "/v1/products", key, map[string]any{
			"name": fmt.Sprintf("Product %d", i), "description": strings.Repeat("A long description. ", 20),
			"price": map[string]any{"amount": 1000 + i, "currency": "usd"},
		}))
	}
	r := h.do("GET", "/v1/products?limit=10", key, nil)
	wantOK(t, r)
	if len(r.Raw) <= 2048 {
		t.Fatalf("list page of %d bytes: want one over 2 KiB", len(r.Raw))
	}
}
