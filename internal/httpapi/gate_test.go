package httpapi_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"paysvc/internal/processor/sandbox"
)

// Bodies of the gate tests: each is valid but for one string.
const (
	validCustomer = `{"email":"a@example.com"}`
	validProduct  = `{"name":"Mug"}`
	validIntent   = `{"amount":1000,"currency":"usd"}`
	validSession  = `{"line_items":[{"amount":100,"currency":"usd","name":"a","quantity":1}],"success_url":"https://a.example/s","cancel_url":"https://a.example/c"}`
)

// TestClientTextGate sends text that is not UTF-8, or holds NUL, in every
// place a client controls on every route family: a path id is not found
// (404 with the resource's code), a cursor is unknown (400), a header or a
// body string is a 400 naming it; never a 500, and nothing is created.
func TestClientTextGate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	key := s.key
	pi, dp := disputed(t, h, s, 5000)

	type c struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code, field              string
	}
	cases := []c{
		// Path ids: not found, with the resource's own code.
		{"product id NUL", "GET", "/v1/products/prod_%00", "", nil, 404, "product_not_found", ""},
		{"product id FF", "GET", "/v1/products/prod_%FF", "", nil, 404, "product_not_found", ""},
		{"product update id", "PUT", "/v1/products/prod_%00", validProduct, nil, 404, "product_not_found", ""},
		{"product delete id", "DELETE", "/v1/products/%C3%28", "", nil, 404, "product_not_found", ""},
		{"customer id", "GET", "/v1/customers/cus_%00", "", nil, 404, "customer_not_found", ""},
		{"customer update id", "PUT", "/v1/customers/cus_%FF", `{"name":"x"}`, nil, 404, "customer_not_found", ""},
		{"customer delete id", "DELETE", "/v1/customers/cus_%00", "", nil, 404, "customer_not_found", ""},
		{"session id", "GET", "/v1/payment-sessions/cs_%00", "", nil, 404, "session_not_found", ""},
		{"refund id", "GET", "/v1/refunds/re_%FF", "", nil, 404, "payment_not_found", ""},
		{"dispute id", "GET", "/v1/disputes/dp_%00", "", nil, 404, "payment_not_found", ""},
		{"evidence id", "POST", "/v1/disputes/dp_%FF/evidence", `{"evidence":{"uncategorized_text":"x"}}`, nil, 404, "payment_not_found", ""},
		{"webhook endpoint id", "DELETE", "/v1/webhook-endpoints/we_%00", "", nil, 404, "endpoint_not_found", ""},

		// Query parameters: an unknown cursor or a bad limit, named.
		{"products cursor", "GET", "/v1/products?starting_after=%FF", "", nil, 400, "validation_error", "starting_after"},
		{"customers cursor", "GET", "/v1/customers?starting_after=cus_%00", "", nil, 400, "validation_error", "starting_after"},
		{"test payments cursor", "GET", "/v1/test-payments?starting_after=pi_%FF", "", nil, 400, "validation_error", "starting_after"},
		{"disputes cursor", "GET", "/v1/disputes?starting_after=%00", "", nil, 400, "validation_error", "starting_after"},
		{"limit", "GET", "/v1/products?limit=1%00", "", nil, 400, "validation_error", "limit"},
		{"query name", "GET", "/v1/balance?%FF=1", "", nil, 200, "", ""},

		// Headers the service reads.
		{"idempotency key", "POST", "/v1/customers", validCustomer, []string{"Idempotency-Key", "k\x99"}, 400, "validation_error", "Idempotency-Key"},
		{"authorization", "GET", "/v1/products", "", []string{"Authorization", "Bearer svc_test_\xff"}, 401, "unauthorized", ""},

		// Every string of a body, keys included, on every resource.
		{"customer metadata value", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"k":"v\u0000"}}`, nil, 400, "validation_error", "metadata.k"},
		{"customer metadata key", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"k\u0000":"v"}}`, nil, 400, "validation_error", "metadata"},
		{"customer name raw FF", "POST", "/v1/customers", "{\"email\":\"a@example.com\",\"name\":\"\xff\"}", nil, 400, "validation_error", "name"},
		{"customer name lone surrogate", "POST", "/v1/customers", `{"email":"a@example.com","name":"\ud800"}`, nil, 400, "validation_error", "name"},
		{"customer update", "PUT", "/v1/customers/cus_x", `{"phone":"\u0000"}`, nil, 400, "validation_error", "phone"},
		{"product name", "POST", "/v1/products", `{"name":"a\u0000b"}`, nil, 400, "validation_error", "name"},
		{"product metadata", "PUT", "/v1/products/prod_x", `{"metadata":{"k":"\u0000"}}`, nil, 400, "validation_error", "metadata.k"},
		{"product image", "POST", "/v1/products", `{"name":"a","images":["https://a.example/\u0000"]}`, nil, 400, "validation_error", "images[0]"},
		{"product price currency", "POST", "/v1/products", `{"name":"a","price":{"amount":1,"currency":"us\u0000"}}`, nil, 400, "validation_error", "price.currency"},
		{"unknown key with NUL", "POST", "/v1/products", `{"name":"a","x\u0000":1}`, nil, 400, "validation_error", ""},
		{"session price id", "POST", "/v1/payment-sessions", `{"line_items":[{"price_id":"price_\u0000","quantity":1}],"success_url":"https://a.example/s","cancel_url":"https://a.example/c"}`, nil, 400, "validation_error", "line_items[0].price_id"},
		{"session customer id", "POST", "/v1/payment-sessions", strings.Replace(validSession, `{"line_items"`, `{"customer_id":"cus_\u0000","line_items"`, 1), nil, 400, "validation_error", "customer_id"},
		{"session metadata", "POST", "/v1/payment-sessions", strings.Replace(validSession, `{"line_items"`, `{"metadata":{"k":"\u0000"},"line_items"`, 1), nil, 400, "validation_error", "metadata.k"},
		{"session success url", "POST", "/v1/payment-sessions", strings.Replace(validSession, `https://a.example/s`, `https://a.example/\u0000`, 1), nil, 400, "validation_error", "success_url"},
		{"intent description", "POST", "/v1/payment-intents", `{"amount":1000,"currency":"usd","description":"\u0000"}`, nil, 400, "validation_error", "description"},
		{"intent metadata", "POST", "/v1/payment-intents", `{"amount":1000,"currency":"usd","metadata":{"k":"\u0000"}}`, nil, 400, "validation_error", "metadata.k"},
		{"refund payment intent", "POST", "/v1/refunds", `{"payment_intent":"pi_\u0000"}`, nil, 400, "validation_error", "payment_intent"},
		{"refund session id", "POST", "/v1/refunds", "{\"session_id\":\"cs_\xff\"}", nil, 400, "validation_error", "session_id"},
		{"refund reason", "POST", "/v1/refunds", `{"payment_intent":"` + pi + `","reason":"\u0000"}`, nil, 400, "validation_error", "reason"},
		{"evidence value", "POST", "/v1/disputes/" + dp + "/evidence", `{"evidence":{"uncategorized_text":"\u0000"}}`, nil, 400, "validation_error", "evidence.uncategorized_text"},
		{"evidence key", "POST", "/v1/disputes/" + dp + "/evidence", `{"evidence":{"\u0000":"x"}}`, nil, 400, "validation_error", "evidence"},
		{"webhook url", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/\u0000"}`, nil, 400, "validation_error", "url"},
		{"webhook event", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","events":["\u0000"]}`, nil, 400, "validation_error", "events[0]"},
		{"webhook description", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","description":"\u0000"}`, nil, 400, "validation_error", "description"},
		{"raw NUL byte", "POST", "/v1/customers", "{\"email\":\"a@example.com\",\"name\":\"\x00\"}", nil, 400, "validation_error", "name"},
		{"not JSON, not text", "POST", "/v1/customers", "\xff\xfe", nil, 400, "validation_error", ""},
		{"escaped backslash is text", "POST", "/v1/customers", `{"email":"a@example.com","name":"\\u0000"}`, nil, 200, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := h.forInput(t)
			before := countRows(t, h, "customers", s.id) + countRows(t, h, "products", s.id) + countRows(t, h, "checkout_sessions", s.id)
			var body any
			if tc.body != "" {
				body = tc.body
			}
			r := h.do(tc.method, tc.path, key, body, tc.headers...)
			if r.Status != tc.status || r.code() != tc.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Raw, tc.status, tc.code)
			}
			if msg := errMessage(r); !strings.Contains(msg, tc.field) {
				t.Errorf("message %q does not name %s", msg, tc.field)
			}
			after := countRows(t, h, "customers", s.id) + countRows(t, h, "products", s.id) + countRows(t, h, "checkout_sessions", s.id)
			if tc.status != 200 && after != before {
				t.Errorf("refused request created %d rows", after-before)
			}
		})
	}
}

func errMessage(r *response) string {
	if r.Body.Error == nil {
		return ""
	}
	return r.Body.Error.Message
}

// page sends a request to a public page and returns its status, media type
// and body.
func (h *harness) page(method, path, contentType, body string) (int, string, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, strings.Split(resp.Header.Get("Content-Type"), ";")[0], string(raw)
}

// TestClientTextGatePublicPages does the same on the unauthenticated pages:
// the hosted checkout page and form, and the sandbox's confirm endpoint.
// They answer in their own format (a page, or the confirm endpoint's JSON).
func TestClientTextGatePublicPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	open := createSessionOK(t, h, s.key, sessionBody(oneItem(), "collect_shipping_address", true, "billing_address_collection", "required"))
	iv := createIntentOK(t, h, s.key, map[string]any{"amount": 1000, "currency": "usd"})

	form := func(kv ...string) string {
		f := cardForm(sandbox.CardSuccess, "buyer@example.com", "Buyer")
		for k, v := range map[string]string{"ship_line1": "1 Main St", "ship_city": "Town", "ship_postal_code": "12345", "ship_country": "US",
			"bill_line1": "1 Main St", "bill_city": "Town", "bill_postal_code": "12345", "bill_country": "US"} {
			f.Set(k, v)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f.Set(kv[i], kv[i+1])
		}
		return f.Encode()
	}
	confirmBody := func(pk, secret, card string) string {
		return `{"publishable_key":"` + pk + `","client_secret":"` + secret + `","card_number":"` + card + `"}`
	}
	const formType = "application/x-www-form-urlencoded"
	long := strings.Repeat("é", 201)

	cases := []struct {
		name, method, path, contentType, body string
		status                                int
		media, want                           string
	}{
		{"checkout page FF", "GET", "/checkout/%FF", "", "", 404, "text/html", "Checkout not found"},
		{"checkout page NUL", "GET", "/checkout/cs_%00", "", "", 404, "text/html", "Checkout not found"},
		{"checkout page query", "GET", "/checkout/" + open.ID + "?x=%00", "", "", 200, "text/html", "Pay"},
		{"checkout form to FF", "POST", "/checkout/%FF", formType, form(), 404, "text/html", "Checkout not found"},
		{"checkout form name NUL", "POST", "/checkout/" + open.ID, formType, form("name", "Bu\x00yer"), 400, "text/html", "name"},
		{"checkout form city FF", "POST", "/checkout/" + open.ID, formType, form("ship_city", "\xff"), 400, "text/html", "ship_city"},
		{"checkout form field name NUL", "POST", "/checkout/" + open.ID, formType, form("x\x00", "1"), 400, "text/html", "Form field names"},
		{"checkout form JSON-looking", "POST", "/checkout/" + open.ID, formType, `{"a":"&name=%00"}`, 400, "text/html", "Enter the name on the card."},
		{"checkout form name too long", "POST", "/checkout/" + open.ID, formType, form("name", long), 400, "text/html", "Use at most 200 characters."},
		{"checkout form address too long", "POST", "/checkout/" + open.ID, formType, form("ship_line2", long), 400, "text/html", "Use at most 200 characters."},
		{"checkout form postal code too long", "POST", "/checkout/" + open.ID, formType, form("bill_postal_code", strings.Repeat("9", 21)), 400, "text/html", "Use at most 20 characters."},
		{"confirm id NUL", "POST", "/sandbox/v1/payment_intents/pi_%00/confirm", "application/json", confirmBody(iv.PublishableKey, iv.ClientSecret, sandbox.CardSuccess), 401, "application/json", "unauthorized"},
		{"confirm id FF", "POST", "/sandbox/v1/payment_intents/pi_%FF/confirm", "application/json", confirmBody(iv.PublishableKey, iv.ClientSecret, sandbox.CardSuccess), 401, "application/json", "unauthorized"},
		{"confirm card NUL", "POST", "/sandbox/v1/payment_intents/" + iv.PaymentIntentID + "/confirm", "application/json", confirmBody(iv.PublishableKey, iv.ClientSecret, `4242\u0000`), 400, "application/json", "card_number"},
		{"confirm key FF", "POST", "/sandbox/v1/payment_intents/" + iv.PaymentIntentID + "/confirm", "application/json", confirmBody("pk_\xff", iv.ClientSecret, sandbox.CardSuccess), 400, "application/json", "publishable_key"},
		{"confirm preflight", "OPTIONS", "/sandbox/v1/payment_intents/pi_%00/confirm", "", "", 204, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := h.forInput(t)
			status, media, body := h.page(tc.method, tc.path, tc.contentType, tc.body)
			if status != tc.status || media != tc.media || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %s %q, want %d %s containing %q", status, media, body, tc.status, tc.media, tc.want)
			}
		})
	}
	// Nothing was paid.
	if got := getSessionOK(t, h, s.key, open.ID); got.PaymentStatus != "unpaid" {
		t.Errorf("session after refused forms: got payment_status %s, want unpaid", got.PaymentStatus)
	}
}

// TestIdempotencyKeyLimits: the key's limit counts characters, and an
// empty key is an error, not "no key".
func TestIdempotencyKeyLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	for _, tc := range []struct {
		name, key string
		status    int
	}{
		{"128 two-byte characters", strings.Repeat("é", 128), 200},
		{"255 two-byte characters", strings.Repeat("é", 255), 200},
		{"256 characters", strings.Repeat("k", 256), 400},
		{"empty", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.forInput(t)
			before := countRows(t, h, "customers", s.id)
			r := h.do("POST", "/v1/customers", s.key, validCustomer, "Idempotency-Key", tc.key)
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Raw, tc.status)
			}
			if tc.status == 400 {
				wantError(t, r, 400, "validation_error")
				if !strings.Contains(errMessage(r), "Idempotency-Key") {
					t.Errorf("message %q does not name Idempotency-Key", errMessage(r))
				}
				if got := countRows(t, h, "customers", s.id); got != before {
					t.Errorf("refused request created %d customers", got-before)
				}
				return
			}
			again := h.do("POST", "/v1/customers", s.key, validCustomer, "Idempotency-Key", tc.key)
			if again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body.Data, r.Body.Data) {
				t.Errorf("repeat: got %s (replayed %q), want the first response replayed", again.Raw, again.Header.Get("Idempotent-Replayed"))
			}
		})
	}
	// On a GET the header means nothing, so an empty one is no error.
	wantOK(t, h.do("GET", "/v1/customers", s.key, nil, "Idempotency-Key", ""))
}

// TestBearerSchemeCaseInsensitive: HTTP auth scheme names are
// case-insensitive.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, auth := range []string{"Bearer " + key, "bearer " + key, "BEARER " + key, "bEaReR  " + key} {
		wantOK(t, h.withAuth("GET", "/v1/products", auth, ""))
	}
	for _, auth := range []string{"Basic " + key, key, "Bearer", "Bearer ", "Bearer" + key} {
		wantError(t, h.withAuth("GET", "/v1/products", auth, ""), http.StatusUnauthorized, "unauthorized")
	}
}

// TestNullIsNotOmitted: null for a field is refused naming the field, not
// taken as "leave it out" (which kept the old value on an update).
func TestNullIsNotOmitted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	prod := createProductOK(t, h, s.key, map[string]any{"name": "Mug", "description": "Blue"})
	cus := createCustomerOK(t, h, s.key, map[string]any{"email": "a@example.com", "name": "Ann"})
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"product name", "PUT", "/v1/products/" + prod.ID, `{"name":null}`, "name"},
		{"product active", "PUT", "/v1/products/" + prod.ID, `{"active":null}`, "active"},
		{"product metadata", "PUT", "/v1/products/" + prod.ID, `{"metadata":null}`, "metadata"},
		{"product description", "PUT", "/v1/products/" + prod.ID, `{"description":null}`, "description"},
		{"product price amount", "POST", "/v1/products", `{"name":"a","price":{"amount":null,"currency":"usd"}}`, "price.amount"},
		{"product images item", "POST", "/v1/products", `{"name":"a","images":["https://a.example/x.png",null]}`, "images[1]"},
		{"customer name", "PUT", "/v1/customers/" + cus.ID, `{"name":null}`, "name"},
		{"customer metadata", "POST", "/v1/customers", `{"email":"b@example.com","metadata":null}`, "metadata"},
		{"session customer", "POST", "/v1/payment-sessions", strings.Replace(validSession, `{"line_items"`, `{"customer_id":null,"line_items"`, 1), "customer_id"},
		{"refund amount", "POST", "/v1/refunds", `{"payment_intent":"pi_x","amount":null}`, "amount"},
		{"webhook events", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","events":null}`, "events"},
		{"evidence submit", "POST", "/v1/disputes/dp_x/evidence", `{"submit":null}`, "submit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.forInput(t)
			r := h.do(tc.method, tc.path, s.key, tc.body)
			wantError(t, r, 400, "validation_error")
			if msg := errMessage(r); !strings.HasPrefix(msg, tc.field+" ") || !strings.Contains(msg, "null") {
				t.Errorf("message %q does not say that %s must not be null", msg, tc.field)
			}
		})
	}
	// Unchanged, and "" still clears an optional text field.
	got := h.do("GET", "/v1/products/"+prod.ID, s.key, nil)
	var p productView
	got.data(t, &p)
	if p.Name != "Mug" || p.Description == nil || *p.Description != "Blue" || !p.Active {
		t.Errorf("product after refused updates: %s", got.Body.Data)
	}
	cleared := h.do("PUT", "/v1/products/"+prod.ID, s.key, `{"description":""}`)
	cleared.data(t, &p)
	if p.Description != nil {
		t.Errorf(`description after "": got %q, want null`, *p.Description)
	}
}

// TestEmailIDNTopLevelDomain: an IDN top-level domain in its ASCII form is
// an email address.
func TestEmailIDNTopLevelDomain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, email := range []string{"a@example.xn--p1ai", "a@xn--e1afmkfd.xn--p1ai", "A@EXAMPLE.XN--P1AI"} {
		cu := createCustomerOK(t, h, key, map[string]any{"email": email})
		if cu.Email == nil || *cu.Email != email {
			t.Errorf("email %s: got %v", email, cu.Email)
		}
	}
	for _, email := range []string{"a@example.xn--", "a@example.xn-p1ai", "a@example.p1"} {
		r := h.do("POST", "/v1/customers", key, map[string]any{"email": email})
		wantError(t, r, 400, "validation_error")
	}
}

// TestLimitsCountCharacters: limits said in characters count characters,
// not bytes.
func TestLimitsCountCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	s := newShop(h)
	_, dp := disputed(t, h, s, 5000)
	for _, tc := range []struct {
		name, method, path string
		body               func(n int) any
		max                int
		field              string
	}{
		{"phone", "POST", "/v1/customers", func(n int) any {
			return map[string]any{"email": "a@example.com", "phone": strings.Repeat("é", n)}
		}, 40, "phone"},
		{"metadata value", "POST", "/v1/customers", func(n int) any {
			return map[string]any{"email": "a@example.com", "metadata": map[string]string{"k": strings.Repeat("é", n)}}
		}, 500, "metadata.k"},
		{"statement descriptor", "POST", "/v1/products", func(n int) any {
			return map[string]any{"name": "a", "statement_descriptor": strings.Repeat("é", n)}
		}, 22, "statement_descriptor"},
		{"evidence", "POST", "/v1/disputes/" + dp + "/evidence", func(n int) any {
			return map[string]any{"evidence": map[string]string{"customer_name": strings.Repeat("é", n)}}
		}, 20000, "evidence.customer_name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.forInput(t)
			wantOK(t, h.do(tc.method, tc.path, s.key, tc.body(tc.max)))
			r := h.do(tc.method, tc.path, s.key, tc.body(tc.max+1))
			wantError(t, r, 400, "validation_error")
			if msg := errMessage(r); !strings.HasPrefix(msg, tc.field+" ") || !strings.Contains(msg, "characters") {
				t.Errorf("message %q does not name %s and its limit in characters", msg, tc.field)
			}
		})
	}
}
