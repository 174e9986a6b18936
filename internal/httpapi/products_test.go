package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// productView is a product as the API returns it.
type productView struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	Description         *string           `json:"description"`
	Active              bool              `json:"active"`
	Images              []string          `json:"images"`
	URL                 *string           `json:"url"`
	Metadata            map[string]string `json:"metadata"`
	DefaultPrice        *priceView        `json:"default_price"`
	Shippable           *bool             `json:"shippable"`
	UnitLabel           *string           `json:"unit_label"`
	StatementDescriptor *string           `json:"statement_descriptor"`
	TaxCode             *string           `json:"tax_code"`
	Livemode            bool              `json:"livemode"`
	Created             int64             `json:"created"`
}

// priceView is a product's default_price as the API returns it.
type priceView struct {
	ID          string  `json:"id"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	TaxBehavior *string `json:"tax_behavior"`
}

func ptr[T any](v T) *T { return &v }

// createProductOK creates a product and returns it; anything but 200 fails the test.
func createProductOK(t *testing.T, h *harness, key string, body any) productView {
	t.Helper()
	r := h.do("POST", "/v1/products", key, body)
	wantOK(t, r)
	var p productView
	r.data(t, &p)
	return p
}

// getProductOK reads a product; anything but 200 fails the test.
func getProductOK(t *testing.T, h *harness, key, id string) productView {
	t.Helper()
	r := h.do("GET", "/v1/products/"+id, key, nil)
	wantOK(t, r)
	var p productView
	r.data(t, &p)
	return p
}

// wantValidation asserts a 400 validation_error whose message names field.
func wantValidation(t *testing.T, r *response, field string) {
	t.Helper()
	wantError(t, r, http.StatusBadRequest, "validation_error")
	if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, field) {
		t.Errorf("got message %q, want it to name the field %q", r.Body.Error.Message, field)
	}
}

// wantSameJSON compares got and want through their JSON encodings (map keys
// sorted), so that pointers compare by value and a failure prints readably.
func wantSameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, w)
	}
}

// metadataOf returns n keys k00..k(n-1) with string values.
func metadataOf(n int) map[string]string {
	md := make(map[string]string, n)
	for i := range n {
		md[fmt.Sprintf("k%02d", i)] = "v"
	}
	return md
}

func httpsImages(n int) []string {
	imgs := make([]string, n)
	for i := range imgs {
		imgs[i] = fmt.Sprintf("https://img.example/%d.png", i)
	}
	return imgs
}

// fullProductBody sets every field of a product create body.
func fullProductBody() map[string]any {
	return map[string]any{
		"name":                 "Mug",
		"description":          "Stoneware mug",
		"images":               []string{"https://img.example/mug.png"},
		"url":                  "https://shop.example/mug",
		"metadata":             map[string]string{"sku": "m-1", "colour": "blue"},
		"shippable":            true,
		"unit_label":           "mug",
		"statement_descriptor": "SHOP MUG",
		"tax_code":             "txcd_99999999",
		"price":                map[string]any{"amount": 1500, "currency": "usd", "tax_behavior": "inclusive"},
	}
}

func TestProductCreateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	price := func(kv ...any) map[string]any {
		p := map[string]any{"amount": 1000, "currency": "usd"}
		for i := 0; i+1 < len(kv); i += 2 {
			p[kv[i].(string)] = kv[i+1]
		}
		return p
	}
	longKey := strings.Repeat("k", 41)
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"name missing", map[string]any{"description": "x"}, "name"},
		{"name empty", map[string]any{"name": ""}, "name"},
		{"name null", `{"name": null}`, "name"},
		{"name number", map[string]any{"name": 5}, "name"},
		{"name array", map[string]any{"name": []string{"a"}}, "name"},
		{"images 9", map[string]any{"name": "P", "images": httpsImages(9)}, "images"},
		{"image http", map[string]any{"name": "P", "images": []string{"http://img.example/a.png"}}, "images"},
		{"image relative", map[string]any{"name": "P", "images": []string{"/img/a.png"}}, "images"},
		{"image https without host", map[string]any{"name": "P", "images": []string{"https://"}}, "images"},
		{"image https empty host with path", map[string]any{"name": "P", "images": []string{"https:///a.png"}}, "images"},
		{"second image bad", map[string]any{"name": "P", "images": []string{"https://img.example/a.png", "ftp://img.example/b.png"}}, "images"},
		{"images not an array", map[string]any{"name": "P", "images": "https://img.example/a.png"}, "images"},
		{"url http", map[string]any{"name": "P", "url": "http://shop.example/p"}, "url"},
		{"url relative", map[string]any{"name": "P", "url": "/p"}, "url"},
		{"url https without host", map[string]any{"name": "P", "url": "https://"}, "url"},
		{"url empty", map[string]any{"name": "P", "url": ""}, "url"},
		{"statement_descriptor 23", map[string]any{"name": "P", "statement_descriptor": strings.Repeat("A", 23)}, "statement_descriptor"},
		{"metadata 51 keys", map[string]any{"name": "P", "metadata": metadataOf(51)}, "metadata"},
		{"metadata number value", map[string]any{"name": "P", "metadata": map[string]any{"n": 1}}, "metadata"},
		{"metadata object value", map[string]any{"name": "P", "metadata": map[string]any{"n": map[string]string{}}}, "metadata"},
		{"metadata key 41", map[string]any{"name": "P", "metadata": map[string]string{longKey: "v"}}, "metadata"},
		{"metadata not an object", map[string]any{"name": "P", "metadata": []string{"a"}}, "metadata"},
		{"active string", map[string]any{"name": "P", "active": "false"}, "active"},
		{"price.amount 0", map[string]any{"name": "P", "price": price("amount", 0)}, "price.amount"},
		{"price.amount 100000000", map[string]any{"name": "P", "price": price("amount", 100000000)}, "price.amount"},
		{"price.amount -1", map[string]any{"name": "P", "price": price("amount", -1)}, "price.amount"},
		{"price.amount 1.5", map[string]any{"name": "P", "price": price("amount", 1.5)}, "price.amount"},
		{"price.amount string", map[string]any{"name": "P", "price": price("amount", "100")}, "price.amount"},
		{"price.amount missing", map[string]any{"name": "P", "price": map[string]any{"currency": "usd"}}, "price.amount"},
		{"price.currency us", map[string]any{"name": "P", "price": price("currency", "us")}, "price.currency"},
		{"price.currency usdd", map[string]any{"name": "P", "price": price("currency", "usdd")}, "price.currency"},
		{"price.currency u1d", map[string]any{"name": "P", "price": price("currency", "u1d")}, "price.currency"},
		{"price.currency xyz not ISO 4217", map[string]any{"name": "P", "price": price("currency", "xyz")}, "price.currency"},
		{"price.currency missing", map[string]any{"name": "P", "price": map[string]any{"amount": 100}}, "price.currency"},
		{"price.currency number", map[string]any{"name": "P", "price": price("currency", 840)}, "price.currency"},
		{"price.tax_behavior invalid", map[string]any{"name": "P", "price": price("tax_behavior", "sometimes")}, "price.tax_behavior"},
		{"price.tax_behavior upper case", map[string]any{"name": "P", "price": price("tax_behavior", "INCLUSIVE")}, "price.tax_behavior"},
		{"price extra property", map[string]any{"name": "P", "price": price("nickname", "std")}, "price.nickname"},
		{"price not an object", map[string]any{"name": "P", "price": 1000}, "price"},
		{"unknown top-level field", map[string]any{"name": "P", "colour": "red"}, "colour"},
		{"field in wrong case", map[string]any{"Name": "P"}, "Name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/products", key, c.body)
			wantValidation(t, r, c.field)
		})
	}
	t.Run("nothing was created", func(t *testing.T) {
		items, _ := listPage(t, h, key, "/v1/products", "limit=100")
		if len(items) != 0 {
			t.Errorf("got %d products after rejected creates, want 0", len(items))
		}
	})
}

// TestMetadataNullValue: metadata values are strings; a null is a wrong type,
// not an empty string that silently drops (or, on update, deletes) the key.
func TestMetadataNullValue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	prod := createProductOK(t, h, key, map[string]any{"name": "P", "metadata": map[string]string{"sku": "s-1"}})
	cus := createCustomerOK(t, h, key, map[string]any{"email": "n@example.com", "metadata": map[string]string{"sku": "s-1"}})
	for _, c := range []struct {
		name, method, path, body string
	}{
		{"product create", "POST", "/v1/products", `{"name": "P", "metadata": {"sku": null}}`},
		{"product update", "PUT", "/v1/products/" + prod.ID, `{"metadata": {"sku": null}}`},
		{"customer create", "POST", "/v1/customers", `{"email": "m@example.com", "metadata": {"sku": null}}`},
		{"customer update", "PUT", "/v1/customers/" + cus.ID, `{"metadata": {"sku": null}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantValidation(t, h.do(c.method, c.path, key, c.body), "metadata")
		})
	}
	wantSameJSON(t, "product after rejected update", getProductOK(t, h, key, prod.ID), prod)
	wantSameJSON(t, "customer after rejected update", getCustomerOK(t, h, key, cus.ID), cus)
}

func TestProductCreateAccepts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name  string
		body  map[string]any
		check func(t *testing.T, p productView)
	}{
		{"minimal: active, no default price", map[string]any{"name": "P"}, func(t *testing.T, p productView) {
			if !p.Active || p.DefaultPrice != nil {
				t.Errorf("got active %v, default_price %+v, want true and null", p.Active, p.DefaultPrice)
			}
		}},
		{"active false on create", map[string]any{"name": "P", "active": false}, func(t *testing.T, p productView) {
			if p.Active {
				t.Errorf("got active true, want false")
			}
		}},
		{"statement_descriptor 22", map[string]any{"name": "P", "statement_descriptor": strings.Repeat("A", 22)}, func(t *testing.T, p productView) {
			if p.StatementDescriptor == nil || *p.StatementDescriptor != strings.Repeat("A", 22) {
				t.Errorf("got statement_descriptor %v, want 22 A's", p.StatementDescriptor)
			}
		}},
		{"statement_descriptor 22 multi-byte characters", map[string]any{"name": "P", "statement_descriptor": strings.Repeat("é", 22)}, func(t *testing.T, p productView) {
			if p.StatementDescriptor == nil || *p.StatementDescriptor != strings.Repeat("é", 22) {
				t.Errorf("got statement_descriptor %v, want 22 é's", p.StatementDescriptor)
			}
		}},
		{"metadata 50 keys", map[string]any{"name": "P", "metadata": metadataOf(50)}, func(t *testing.T, p productView) {
			wantSameJSON(t, "metadata", p.Metadata, metadataOf(50))
		}},
		{"metadata key 40", map[string]any{"name": "P", "metadata": map[string]string{strings.Repeat("k", 40): "v"}}, func(t *testing.T, p productView) {
			wantSameJSON(t, "metadata", p.Metadata, map[string]string{strings.Repeat("k", 40): "v"})
		}},
		{"images 8", map[string]any{"name": "P", "images": httpsImages(8)}, func(t *testing.T, p productView) {
			wantSameJSON(t, "images", p.Images, httpsImages(8))
		}},
		{"price.amount 1", map[string]any{"name": "P", "price": map[string]any{"amount": 1, "currency": "usd"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.Amount != 1 {
				t.Errorf("got default_price %+v, want amount 1", p.DefaultPrice)
			}
		}},
		{"price.amount 99999999", map[string]any{"name": "P", "price": map[string]any{"amount": 99999999, "currency": "usd"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.Amount != 99999999 {
				t.Errorf("got default_price %+v, want amount 99999999", p.DefaultPrice)
			}
		}},
		{"price.currency EUR lower-cased", map[string]any{"name": "P", "price": map[string]any{"amount": 100, "currency": "EUR"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.Currency != "eur" {
				t.Errorf("got default_price %+v, want currency eur", p.DefaultPrice)
			}
		}},
		{"price.currency mixed case", map[string]any{"name": "P", "price": map[string]any{"amount": 100, "currency": "jPy"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.Currency != "jpy" {
				t.Errorf("got default_price %+v, want currency jpy", p.DefaultPrice)
			}
		}},
		{"price without tax_behavior", map[string]any{"name": "P", "price": map[string]any{"amount": 100, "currency": "usd"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.TaxBehavior != nil {
				t.Errorf("got default_price %+v, want tax_behavior null", p.DefaultPrice)
			}
		}},
		{"price.tax_behavior unspecified", map[string]any{"name": "P", "price": map[string]any{"amount": 100, "currency": "usd", "tax_behavior": "unspecified"}}, func(t *testing.T, p productView) {
			if p.DefaultPrice == nil || p.DefaultPrice.TaxBehavior == nil || *p.DefaultPrice.TaxBehavior != "unspecified" {
				t.Errorf("got default_price %+v, want tax_behavior unspecified", p.DefaultPrice)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := createProductOK(t, h, key, c.body)
			c.check(t, p)
			// What the create answered is what was stored.
			wantSameJSON(t, "GET after create", getProductOK(t, h, key, p.ID), p)
		})
	}
}

func TestProductCreateResponse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	before := time.Now().Unix()
	p := createProductOK(t, h, key, fullProductBody())
	after := time.Now().Unix()

	if !strings.HasPrefix(p.ID, "prod_") || len(p.ID) < len("prod_")+20 {
		t.Errorf("got id %q, want prod_ and at least 20 characters", p.ID)
	}
	if p.DefaultPrice == nil || !strings.HasPrefix(p.DefaultPrice.ID, "price_") {
		t.Fatalf("got default_price %+v, want a price_ id", p.DefaultPrice)
	}
	if p.Created < before || p.Created > after {
		t.Errorf("got created %d, want between %d and %d", p.Created, before, after)
	}
	want := productView{
		ID: p.ID, Name: "Mug", Description: ptr("Stoneware mug"), Active: true,
		Images: []string{"https://img.example/mug.png"}, URL: ptr("https://shop.example/mug"),
		Metadata:     map[string]string{"sku": "m-1", "colour": "blue"},
		DefaultPrice: &priceView{ID: p.DefaultPrice.ID, Amount: 1500, Currency: "usd", TaxBehavior: ptr("inclusive")},
		Shippable:    ptr(true), UnitLabel: ptr("mug"), StatementDescriptor: ptr("SHOP MUG"), TaxCode: ptr("txcd_99999999"),
		Livemode: false, Created: p.Created,
	}
	wantSameJSON(t, "created product", p, want)
	wantSameJSON(t, "GET product", getProductOK(t, h, key, p.ID), want)

	// Every optional field is present (null) on a minimal product.
	r := h.do("POST", "/v1/products", key, map[string]any{"name": "Bare"})
	wantOK(t, r)
	var raw map[string]json.RawMessage
	r.data(t, &raw)
	for field, want := range map[string]string{
		"description": "null", "url": "null", "default_price": "null", "shippable": "null", "unit_label": "null",
		"statement_descriptor": "null", "tax_code": "null", "images": "[]", "metadata": "{}", "active": "true", "livemode": "false",
	} {
		if got, ok := raw[field]; !ok || string(got) != want {
			t.Errorf("minimal product %s: got %s (present %v), want %s", field, got, ok, want)
		}
	}
}

func TestProductUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name     string
		body     any
		newPrice bool // the default price is replaced (new id)
		change   func(p *productView)
	}{
		{"empty body changes nothing", map[string]any{}, false, func(p *productView) {}},
		{"name only", map[string]any{"name": "Big mug"}, false, func(p *productView) { p.Name = "Big mug" }},
		{"description set", map[string]any{"description": "Porcelain"}, false, func(p *productView) { p.Description = ptr("Porcelain") }},
		{"description empty clears it", map[string]any{"description": ""}, false, func(p *productView) { p.Description = nil }},
		{"images replaced", map[string]any{"images": httpsImages(2)}, false, func(p *productView) { p.Images = httpsImages(2) }},
		{"images emptied", map[string]any{"images": []string{}}, false, func(p *productView) { p.Images = []string{} }},
		{"url replaced", map[string]any{"url": "https://shop.example/big-mug"}, false, func(p *productView) { p.URL = ptr("https://shop.example/big-mug") }},
		{"metadata merged, empty value removes key", map[string]any{"metadata": map[string]string{"colour": "", "size": "L"}}, false, func(p *productView) {
			p.Metadata = map[string]string{"sku": "m-1", "size": "L"}
		}},
		{"metadata value replaced", map[string]any{"metadata": map[string]string{"sku": "m-2"}}, false, func(p *productView) {
			p.Metadata = map[string]string{"sku": "m-2", "colour": "blue"}
		}},
		{"metadata removing an absent key", map[string]any{"metadata": map[string]string{"nope": ""}}, false, func(p *productView) {}},
		{"active false", map[string]any{"active": false}, false, func(p *productView) { p.Active = false }},
		{"shippable false", map[string]any{"shippable": false}, false, func(p *productView) { p.Shippable = ptr(false) }},
		{"statement_descriptor 22", map[string]any{"statement_descriptor": strings.Repeat("B", 22)}, false, func(p *productView) {
			p.StatementDescriptor = ptr(strings.Repeat("B", 22))
		}},
		{"unit_label and tax_code", map[string]any{"unit_label": "cup", "tax_code": "txcd_1"}, false, func(p *productView) {
			p.UnitLabel, p.TaxCode = ptr("cup"), ptr("txcd_1")
		}},
		{"price replaces default price", map[string]any{"price": map[string]any{"amount": 2500, "currency": "EUR"}}, true, func(p *productView) {
			p.DefaultPrice = &priceView{Amount: 2500, Currency: "eur"}
		}},
		{"same price again still makes a new price", map[string]any{"price": map[string]any{"amount": 1500, "currency": "usd", "tax_behavior": "inclusive"}}, true, func(p *productView) {}},
		{"name and price together", map[string]any{"name": "Cup", "price": map[string]any{"amount": 99999999, "currency": "gbp", "tax_behavior": "exclusive"}}, true, func(p *productView) {
			p.Name = "Cup"
			p.DefaultPrice = &priceView{Amount: 99999999, Currency: "gbp", TaxBehavior: ptr("exclusive")}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig := createProductOK(t, h, key, fullProductBody())
			want := orig
			want.Metadata = map[string]string{}
			for k, v := range orig.Metadata {
				want.Metadata[k] = v
			}
			dp := *orig.DefaultPrice
			want.DefaultPrice = &dp
			c.change(&want)

			r := h.do("PUT", "/v1/products/"+orig.ID, key, c.body)
			wantOK(t, r)
			var got productView
			r.data(t, &got)
			if c.newPrice {
				if got.DefaultPrice == nil || got.DefaultPrice.ID == orig.DefaultPrice.ID || !strings.HasPrefix(got.DefaultPrice.ID, "price_") {
					t.Fatalf("got default_price %+v, want a new price_ id (old %s)", got.DefaultPrice, orig.DefaultPrice.ID)
				}
				want.DefaultPrice.ID = got.DefaultPrice.ID
			}
			wantSameJSON(t, "PUT response", got, want)
			wantSameJSON(t, "GET after PUT", getProductOK(t, h, key, orig.ID), want)
		})
	}

	t.Run("price on a product without one", func(t *testing.T) {
		orig := createProductOK(t, h, key, map[string]any{"name": "Plain"})
		r := h.do("PUT", "/v1/products/"+orig.ID, key, map[string]any{"price": map[string]any{"amount": 300, "currency": "usd"}})
		wantOK(t, r)
		var got productView
		r.data(t, &got)
		if got.DefaultPrice == nil || got.DefaultPrice.Amount != 300 || got.DefaultPrice.Currency != "usd" {
			t.Errorf("got default_price %+v, want amount 300 usd", got.DefaultPrice)
		}
	})

	t.Run("unknown id", func(t *testing.T) {
		r := h.do("PUT", "/v1/products/prod_doesnotexist0000000000", key, map[string]any{"name": "X"})
		wantError(t, r, http.StatusNotFound, "product_not_found")
	})
}

func TestProductUpdateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	orig := createProductOK(t, h, key, fullProductBody()) // 2 metadata keys
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"name empty", map[string]any{"name": ""}, "name"},
		{"name number", map[string]any{"name": 5}, "name"},
		{"images 9", map[string]any{"images": httpsImages(9)}, "images"},
		{"image http", map[string]any{"images": []string{"http://img.example/a.png"}}, "images"},
		{"image https without host", map[string]any{"images": []string{"https://"}}, "images"},
		{"url http", map[string]any{"url": "http://shop.example/p"}, "url"},
		{"url relative", map[string]any{"url": "shop.example/p"}, "url"},
		{"statement_descriptor 23", map[string]any{"statement_descriptor": strings.Repeat("A", 23)}, "statement_descriptor"},
		{"metadata number value", map[string]any{"metadata": map[string]any{"n": 1}}, "metadata"},
		{"metadata key 41", map[string]any{"metadata": map[string]string{strings.Repeat("k", 41): "v"}}, "metadata"},
		{"metadata 51 keys in the body", map[string]any{"metadata": metadataOf(51)}, "metadata"},
		{"metadata merge would make 51 keys", map[string]any{"metadata": metadataOf(49)}, "metadata"},
		{"active string", map[string]any{"active": "yes"}, "active"},
		{"price.amount 0", map[string]any{"price": map[string]any{"amount": 0, "currency": "usd"}}, "price.amount"},
		{"price.amount 100000000", map[string]any{"price": map[string]any{"amount": 100000000, "currency": "usd"}}, "price.amount"},
		{"price.amount 1.5", map[string]any{"price": map[string]any{"amount": 1.5, "currency": "usd"}}, "price.amount"},
		{"price.currency xyz", map[string]any{"price": map[string]any{"amount": 100, "currency": "xyz"}}, "price.currency"},
		{"price.currency missing", map[string]any{"price": map[string]any{"amount": 100}}, "price.currency"},
		{"price.tax_behavior invalid", map[string]any{"price": map[string]any{"amount": 100, "currency": "usd", "tax_behavior": "no"}}, "price.tax_behavior"},
		{"price extra property", map[string]any{"price": map[string]any{"amount": 100, "currency": "usd", "interval": "month"}}, "price.interval"},
		{"unknown field", map[string]any{"colour": "red"}, "colour"},
		{"id is not updatable", map[string]any{"id": "prod_other"}, "id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("PUT", "/v1/products/"+orig.ID, key, c.body)
			wantValidation(t, r, c.field)
		})
	}
	t.Run("product unchanged", func(t *testing.T) {
		wantSameJSON(t, "product after rejected updates", getProductOK(t, h, key, orig.ID), orig)
	})
}

func TestProductDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	orig := createProductOK(t, h, key, fullProductBody())

	r := h.do("DELETE", "/v1/products/"+orig.ID, key, nil)
	wantOK(t, r)
	var deleted map[string]any
	r.data(t, &deleted)
	wantSameJSON(t, "DELETE data", deleted, map[string]any{"id": orig.ID, "deleted": true})

	want := orig
	want.Active = false
	wantSameJSON(t, "GET after DELETE", getProductOK(t, h, key, orig.ID), want)

	items, _ := listPage(t, h, key, "/v1/products", "limit=100")
	if len(items) != 1 || items[0].ID != orig.ID || items[0].Active {
		t.Errorf("got list %+v, want the archived product %s with active false", items, orig.ID)
	}
}

func TestProductNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	cus := h.do("POST", "/v1/customers", key, map[string]any{"email": "a@example.com"})
	wantOK(t, cus)
	var c struct{ ID string }
	cus.data(t, &c)
	for _, id := range []string{"prod_doesnotexist0000000000", "nope", c.ID, "prod_%27%20OR%201%3D1--"} {
		for _, m := range []struct {
			method string
			body   any
		}{{"GET", nil}, {"PUT", map[string]any{"name": "X"}}, {"DELETE", nil}} {
			t.Run(m.method+" "+id, func(t *testing.T) {
				r := h.do(m.method, "/v1/products/"+id, key, m.body)
				wantError(t, r, http.StatusNotFound, "product_not_found")
			})
		}
	}
}

// TestProductIsolation: a product belongs to one merchant and one mode.
func TestProductIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanPro)
	aTest, aLive := h.key(mA, false), h.key(mA, true)
	bTest, bLive := h.key(mB, false), h.key(mB, true)

	testProd := createProductOK(t, h, aTest, fullProductBody())
	liveProd := createProductOK(t, h, aLive, fullProductBody())
	if testProd.Livemode || !liveProd.Livemode {
		t.Fatalf("got livemode %v (test key) and %v (live key), want false and true", testProd.Livemode, liveProd.Livemode)
	}

	for _, c := range []struct {
		name, owner, other, id string
	}{
		{"test product with A's live key", aTest, aLive, testProd.ID},
		{"test product with B's test key", aTest, bTest, testProd.ID},
		{"test product with B's live key", aTest, bLive, testProd.ID},
		{"live product with A's test key", aLive, aTest, liveProd.ID},
		{"live product with B's live key", aLive, bLive, liveProd.ID},
		{"live product with B's test key", aLive, bTest, liveProd.ID},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := getProductOK(t, h, c.owner, c.id)
			wantError(t, h.do("GET", "/v1/products/"+c.id, c.other, nil), http.StatusNotFound, "product_not_found")
			wantError(t, h.do("PUT", "/v1/products/"+c.id, c.other, map[string]any{"name": "Stolen", "price": map[string]any{"amount": 1, "currency": "usd"}}),
				http.StatusNotFound, "product_not_found")
			wantError(t, h.do("DELETE", "/v1/products/"+c.id, c.other, nil), http.StatusNotFound, "product_not_found")
			// The attempts changed nothing for the owner.
			wantSameJSON(t, "owner's view", getProductOK(t, h, c.owner, c.id), before)
		})
	}

	t.Run("lists", func(t *testing.T) {
		for _, c := range []struct {
			name, key string
			want      []string
			livemode  bool
		}{
			{"A test", aTest, []string{testProd.ID}, false},
			{"A live", aLive, []string{liveProd.ID}, true},
			{"B test", bTest, nil, false},
			{"B live", bLive, nil, true},
		} {
			items, hasMore := listPage(t, h, c.key, "/v1/products", "limit=100")
			var ids []string
			for _, it := range items {
				ids = append(ids, it.ID)
				if it.Livemode != c.livemode {
					t.Errorf("%s list: %s has livemode %v, want %v", c.name, it.ID, it.Livemode, c.livemode)
				}
			}
			if strings.Join(ids, ",") != strings.Join(c.want, ",") || hasMore {
				t.Errorf("%s list: got %v (has_more %v), want %v", c.name, ids, hasMore, c.want)
			}
		}
	})
}
