package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// --- views: the API's shapes as a client reads them ----------------------

type lineItemView struct {
	PriceID     *string `json:"price_id"`
	Name        string  `json:"name"`
	UnitAmount  int64   `json:"unit_amount"`
	Currency    string  `json:"currency"`
	Quantity    int64   `json:"quantity"`
	AmountTotal int64   `json:"amount_total"`
}

type shippingOptionView struct {
	Label  string `json:"label"`
	Amount int64  `json:"amount"`
}

type addressView struct {
	Name       string `json:"name,omitempty"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2,omitempty"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	State      string `json:"state,omitempty"`
	Country    string `json:"country"`
}

type shippingDetailsView struct {
	Address addressView        `json:"address"`
	Option  shippingOptionView `json:"option"`
}

// sessionView is a payment session as the API returns it.
type sessionView struct {
	ID              string               `json:"id"`
	URL             *string              `json:"url"`
	Status          string               `json:"status"`
	PaymentStatus   string               `json:"payment_status"`
	Mode            string               `json:"mode"`
	AmountSubtotal  int64                `json:"amount_subtotal"`
	AmountTotal     int64                `json:"amount_total"`
	Currency        string               `json:"currency"`
	Customer        *string              `json:"customer"`
	CustomerEmail   *string              `json:"customer_email"`
	PaymentIntent   *string              `json:"payment_intent"`
	Subscription    *string              `json:"subscription"`
	LineItems       []lineItemView       `json:"line_items"`
	PassFees        bool                 `json:"pass_fees_to_customer"`
	ShippingOptions []shippingOptionView `json:"shipping_options"`
	ShippingDetails *shippingDetailsView `json:"shipping_details"`
	BillingDetails  *addressView         `json:"billing_details"`
	SuccessURL      string               `json:"success_url"`
	CancelURL       string               `json:"cancel_url"`
	Metadata        map[string]string    `json:"metadata"`
	ExpiresAt       int64                `json:"expires_at"`
	Livemode        bool                 `json:"livemode"`
	Created         int64                `json:"created"`
}

// intentView is the create response of POST /v1/payment-intents.
type intentView struct {
	ClientSecret     string `json:"client_secret"`
	PaymentIntentID  string `json:"payment_intent_id"`
	PublishableKey   string `json:"publishable_key"`
	ProcessorAccount string `json:"processor_account"`
	Amount           int64  `json:"amount"`
	Currency         string `json:"currency"`
}

// paymentView is a listed test payment.
type paymentView struct {
	ID              string            `json:"id"`
	Amount          int64             `json:"amount"`
	AmountReceived  int64             `json:"amount_received"`
	Currency        string            `json:"currency"`
	Status          string            `json:"status"`
	Customer        *string           `json:"customer"`
	CustomerName    *string           `json:"customer_name"`
	CustomerEmail   *string           `json:"customer_email"`
	Description     *string           `json:"description"`
	PaymentSession  *string           `json:"payment_session"`
	FeeAmount       int64             `json:"fee_amount"`
	LastDeclineCode *string           `json:"last_decline_code"`
	Metadata        map[string]string `json:"metadata"`
	Created         int64             `json:"created"`
	Livemode        bool              `json:"livemode"`
}

// eventView is a stored event row as delivery would send it.
type eventView struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Created  int64  `json:"created"`
	Livemode bool   `json:"livemode"`
	Data     struct {
		ID             string            `json:"id"`
		Status         string            `json:"status"`
		PaymentStatus  string            `json:"payment_status"`
		PaymentIntent  *string           `json:"payment_intent"`
		PaymentSession *string           `json:"payment_session"`
		Amount         int64             `json:"amount"`
		AmountTotal    int64             `json:"amount_total"`
		Metadata       map[string]string `json:"metadata"`
		LastDecline    *string           `json:"last_decline_code"`
	} `json:"data"`
	Raw json.RawMessage `json:"-"`
}

// --- helpers ----------------------------------------------------------------

const (
	successURL = "https://shop.example/thanks?session={CHECKOUT_SESSION_ID}"
	cancelURL  = "https://shop.example/cart"
)

// customItem is a line item of the amount + currency + name form.
func customItem(amount int64, currency, name string, qty int64) map[string]any {
	return map[string]any{"amount": amount, "currency": currency, "name": name, "quantity": qty}
}

// priceItem is a line item of the price_id form.
func priceItem(priceID string, qty int64) map[string]any {
	return map[string]any{"price_id": priceID, "quantity": qty}
}

// sessionBody is a valid create body with the given line items, changed by kv pairs
// (a nil value deletes the key).
func sessionBody(items []map[string]any, kv ...any) map[string]any {
	b := map[string]any{"line_items": items, "success_url": successURL, "cancel_url": cancelURL}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(b, kv[i].(string))
			continue
		}
		b[kv[i].(string)] = kv[i+1]
	}
	return b
}

func oneItem() []map[string]any { return []map[string]any{customItem(1500, "usd", "Mug", 2)} }

func createSessionOK(t *testing.T, h *harness, key string, body any) sessionView {
	t.Helper()
	r := h.do("POST", "/v1/payment-sessions", key, body)
	wantOK(t, r)
	var s sessionView
	r.data(t, &s)
	return s
}

func getSessionOK(t *testing.T, h *harness, key, id string) sessionView {
	t.Helper()
	r := h.do("GET", "/v1/payment-sessions/"+id, key, nil)
	wantOK(t, r)
	var s sessionView
	r.data(t, &s)
	return s
}

func createIntentOK(t *testing.T, h *harness, key string, body any) intentView {
	t.Helper()
	r := h.do("POST", "/v1/payment-intents", key, body)
	wantOK(t, r)
	var iv intentView
	r.data(t, &iv)
	return iv
}

// priceOf creates a product with a default price and returns the price id.
func priceOf(t *testing.T, h *harness, key, name string, amount int64, currency string) string {
	t.Helper()
	p := createProductOK(t, h, key, map[string]any{"name": name, "price": map[string]any{"amount": amount, "currency": currency}})
	if p.DefaultPrice == nil {
		t.Fatalf("product %s has no default price", p.ID)
	}
	return p.DefaultPrice.ID
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       30 * time.Second,
}

// cardForm is the hosted page's payment form for card, with a valid expiry.
func cardForm(card, email, name string) url.Values {
	return url.Values{
		"card_number": {card},
		"exp_month":   {"12"},
		"exp_year":    {strconv.Itoa(time.Now().Year() + 1)},
		"cvc":         {"123"},
		"email":       {email},
		"name":        {name},
	}
}

type pageResult struct {
	Status   int
	Location string
	Body     string
}

// postCheckout submits the hosted page's form; safe to call from any goroutine.
func postCheckout(h *harness, id string, form url.Values) (pageResult, error) {
	resp, err := noRedirect.Post(h.url+"/checkout/"+id, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	if err != nil {
		return pageResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return pageResult{}, err
	}
	return pageResult{Status: resp.StatusCode, Location: resp.Header.Get("Location"), Body: string(b)}, nil
}

func payCheckout(t *testing.T, h *harness, id string, form url.Values) pageResult {
	t.Helper()
	r, err := postCheckout(h, id, form)
	if err != nil {
		t.Fatalf("POST /checkout/%s: %v", id, err)
	}
	return r
}

// payOK pays a session with the success card and wants the 303 to success_url.
func payOK(t *testing.T, h *harness, s sessionView, email, name string) {
	t.Helper()
	r := payCheckout(t, h, s.ID, cardForm(sandbox.CardSuccess, email, name))
	want := strings.ReplaceAll(s.SuccessURL, "{CHECKOUT_SESSION_ID}", s.ID)
	if r.Status != http.StatusSeeOther || r.Location != want {
		t.Fatalf("pay %s: got %d Location %q, want 303 to %q", s.ID, r.Status, r.Location, want)
	}
}

type confirmResult struct {
	Status int
	Body   struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  *struct {
			Code        string `json:"code"`
			DeclineCode string `json:"decline_code"`
			Message     string `json:"message"`
		} `json:"error"`
	}
	Raw string
}

// confirm calls the sandbox's confirm endpoint as the JS client does.
func confirm(t *testing.T, h *harness, id, pk, secret, card string) confirmResult {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"publishable_key": pk, "client_secret": secret, "card_number": card})
	resp, err := http.Post(h.url+"/sandbox/v1/payment_intents/"+id+"/confirm", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := confirmResult{Status: resp.StatusCode, Raw: string(raw)}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("confirm %s: body is not JSON: %q", id, raw)
	}
	return r
}

// events returns the scope's event rows, oldest first.
func events(t *testing.T, h *harness, merchantID string, live bool) []eventView {
	t.Helper()
	rows, err := h.store.Events(context.Background(), payments.Scope{MerchantID: merchantID, Live: live})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]eventView, len(rows))
	for i, r := range rows {
		if err := json.Unmarshal(r.Payload, &out[i]); err != nil {
			t.Fatalf("event %s: %v: %s", r.ID, err, r.Payload)
		}
		out[i].Raw = r.Payload
		if out[i].ID != r.ID || out[i].Type != r.Type {
			t.Errorf("event row %s/%s has payload id %s type %s", r.ID, r.Type, out[i].ID, out[i].Type)
		}
	}
	return out
}

func eventTypes(evs []eventView) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func countType(evs []eventView, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// listPayments GETs one page of /v1/test-payments.
func listPayments(t *testing.T, h *harness, key, query string) ([]paymentView, bool) {
	t.Helper()
	path := "/v1/test-payments"
	if query != "" {
		path += "?" + query
	}
	r := h.do("GET", path, key, nil)
	wantOK(t, r)
	var page struct {
		Data    []paymentView `json:"data"`
		HasMore *bool         `json:"has_more"`
	}
	r.data(t, &page)
	if page.Data == nil || page.HasMore == nil {
		t.Fatalf("GET %s: got %s, want data (array) and has_more", path, r.Body.Data)
	}
	return page.Data, *page.HasMore
}

func paymentIDs(ps []paymentView) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func sessionCount(t *testing.T, h *harness, merchantID string) int {
	t.Helper()
	var n int
	if err := h.db.Get(&n, `SELECT count(*) FROM checkout_sessions WHERE merchant_id = $1`, merchantID); err != nil {
		t.Fatal(err)
	}
	return n
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// --- payment sessions: creation ------------------------------------------------

func TestSessionLineItemForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	mugPrice := priceOf(t, h, key, "Mug", 1500, "usd")
	capPrice := priceOf(t, h, key, "Cap", 999, "USD")

	for _, c := range []struct {
		name         string
		items        []map[string]any
		wantItems    []lineItemView
		wantCurrency string
		wantTotal    int64
	}{
		{
			"price_id form", []map[string]any{priceItem(mugPrice, 3)},
			[]lineItemView{{PriceID: &mugPrice, Name: "Mug", UnitAmount: 1500, Currency: "usd", Quantity: 3, AmountTotal: 4500}},
			"usd", 4500,
		},
		{
			"custom form, currency lower-cased", []map[string]any{customItem(2500, "EUR", "Consulting hour", 2)},
			[]lineItemView{{Name: "Consulting hour", UnitAmount: 2500, Currency: "eur", Quantity: 2, AmountTotal: 5000}},
			"eur", 5000,
		},
		{
			"both forms in one session", []map[string]any{priceItem(mugPrice, 1), customItem(700, "usd", "Gift wrap", 1), priceItem(capPrice, 1000)},
			[]lineItemView{
				{PriceID: &mugPrice, Name: "Mug", UnitAmount: 1500, Currency: "usd", Quantity: 1, AmountTotal: 1500},
				{Name: "Gift wrap", UnitAmount: 700, Currency: "usd", Quantity: 1, AmountTotal: 700},
				{PriceID: &capPrice, Name: "Cap", UnitAmount: 999, Currency: "usd", Quantity: 1000, AmountTotal: 999000},
			},
			"usd", 1500 + 700 + 999000,
		},
		{
			"bounds: amount 1 and 99999999, quantity 1 and 1000", []map[string]any{customItem(1, "usd", "a", 1000), customItem(99999999, "usd", "b", 1)},
			[]lineItemView{
				{Name: "a", UnitAmount: 1, Currency: "usd", Quantity: 1000, AmountTotal: 1000},
				{Name: "b", UnitAmount: 99999999, Currency: "usd", Quantity: 1, AmountTotal: 99999999},
			},
			"usd", 1000 + 99999999,
		},
		{
			"zero-decimal currency", []map[string]any{customItem(500, "jpy", "Tea", 3)},
			[]lineItemView{{Name: "Tea", UnitAmount: 500, Currency: "jpy", Quantity: 3, AmountTotal: 1500}},
			"jpy", 1500,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := time.Now().Unix()
			s := createSessionOK(t, h, key, sessionBody(c.items))
			if !strings.HasPrefix(s.ID, "cs_") || len(s.ID) < len("cs_")+20 {
				t.Errorf("got id %q, want cs_ and at least 20 characters", s.ID)
			}
			if s.Created < before || s.Created > time.Now().Unix() {
				t.Errorf("got created %d, want about %d", s.Created, before)
			}
			want := sessionView{
				ID: s.ID, URL: ptr(h.url + "/checkout/" + s.ID), Status: "open", PaymentStatus: "unpaid", Mode: "payment",
				AmountSubtotal: c.wantTotal, AmountTotal: c.wantTotal, Currency: c.wantCurrency,
				LineItems: c.wantItems, ShippingOptions: []shippingOptionView{},
				SuccessURL: successURL, CancelURL: cancelURL, Metadata: map[string]string{},
				ExpiresAt: s.ExpiresAt, Livemode: false, Created: s.Created,
			}
			wantSameJSON(t, "created session", s, want)
			if d := s.ExpiresAt - s.Created; d < 24*3600-2 || d > 24*3600+2 {
				t.Errorf("got expires_at - created = %ds, want 24h (the harness TTL)", d)
			}
			wantSameJSON(t, "GET session", getSessionOK(t, h, key, s.ID), want)
		})
	}
}

func TestSessionCreateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	price := priceOf(t, h, key, "Mug", 1500, "usd")
	item := func(kv ...any) []map[string]any {
		it := customItem(1000, "usd", "Thing", 1)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(it, kv[i].(string))
				continue
			}
			it[kv[i].(string)] = kv[i+1]
		}
		return []map[string]any{it}
	}
	opt := func(label any, amount any) []map[string]any {
		o := map[string]any{}
		if label != nil {
			o["label"] = label
		}
		if amount != nil {
			o["amount"] = amount
		}
		return []map[string]any{o}
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		// Line-item forms.
		{"line item with neither form", sessionBody([]map[string]any{{"quantity": 1}}), "line_items[0]"},
		{"line item with both forms", sessionBody([]map[string]any{{"price_id": price, "amount": 1000, "currency": "usd", "name": "X", "quantity": 1}}), "line_items[0]"},
		{"price_id with name", sessionBody([]map[string]any{{"price_id": price, "name": "X", "quantity": 1}}), "line_items[0]"},
		{"price_id with amount", sessionBody([]map[string]any{{"price_id": price, "amount": 1000, "quantity": 1}}), "line_items[0]"},
		{"second line item with neither", sessionBody([]map[string]any{customItem(100, "usd", "a", 1), {"quantity": 1}}), "line_items[1]"},
		{"price_id not a price id", sessionBody([]map[string]any{priceItem("prod_abc", 1)}), "line_items[0].price_id"},
		{"price_id number", sessionBody([]map[string]any{{"price_id": 5, "quantity": 1}}), "line_items[0].price_id"},
		{"custom without name", sessionBody(item("name", nil)), "line_items[0].name"},
		{"custom with empty name", sessionBody(item("name", "")), "line_items[0].name"},
		{"custom without currency", sessionBody(item("currency", nil)), "line_items[0].currency"},
		{"custom without amount", sessionBody(item("amount", nil)), "line_items[0].amount"},
		{"name alone", sessionBody([]map[string]any{{"name": "X", "quantity": 1}}), "line_items[0]"},
		{"line item unknown field", sessionBody(item("colour", "red")), "colour"},
		{"line_items empty", sessionBody([]map[string]any{}), "line_items"},
		{"line_items missing", sessionBody(nil, "line_items", nil), "line_items"},
		{"line_items not an array", sessionBody(nil, "line_items", map[string]any{"quantity": 1}), "line_items"},
		{"101 line items", sessionBody(func() []map[string]any {
			var items []map[string]any
			for range 101 {
				items = append(items, customItem(1, "usd", "x", 1))
			}
			return items
		}()), "line_items"},
		// Quantity.
		{"quantity 0", sessionBody(item("quantity", 0)), "line_items[0].quantity"},
		{"quantity 1001", sessionBody(item("quantity", 1001)), "line_items[0].quantity"},
		{"quantity -1", sessionBody(item("quantity", -1)), "line_items[0].quantity"},
		{"quantity missing", sessionBody(item("quantity", nil)), "line_items[0].quantity"},
		{"quantity 1.5", sessionBody(item("quantity", 1.5)), "line_items[0].quantity"},
		{"quantity string", sessionBody(item("quantity", "1")), "line_items[0].quantity"},
		{"price form quantity 0", sessionBody([]map[string]any{priceItem(price, 0)}), "line_items[0].quantity"},
		{"price form quantity missing", sessionBody([]map[string]any{{"price_id": price}}), "line_items[0].quantity"},
		// Amount and currency of the custom form.
		{"amount 0", sessionBody(item("amount", 0)), "line_items[0].amount"},
		{"amount 100000000", sessionBody(item("amount", 100000000)), "line_items[0].amount"},
		{"amount -1", sessionBody(item("amount", -1)), "line_items[0].amount"},
		{"amount 1.5", sessionBody(item("amount", 1.5)), "line_items[0].amount"},
		{"amount string", sessionBody(item("amount", "1000")), "line_items[0].amount"},
		{"currency us", sessionBody(item("currency", "us")), "line_items[0].currency"},
		{"currency usdd", sessionBody(item("currency", "usdd")), "line_items[0].currency"},
		{"currency u1d", sessionBody(item("currency", "u1d")), "line_items[0].currency"},
		{"currency xyz not ISO 4217", sessionBody(item("currency", "xyz")), "line_items[0].currency"},
		{"currency number", sessionBody(item("currency", 840)), "line_items[0].currency"},
		{"mixed currencies, custom", sessionBody([]map[string]any{customItem(100, "usd", "a", 1), customItem(100, "eur", "b", 1)}), "line_items[1].currency"},
		{"mixed currencies, price then custom", sessionBody([]map[string]any{priceItem(price, 1), customItem(100, "gbp", "b", 1)}), "line_items[1].currency"},
		{"mixed currencies, custom then price", sessionBody([]map[string]any{customItem(100, "eur", "a", 1), priceItem(price, 1)}), "line_items[1].currency"},
		// URLs: missing is a validation error (bad values: TestSessionRedirectURLs).
		{"success_url missing", sessionBody(oneItem(), "success_url", nil), "success_url"},
		{"cancel_url missing", sessionBody(oneItem(), "cancel_url", nil), "cancel_url"},
		{"success_url number", sessionBody(oneItem(), "success_url", 5), "success_url"},
		// Customer email.
		{"customer_email no at", sessionBody(oneItem(), "customer_email", "nope"), "customer_email"},
		{"customer_email no domain dot", sessionBody(oneItem(), "customer_email", "a@localhost"), "customer_email"},
		{"customer_email display name", sessionBody(oneItem(), "customer_email", "Ada <ada@example.com>"), "customer_email"},
		{"customer_email empty", sessionBody(oneItem(), "customer_email", ""), "customer_email"},
		{"customer_id number", sessionBody(oneItem(), "customer_id", 5), "customer_id"},
		// Metadata.
		{"metadata 51 keys", sessionBody(oneItem(), "metadata", metadataOf(51)), "metadata"},
		{"metadata key 41", sessionBody(oneItem(), "metadata", map[string]string{strings.Repeat("k", 41): "v"}), "metadata"},
		{"metadata value 501", sessionBody(oneItem(), "metadata", map[string]string{"k": strings.Repeat("v", 501)}), "metadata"},
		{"metadata number value", sessionBody(oneItem(), "metadata", map[string]any{"n": 1}), "metadata"},
		{"metadata null value", `{"line_items":[{"amount":100,"currency":"usd","name":"a","quantity":1}],"success_url":"https://a.example/s","cancel_url":"https://a.example/c","metadata":{"k":null}}`, "metadata"},
		{"metadata not an object", sessionBody(oneItem(), "metadata", []string{"a"}), "metadata"},
		// Billing and shipping.
		{"billing_address_collection sometimes", sessionBody(oneItem(), "billing_address_collection", "sometimes"), "billing_address_collection"},
		{"billing_address_collection upper case", sessionBody(oneItem(), "billing_address_collection", "AUTO"), "billing_address_collection"},
		{"billing_address_collection empty", sessionBody(oneItem(), "billing_address_collection", ""), "billing_address_collection"},
		{"collect_shipping_address string", sessionBody(oneItem(), "collect_shipping_address", "yes"), "collect_shipping_address"},
		{"shipping_countries three letters", sessionBody(oneItem(), "shipping_countries", []string{"USA"}), "shipping_countries[0]"},
		{"shipping_countries one letter", sessionBody(oneItem(), "shipping_countries", []string{"U"}), "shipping_countries[0]"},
		{"shipping_countries digit", sessionBody(oneItem(), "shipping_countries", []string{"US", "1A"}), "shipping_countries[1]"},
		{"shipping_countries empty string", sessionBody(oneItem(), "shipping_countries", []string{""}), "shipping_countries[0]"},
		{"shipping_countries non-ASCII", sessionBody(oneItem(), "shipping_countries", []string{"ÜS"}), "shipping_countries[0]"},
		{"shipping_countries number", sessionBody(oneItem(), "shipping_countries", []any{840}), "shipping_countries"},
		{"shipping_options label missing", sessionBody(oneItem(), "shipping_options", opt(nil, 500)), "shipping_options[0].label"},
		{"shipping_options label empty", sessionBody(oneItem(), "shipping_options", opt("", 500)), "shipping_options[0].label"},
		{"shipping_options amount missing", sessionBody(oneItem(), "shipping_options", opt("Standard", nil)), "shipping_options[0].amount"},
		{"shipping_options amount -1", sessionBody(oneItem(), "shipping_options", opt("Standard", -1)), "shipping_options[0].amount"},
		{"shipping_options amount 1.5", sessionBody(oneItem(), "shipping_options", opt("Standard", 1.5)), "shipping_options[0].amount"},
		{"shipping_options unknown field", sessionBody(oneItem(), "shipping_options", []map[string]any{{"label": "S", "amount": 1, "days": 3}}), "days"},
		// Other fields.
		{"pass_fees_to_customer string", sessionBody(oneItem(), "pass_fees_to_customer", "true"), "pass_fees_to_customer"},
		{"unknown top-level field", sessionBody(oneItem(), "mode", "payment"), "mode"},
		{"body not an object", `[1]`, ""},
		{"malformed JSON", `{"line_items": [`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantValidation(t, h.do("POST", "/v1/payment-sessions", key, c.body), c.field)
		})
	}
	t.Run("nothing was created", func(t *testing.T) {
		if n := sessionCount(t, h, m); n != 0 {
			t.Errorf("got %d sessions after rejected creates, want 0", n)
		}
	})
}

func TestSessionAccepts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name  string
		body  map[string]any
		check func(t *testing.T, s sessionView)
	}{
		{"metadata 50 keys", sessionBody(oneItem(), "metadata", metadataOf(50)), func(t *testing.T, s sessionView) {
			wantSameJSON(t, "metadata", s.Metadata, metadataOf(50))
		}},
		{"metadata key 40, value 500", sessionBody(oneItem(), "metadata", map[string]string{strings.Repeat("k", 40): strings.Repeat("v", 500)}), func(t *testing.T, s sessionView) {
			wantSameJSON(t, "metadata", s.Metadata, map[string]string{strings.Repeat("k", 40): strings.Repeat("v", 500)})
		}},
		{"billing_address_collection auto", sessionBody(oneItem(), "billing_address_collection", "auto"), func(t *testing.T, s sessionView) {}},
		{"billing_address_collection required", sessionBody(oneItem(), "billing_address_collection", "required"), func(t *testing.T, s sessionView) {}},
		{"shipping countries any case, options with amount 0", sessionBody(oneItem(), "collect_shipping_address", true,
			"shipping_countries", []string{"us", "GB", "De"},
			"shipping_options", []map[string]any{{"label": "Pickup", "amount": 0}, {"label": "Express", "amount": 1500}}),
			func(t *testing.T, s sessionView) {
				wantSameJSON(t, "shipping_options", s.ShippingOptions, []shippingOptionView{{"Pickup", 0}, {"Express", 1500}})
				if s.AmountTotal != 3000 {
					t.Errorf("got amount_total %d, want 3000 (shipping is added only when chosen)", s.AmountTotal)
				}
			}},
		{"customer_email", sessionBody(oneItem(), "customer_email", "ada@example.com"), func(t *testing.T, s sessionView) {
			if deref(s.CustomerEmail) != "ada@example.com" || s.Customer != nil {
				t.Errorf("got customer_email %s customer %s, want ada@example.com and null", deref(s.CustomerEmail), deref(s.Customer))
			}
		}},
		{"pass_fees_to_customer false", sessionBody(oneItem(), "pass_fees_to_customer", false), func(t *testing.T, s sessionView) {
			if s.PassFees || s.AmountTotal != 3000 || s.AmountSubtotal != 3000 {
				t.Errorf("got pass_fees %v amount_total %d subtotal %d, want false 3000 3000", s.PassFees, s.AmountTotal, s.AmountSubtotal)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := createSessionOK(t, h, key, c.body)
			c.check(t, s)
			wantSameJSON(t, "GET after create", getSessionOK(t, h, key, s.ID), s)
		})
	}
}

func TestSessionRedirectURLs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	for _, field := range []string{"success_url", "cancel_url"} {
		for _, bad := range []string{
			"http://shop.example/thanks",
			"HTTP://shop.example/thanks",
			"ftp://shop.example/thanks",
			"javascript:alert(1)",
			"not a url",
			"shop.example/thanks",
			"/thanks",
			"https://",
			"https:///thanks",
			"//shop.example/thanks",
		} {
			t.Run(field+" "+bad, func(t *testing.T) {
				r := h.do("POST", "/v1/payment-sessions", key, sessionBody(oneItem(), field, bad))
				wantError(t, r, http.StatusBadRequest, "invalid_url")
				if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, field) {
					t.Errorf("got message %q, want it to name %s", r.Body.Error.Message, field)
				}
			})
		}
	}
	if n := sessionCount(t, h, m); n != 0 {
		t.Errorf("got %d sessions after rejected URLs, want 0", n)
	}

	t.Run("token kept in the object", func(t *testing.T) {
		su := "https://shop.example/s/{CHECKOUT_SESSION_ID}/done?again={CHECKOUT_SESSION_ID}"
		s := createSessionOK(t, h, key, sessionBody(oneItem(), "success_url", su))
		if s.SuccessURL != su || s.CancelURL != cancelURL {
			t.Errorf("got success_url %q cancel_url %q, want %q and %q as given", s.SuccessURL, s.CancelURL, su, cancelURL)
		}
		if g := getSessionOK(t, h, key, s.ID); g.SuccessURL != su {
			t.Errorf("GET: got success_url %q, want %q", g.SuccessURL, su)
		}
	})
}

// TestSessionCheckoutRedirect pays on the hosted page: the customer is sent
// to success_url with the token replaced by the session id.
func TestSessionCheckoutRedirect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct{ name, successURL string }{
		{"token in the query", "https://shop.example/thanks?session_id={CHECKOUT_SESSION_ID}"},
		{"token twice", "https://shop.example/s/{CHECKOUT_SESSION_ID}?again={CHECKOUT_SESSION_ID}"},
		{"no token", "https://shop.example/thanks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := createSessionOK(t, h, key, sessionBody(oneItem(), "success_url", c.successURL))
			page, err := http.Get(*s.URL)
			if err != nil {
				t.Fatal(err)
			}
			page.Body.Close()
			if page.StatusCode != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
				t.Errorf("GET %s: got %d %s, want 200 text/html", *s.URL, page.StatusCode, page.Header.Get("Content-Type"))
			}
			r := payCheckout(t, h, s.ID, cardForm(sandbox.CardSuccess, "buyer@example.com", "Bea Buyer"))
			want := strings.ReplaceAll(c.successURL, "{CHECKOUT_SESSION_ID}", s.ID)
			if r.Status != http.StatusSeeOther || r.Location != want {
				t.Errorf("got %d Location %q, want 303 to %q", r.Status, r.Location, want)
			}
			// The object keeps the template.
			if g := getSessionOK(t, h, key, s.ID); g.SuccessURL != c.successURL {
				t.Errorf("got success_url %q after payment, want %q", g.SuccessURL, c.successURL)
			}
			// A second submit charges nothing and says the session is paid.
			again := payCheckout(t, h, s.ID, cardForm(sandbox.CardSuccess, "buyer@example.com", "Bea Buyer"))
			if again.Status != http.StatusGone {
				t.Errorf("second submit: got %d, want 410", again.Status)
			}
		})
	}
}

func TestSessionCustomer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)
	mine := createCustomerOK(t, h, aTest, map[string]any{"email": "ada@example.com", "name": "Ada"})
	mineLive := createCustomerOK(t, h, aLive, map[string]any{"email": "live@example.com"})
	theirs := createCustomerOK(t, h, bTest, map[string]any{"email": "bob@example.com"})
	gone := createCustomerOK(t, h, aTest, map[string]any{"email": "gone@example.com"})
	wantOK(t, h.do("DELETE", "/v1/customers/"+gone.ID, aTest, nil))

	for _, c := range []struct{ name, id string }{
		{"unknown", "cus_doesnotexist00000000000"},
		{"another merchant's", theirs.ID},
		{"the other mode's", mineLive.ID},
		{"deleted", gone.ID},
		{"not a customer id", "prod_abc"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/payment-sessions", aTest, sessionBody(oneItem(), "customer_id", c.id))
			wantError(t, r, http.StatusNotFound, "customer_not_found")
		})
	}
	if n := sessionCount(t, h, mA); n != 0 {
		t.Errorf("got %d sessions after rejected customers, want 0", n)
	}

	t.Run("a real customer", func(t *testing.T) {
		s := createSessionOK(t, h, aTest, sessionBody(oneItem(), "customer_id", mine.ID))
		if deref(s.Customer) != mine.ID || deref(s.CustomerEmail) != "ada@example.com" {
			t.Errorf("got customer %s customer_email %s, want %s and ada@example.com", deref(s.Customer), deref(s.CustomerEmail), mine.ID)
		}
		wantSameJSON(t, "GET session", getSessionOK(t, h, aTest, s.ID), s)

		// The payment carries the customer, and the hosted page pre-fills the email.
		page, err := http.Get(*s.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(page.Body)
		page.Body.Close()
		if !strings.Contains(string(body), "ada@example.com") {
			t.Errorf("checkout page does not pre-fill ada@example.com")
		}
		payOK(t, h, s, "ada@example.com", "Ada Lovelace")
		ps, _ := listPayments(t, h, aTest, "")
		if len(ps) != 1 || deref(ps[0].Customer) != mine.ID {
			t.Errorf("got payments %+v, want one with customer %s", ps, mine.ID)
		}
	})
}

func TestSessionPrices(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)

	archived := createProductOK(t, h, aTest, map[string]any{"name": "Old", "price": map[string]any{"amount": 100, "currency": "usd"}})
	wantOK(t, h.do("DELETE", "/v1/products/"+archived.ID, aTest, nil))
	inactive := createProductOK(t, h, aTest, map[string]any{"name": "Hidden", "active": false, "price": map[string]any{"amount": 100, "currency": "usd"}})
	livePrice := priceOf(t, h, aLive, "Live thing", 100, "usd")
	theirPrice := priceOf(t, h, bTest, "Their thing", 100, "usd")
	good := priceOf(t, h, aTest, "Good", 100, "usd")

	for _, c := range []struct{ name, id string }{
		{"unknown price", "price_doesnotexist000000000"},
		{"archived product's price", archived.DefaultPrice.ID},
		{"inactive product's price", inactive.DefaultPrice.ID},
		{"the other mode's price", livePrice},
		{"another merchant's price", theirPrice},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/payment-sessions", aTest, sessionBody([]map[string]any{priceItem(good, 1), priceItem(c.id, 1)}))
			wantError(t, r, http.StatusNotFound, "product_not_found")
		})
	}
	if n := sessionCount(t, h, mA); n != 0 {
		t.Errorf("got %d sessions after rejected prices, want 0", n)
	}
	t.Run("the live price works with the live key", func(t *testing.T) {
		s := createSessionOK(t, h, aLive, sessionBody([]map[string]any{priceItem(livePrice, 2)}))
		if !s.Livemode || s.AmountTotal != 200 {
			t.Errorf("got livemode %v amount_total %d, want true 200", s.Livemode, s.AmountTotal)
		}
	})
}

// TestSessionAmounts: amount_total is Σ unit × quantity, grossed up with
// pass_fees_to_customer so that the merchant nets the subtotal after its fee.
func TestSessionAmounts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, plan := range []payments.Plan{payments.PlanFree, payments.PlanBrand, payments.PlanPro} {
		key := h.key(h.merchant(plan), false)
		price := priceOf(t, h, key, "Widget", 1234, "usd")
		for _, c := range []struct {
			name     string
			items    []map[string]any
			currency string
			subtotal int64
		}{
			{"one cent", []map[string]any{customItem(1, "usd", "a", 1)}, "usd", 1},
			{"mixed forms", []map[string]any{priceItem(price, 3), customItem(999, "usd", "b", 7)}, "usd", 1234*3 + 999*7},
			{"round numbers", []map[string]any{customItem(1000, "usd", "a", 10)}, "usd", 10000},
			{"rounding edge", []map[string]any{customItem(5001, "usd", "a", 1)}, "usd", 5001},
			{"largest line", []map[string]any{customItem(99999999, "usd", "a", 1000)}, "usd", 99999999 * 1000},
			{"zero-decimal", []map[string]any{customItem(1500, "jpy", "a", 2)}, "jpy", 3000},
			{"three-decimal", []map[string]any{customItem(12345, "kwd", "a", 1)}, "kwd", 12345},
		} {
			for _, pass := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s pass_fees %v", plan, c.name, pass), func(t *testing.T) {
					s := createSessionOK(t, h, key, sessionBody(c.items, "pass_fees_to_customer", pass))
					var sum int64
					for _, li := range s.LineItems {
						if li.AmountTotal != li.UnitAmount*li.Quantity {
							t.Errorf("line %q: got amount_total %d, want %d × %d", li.Name, li.AmountTotal, li.UnitAmount, li.Quantity)
						}
						sum += li.AmountTotal
					}
					if s.AmountSubtotal != c.subtotal || sum != c.subtotal {
						t.Errorf("got amount_subtotal %d (lines sum %d), want %d", s.AmountSubtotal, sum, c.subtotal)
					}
					if s.PassFees != pass {
						t.Errorf("got pass_fees_to_customer %v, want %v", s.PassFees, pass)
					}
					if !pass {
						if s.AmountTotal != c.subtotal {
							t.Errorf("got amount_total %d, want the subtotal %d", s.AmountTotal, c.subtotal)
						}
						return
					}
					net := s.AmountTotal - payments.Fee(plan, c.currency, s.AmountTotal)
					if net != c.subtotal {
						t.Errorf("got amount_total %d netting %d after the %s fee, want it to net exactly %d", s.AmountTotal, net, plan, c.subtotal)
					}
					if s.AmountTotal <= c.subtotal {
						t.Errorf("got amount_total %d, want more than the subtotal %d", s.AmountTotal, c.subtotal)
					}
				})
			}
		}
	}

	t.Run("the payment nets the subtotal", func(t *testing.T) {
		m := h.merchant(payments.PlanPro)
		key := h.key(m, false)
		s := createSessionOK(t, h, key, sessionBody([]map[string]any{customItem(2000, "usd", "a", 1)}, "pass_fees_to_customer", true))
		payOK(t, h, s, "p@example.com", "P")
		ps, _ := listPayments(t, h, key, "")
		if len(ps) != 1 {
			t.Fatalf("got %d payments, want 1", len(ps))
		}
		p := ps[0]
		if p.Amount != s.AmountTotal || p.AmountReceived != s.AmountTotal || p.FeeAmount != payments.Fee(payments.PlanPro, "usd", s.AmountTotal) ||
			p.Amount-p.FeeAmount != 2000 {
			t.Errorf("got amount %d received %d fee %d, want %d, %d and a fee that leaves 2000", p.Amount, p.AmountReceived, p.FeeAmount, s.AmountTotal, s.AmountTotal)
		}
	})
}

// TestSessionShippingAndBilling pays a session that collects both addresses.
func TestSessionShippingAndBilling(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	s := createSessionOK(t, h, key, sessionBody(oneItem(), "collect_shipping_address", true, "billing_address_collection", "required",
		"shipping_countries", []string{"us", "CA"},
		"shipping_options", []map[string]any{{"label": "Standard", "amount": 0}, {"label": "Express", "amount": 1500}}))
	form := cardForm(sandbox.CardSuccess, "ship@example.com", "Sam Shipper")
	for k, v := range map[string]string{
		"ship_line1": "1 Main St", "ship_line2": "Apt 2", "ship_city": "Springfield", "ship_postal_code": "12345", "ship_country": "GB",
		"shipping_option": "1", "bill_line1": "2 Side St", "bill_city": "Shelbyville", "bill_postal_code": "54321", "bill_country": "US",
	} {
		form.Set(k, v)
	}
	t.Run("country not shipped to", func(t *testing.T) {
		if r := payCheckout(t, h, s.ID, form); r.Status != http.StatusBadRequest {
			t.Errorf("got %d, want 400 (GB is not in shipping_countries)", r.Status)
		}
	})
	form.Set("ship_country", "us")
	r := payCheckout(t, h, s.ID, form)
	if want := strings.ReplaceAll(successURL, "{CHECKOUT_SESSION_ID}", s.ID); r.Status != http.StatusSeeOther || r.Location != want {
		t.Fatalf("got %d Location %q, want 303 to %q", r.Status, r.Location, want)
	}
	got := getSessionOK(t, h, key, s.ID)
	wantSameJSON(t, "shipping_details", got.ShippingDetails, &shippingDetailsView{
		Address: addressView{Name: "Sam Shipper", Line1: "1 Main St", Line2: "Apt 2", City: "Springfield", PostalCode: "12345", Country: "US"},
		Option:  shippingOptionView{Label: "Express", Amount: 1500},
	})
	wantSameJSON(t, "billing_details", got.BillingDetails, &addressView{
		Name: "Sam Shipper", Line1: "2 Side St", City: "Shelbyville", PostalCode: "54321", Country: "US",
	})
	if got.AmountSubtotal != 3000 || got.AmountTotal != 4500 {
		t.Errorf("got amount_subtotal %d amount_total %d, want 3000 and 4500 (with Express shipping)", got.AmountSubtotal, got.AmountTotal)
	}
	ps, _ := listPayments(t, h, key, "")
	if len(ps) != 1 || ps[0].Amount != 4500 {
		t.Errorf("got payments %+v, want one of 4500", ps)
	}
}

// --- payment sessions: reading --------------------------------------------------

// TestSessionGetAfterCompletion: the creator reads a completed session; the
// other mode and other merchants never see it.
func TestSessionGetAfterCompletion(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive := h.key(mA, false), h.key(mA, true)
	bTest, bLive := h.key(mB, false), h.key(mB, true)
	md := map[string]string{"order_id": "o-42"}

	testSession := createSessionOK(t, h, aTest, sessionBody(oneItem(), "metadata", md))
	liveSession := createSessionOK(t, h, aLive, sessionBody(oneItem(), "metadata", md))
	if testSession.Livemode || !liveSession.Livemode {
		t.Fatalf("got livemode %v (test key) and %v (live key), want false and true", testSession.Livemode, liveSession.Livemode)
	}
	for _, s := range []sessionView{testSession, liveSession} {
		if s.URL == nil || *s.URL != h.url+"/checkout/"+s.ID {
			t.Errorf("open session %s: got url %s, want %s/checkout/%s", s.ID, deref(s.URL), h.url, s.ID)
		}
	}
	payOK(t, h, testSession, "buyer@example.com", "Bea Buyer")
	payOK(t, h, liveSession, "buyer@example.com", "Bea Buyer")

	for _, c := range []struct {
		name, key string
		s         sessionView
	}{{"test", aTest, testSession}, {"live", aLive, liveSession}} {
		t.Run(c.name+" session by its creator", func(t *testing.T) {
			got := getSessionOK(t, h, c.key, c.s.ID)
			if got.Status != "complete" || got.PaymentStatus != "paid" {
				t.Errorf("got status %s payment_status %s, want complete and paid", got.Status, got.PaymentStatus)
			}
			if got.PaymentIntent == nil || !strings.HasPrefix(*got.PaymentIntent, "pi_") {
				t.Errorf("got payment_intent %s, want a pi_ id", deref(got.PaymentIntent))
			}
			if got.URL != nil {
				t.Errorf("got url %s after completion, want null", *got.URL)
			}
			if deref(got.CustomerEmail) != "buyer@example.com" {
				t.Errorf("got customer_email %s, want the email typed at checkout", deref(got.CustomerEmail))
			}
			// Everything else is as created.
			want := c.s
			want.URL, want.Status, want.PaymentStatus, want.PaymentIntent = nil, "complete", "paid", got.PaymentIntent
			want.CustomerEmail = ptr("buyer@example.com")
			wantSameJSON(t, "completed session", got, want)
			var piLive bool
			if err := h.db.Get(&piLive, `SELECT livemode FROM payment_intents WHERE id = $1 AND session_id = $2`, deref(got.PaymentIntent), c.s.ID); err != nil {
				t.Fatalf("payment %s of session %s: %v", deref(got.PaymentIntent), c.s.ID, err)
			}
			if piLive != c.s.Livemode {
				t.Errorf("got payment livemode %v, want the session's %v", piLive, c.s.Livemode)
			}
		})
	}
	for _, c := range []struct{ name, key, id string }{
		{"test session with A's live key", aLive, testSession.ID},
		{"test session with B's test key", bTest, testSession.ID},
		{"test session with B's live key", bLive, testSession.ID},
		{"live session with A's test key", aTest, liveSession.ID},
		{"live session with B's live key", bLive, liveSession.ID},
		{"unknown id", aTest, "cs_doesnotexist00000000000"},
		{"a payment id", aTest, deref(getSessionOK(t, h, aTest, testSession.ID).PaymentIntent)},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, h.do("GET", "/v1/payment-sessions/"+c.id, c.key, nil), http.StatusNotFound, "session_not_found")
		})
	}
	t.Run("open session with the other mode's key", func(t *testing.T) {
		s := createSessionOK(t, h, aTest, sessionBody(oneItem()))
		wantError(t, h.do("GET", "/v1/payment-sessions/"+s.ID, aLive, nil), http.StatusNotFound, "session_not_found")
		wantError(t, h.do("GET", "/v1/payment-sessions/"+s.ID, bTest, nil), http.StatusNotFound, "session_not_found")
	})
}

// --- embedded payment intents -------------------------------------------------

func TestIntentCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)

	a1 := createIntentOK(t, h, aTest, map[string]any{"amount": 2000, "currency": "USD"})
	a2 := createIntentOK(t, h, aTest, map[string]any{
		"amount": 1, "currency": "jpy", "description": "Order 7", "customer_email": "c@example.com",
		"metadata": map[string]string{"order_id": "7"}, "source": "web", "device": "ios", "pass_fees_to_customer": false,
	})
	al := createIntentOK(t, h, aLive, map[string]any{"amount": 99999999, "currency": "eur"})
	b1 := createIntentOK(t, h, bTest, map[string]any{"amount": 2000, "currency": "usd"})

	for _, c := range []struct {
		name     string
		iv       intentView
		pkPrefix string
		amount   int64
		currency string
	}{
		{"test, currency lower-cased", a1, "pk_test_", 2000, "usd"},
		{"test, every field", a2, "pk_test_", 1, "jpy"},
		{"live", al, "pk_live_", 99999999, "eur"},
		{"other merchant", b1, "pk_test_", 2000, "usd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			iv := c.iv
			if !strings.HasPrefix(iv.PaymentIntentID, "pi_") || len(iv.PaymentIntentID) < len("pi_")+20 {
				t.Errorf("got payment_intent_id %q, want pi_ and 20 characters", iv.PaymentIntentID)
			}
			if !strings.HasPrefix(iv.ClientSecret, iv.PaymentIntentID+"_secret_") || len(iv.ClientSecret) < len(iv.PaymentIntentID)+len("_secret_")+20 {
				t.Errorf("got client_secret %q, want %s_secret_ and 20 random characters", iv.ClientSecret, iv.PaymentIntentID)
			}
			if !strings.HasPrefix(iv.PublishableKey, c.pkPrefix) {
				t.Errorf("got publishable_key %q, want prefix %s", iv.PublishableKey, c.pkPrefix)
			}
			if !strings.HasPrefix(iv.ProcessorAccount, "acct_") {
				t.Errorf("got processor_account %q, want prefix acct_", iv.ProcessorAccount)
			}
			if iv.Amount != c.amount || iv.Currency != c.currency {
				t.Errorf("got %d %s, want %d %s", iv.Amount, iv.Currency, c.amount, c.currency)
			}
		})
	}
	t.Run("one account per merchant and mode", func(t *testing.T) {
		if a1.PublishableKey != a2.PublishableKey || a1.ProcessorAccount != a2.ProcessorAccount {
			t.Errorf("got %s/%s and %s/%s for one merchant, want the same key and account", a1.PublishableKey, a1.ProcessorAccount, a2.PublishableKey, a2.ProcessorAccount)
		}
		if a1.PublishableKey == b1.PublishableKey || a1.ProcessorAccount == b1.ProcessorAccount || a1.ProcessorAccount == al.ProcessorAccount {
			t.Errorf("accounts are shared: A test %s, A live %s, B test %s", a1.ProcessorAccount, al.ProcessorAccount, b1.ProcessorAccount)
		}
		if a1.ClientSecret == a2.ClientSecret || a1.PaymentIntentID == a2.PaymentIntentID {
			t.Errorf("two intents share an id or a secret")
		}
	})
	t.Run("stored as a test payment", func(t *testing.T) {
		ps, _ := listPayments(t, h, aTest, "")
		want := []paymentView{
			{ID: a2.PaymentIntentID, Amount: 1, Currency: "jpy", Status: "requires_payment_method", CustomerEmail: ptr("c@example.com"),
				Description: ptr("Order 7"), Metadata: map[string]string{"order_id": "7"}},
			{ID: a1.PaymentIntentID, Amount: 2000, Currency: "usd", Status: "requires_payment_method", Metadata: map[string]string{}},
		}
		if len(ps) == 2 {
			want[0].Created, want[1].Created = ps[0].Created, ps[1].Created
		}
		wantSameJSON(t, "test payments", ps, want)
	})
}

func TestIntentValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	body := func(kv ...any) map[string]any {
		b := map[string]any{"amount": 1000, "currency": "usd"}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(b, kv[i].(string))
				continue
			}
			b[kv[i].(string)] = kv[i+1]
		}
		return b
	}
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"amount missing", body("amount", nil), "amount"},
		{"amount 0", body("amount", 0), "amount"},
		{"amount -1", body("amount", -1), "amount"},
		{"amount 100000000", body("amount", 100000000), "amount"},
		{"amount 1.5", body("amount", 1.5), "amount"},
		{"amount string", body("amount", "1000"), "amount"},
		{"amount null", `{"amount": null, "currency": "usd"}`, "amount"},
		{"currency missing", body("currency", nil), "currency"},
		{"currency us", body("currency", "us"), "currency"},
		{"currency usdd", body("currency", "usdd"), "currency"},
		{"currency xyz", body("currency", "xyz"), "currency"},
		{"currency number", body("currency", 840), "currency"},
		{"description number", body("description", 5), "description"},
		{"description too long", body("description", strings.Repeat("d", 5001)), "description"},
		{"customer_email invalid", body("customer_email", "nope"), "customer_email"},
		{"customer_email number", body("customer_email", 5), "customer_email"},
		{"metadata 51 keys", body("metadata", metadataOf(51)), "metadata"},
		{"metadata key 41", body("metadata", map[string]string{strings.Repeat("k", 41): "v"}), "metadata"},
		{"metadata number value", body("metadata", map[string]any{"n": 1}), "metadata"},
		{"metadata null value", `{"amount": 1000, "currency": "usd", "metadata": {"k": null}}`, "metadata"},
		{"source number", body("source", 5), "source"},
		{"source too long", body("source", strings.Repeat("s", 5001)), "source"},
		{"device object", body("device", map[string]any{}), "device"},
		{"device too long", body("device", strings.Repeat("d", 5001)), "device"},
		{"pass_fees_to_customer string", body("pass_fees_to_customer", "yes"), "pass_fees_to_customer"},
		{"pass fees push the amount over the limit", body("amount", 99999999, "pass_fees_to_customer", true), "amount"},
		{"unknown field", body("payment_method", "pm_card_visa"), "payment_method"},
		{"client_secret is not an input", body("client_secret", "pi_x_secret_y"), "client_secret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantValidation(t, h.do("POST", "/v1/payment-intents", key, c.body), c.field)
		})
	}
	var n int
	if err := h.db.Get(&n, `SELECT count(*) FROM payment_intents WHERE merchant_id = $1`, m); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d payment intents after rejected creates, want 0", n)
	}
}

func TestIntentPassFees(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, plan := range []payments.Plan{payments.PlanFree, payments.PlanPro} {
		key := h.key(h.merchant(plan), false)
		for _, c := range []struct {
			amount   int64
			currency string
		}{{1, "usd"}, {1000, "usd"}, {5001, "usd"}, {12345, "eur"}, {500, "jpy"}, {95000000, "usd"}} {
			t.Run(fmt.Sprintf("%s %d %s", plan, c.amount, c.currency), func(t *testing.T) {
				iv := createIntentOK(t, h, key, map[string]any{"amount": c.amount, "currency": c.currency, "pass_fees_to_customer": true})
				if net := iv.Amount - payments.Fee(plan, c.currency, iv.Amount); net != c.amount || iv.Amount <= c.amount {
					t.Errorf("got amount %d netting %d after the %s fee, want more than %d netting exactly %d", iv.Amount, net, plan, c.amount, c.amount)
				}
				var stored int64
				if err := h.db.Get(&stored, `SELECT amount FROM payment_intents WHERE id = $1`, iv.PaymentIntentID); err != nil {
					t.Fatal(err)
				}
				if stored != iv.Amount {
					t.Errorf("got stored amount %d, want the grossed-up %d", stored, iv.Amount)
				}
			})
		}
	}
}

// secretHolders returns "table: row" for every row of every table of the
// test database whose text form contains s, as text or inside a bytea
// column (which PostgreSQL prints as hex).
func secretHolders(t *testing.T, h *harness, s string) []string {
	t.Helper()
	var tables []string
	if err := h.db.Select(&tables, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = 'public' AND table_type = 'BASE TABLE'`); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tbl := range tables {
		var rows []string
		q := fmt.Sprintf(`SELECT left(t::text, 200) FROM %q t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0`, tbl)
		if err := h.db.Select(&rows, q, s, hex.EncodeToString([]byte(s))); err != nil {
			t.Fatalf("search %s: %v", tbl, err)
		}
		for _, r := range rows {
			out = append(out, tbl+": "+r)
		}
	}
	return out
}

// TestIntentClientSecretNotStored: only the SHA-256 of the client secret is
// kept; no column of any table holds the secret itself.
func TestIntentClientSecretNotStored(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name    string
		headers []string
	}{
		{"plain request", nil},
		{"with an Idempotency-Key", []string{"Idempotency-Key", "intent-" + payments.NewID("")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("POST", "/v1/payment-intents", key, map[string]any{"amount": 1500, "currency": "usd"}, c.headers...)
			wantOK(t, r)
			var iv intentView
			r.data(t, &iv)
			var hash []byte
			if err := h.db.Get(&hash, `SELECT client_secret_hash FROM payment_intents WHERE id = $1`, iv.PaymentIntentID); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(iv.ClientSecret))
			if !bytes.Equal(hash, sum[:]) {
				t.Errorf("got client_secret_hash %x, want sha256 of the returned secret %x", hash, sum)
			}
			var row string
			if err := h.db.Get(&row, `SELECT row_to_json(pi)::text FROM payment_intents pi WHERE id = $1`, iv.PaymentIntentID); err != nil {
				t.Fatal(err)
			}
			random := strings.TrimPrefix(iv.ClientSecret, iv.PaymentIntentID+"_secret_")
			if strings.Contains(row, iv.ClientSecret) || strings.Contains(row, random) {
				t.Errorf("payment_intents row holds the client secret: %s", row)
			}
			if got := secretHolders(t, h, random); len(got) > 0 {
				t.Errorf("got the client secret stored in %v, want it nowhere", got)
			}
		})
	}
}

// TestIntentConfirm drives the sandbox's confirm endpoint as the JS client does.
func TestIntentConfirm(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)
	md := map[string]string{"order_id": "o-9"}
	iv := createIntentOK(t, h, aTest, map[string]any{"amount": 2500, "currency": "usd", "metadata": md, "customer_email": "e@example.com"})
	other := createIntentOK(t, h, aTest, map[string]any{"amount": 100, "currency": "usd"})
	theirs := createIntentOK(t, h, bTest, map[string]any{"amount": 100, "currency": "usd"})
	live := createIntentOK(t, h, aLive, map[string]any{"amount": 100, "currency": "usd"})

	for _, c := range []struct{ name, id, pk, secret string }{
		{"wrong secret", iv.PaymentIntentID, iv.PublishableKey, iv.ClientSecret + "x"},
		{"another intent's secret", iv.PaymentIntentID, iv.PublishableKey, other.ClientSecret},
		{"empty secret", iv.PaymentIntentID, iv.PublishableKey, ""},
		{"another merchant's publishable key", iv.PaymentIntentID, theirs.PublishableKey, iv.ClientSecret},
		{"the live publishable key", iv.PaymentIntentID, live.PublishableKey, iv.ClientSecret},
		{"empty publishable key", iv.PaymentIntentID, "", iv.ClientSecret},
		{"unknown intent", "pi_doesnotexist0000000000", iv.PublishableKey, iv.ClientSecret},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := confirm(t, h, c.id, c.pk, c.secret, sandbox.CardSuccess)
			if r.Status != http.StatusUnauthorized || r.Body.Error == nil || r.Body.Status != "" {
				t.Errorf("got %d %s, want 401 with an error", r.Status, r.Raw)
			}
		})
	}
	if evs := events(t, h, mA, false); len(evs) != 0 {
		t.Fatalf("got events %v after refused confirmations, want none", eventTypes(evs))
	}

	t.Run("decline", func(t *testing.T) {
		r := confirm(t, h, iv.PaymentIntentID, iv.PublishableKey, iv.ClientSecret, sandbox.CardDeclined)
		if r.Status != http.StatusPaymentRequired || r.Body.Error == nil || r.Body.Error.DeclineCode != "card_declined" {
			t.Fatalf("got %d %s, want 402 with decline_code card_declined", r.Status, r.Raw)
		}
		evs := events(t, h, mA, false)
		if len(evs) != 1 || evs[0].Type != "payment_intent.payment_failed" {
			t.Fatalf("got events %v, want [payment_intent.payment_failed]", eventTypes(evs))
		}
		if evs[0].Data.ID != iv.PaymentIntentID || evs[0].Livemode {
			t.Errorf("got data.id %s livemode %v, want %s false", evs[0].Data.ID, evs[0].Livemode, iv.PaymentIntentID)
		}
		wantSameJSON(t, "data.metadata", evs[0].Data.Metadata, md)
		if deref(evs[0].Data.LastDecline) != "card_declined" {
			t.Errorf("got data.last_decline_code %s, want card_declined", deref(evs[0].Data.LastDecline))
		}
	})
	t.Run("success", func(t *testing.T) {
		r := confirm(t, h, iv.PaymentIntentID, iv.PublishableKey, iv.ClientSecret, sandbox.CardSuccess)
		if r.Status != http.StatusOK || r.Body.ID != iv.PaymentIntentID || r.Body.Status != "succeeded" || r.Body.Error != nil {
			t.Fatalf("got %d %s, want 200 {id: %s, status: succeeded}", r.Status, r.Raw, iv.PaymentIntentID)
		}
		evs := events(t, h, mA, false)
		if got := strings.Join(eventTypes(evs), ","); got != "payment_intent.payment_failed,payment_intent.succeeded" {
			t.Fatalf("got events %s, want payment_failed then succeeded", got)
		}
		e := evs[1]
		if e.Data.ID != iv.PaymentIntentID || e.Data.Amount != 2500 || e.Data.Status != "succeeded" {
			t.Errorf("got data id %s amount %d status %s, want %s 2500 succeeded", e.Data.ID, e.Data.Amount, e.Data.Status, iv.PaymentIntentID)
		}
		wantSameJSON(t, "data.metadata", e.Data.Metadata, md)
	})
	t.Run("confirming again charges once", func(t *testing.T) {
		for _, card := range []string{sandbox.CardSuccess, sandbox.CardDeclined, sandbox.CardSuccess} {
			r := confirm(t, h, iv.PaymentIntentID, iv.PublishableKey, iv.ClientSecret, card)
			if r.Status != http.StatusOK || r.Body.Status != "succeeded" {
				t.Errorf("confirm again with %s: got %d %s, want 200 succeeded", card, r.Status, r.Raw)
			}
		}
		evs := events(t, h, mA, false)
		if n := countType(evs, "payment_intent.succeeded"); n != 1 {
			t.Errorf("got %d payment_intent.succeeded events, want 1 (charged once)", n)
		}
		if len(evs) != 2 {
			t.Errorf("got events %v, want only the first failure and the success", eventTypes(evs))
		}
		var p paymentView
		for _, x := range func() []paymentView { ps, _ := listPayments(t, h, aTest, "limit=100"); return ps }() {
			if x.ID == iv.PaymentIntentID {
				p = x
			}
		}
		if p.Status != "succeeded" || p.AmountReceived != 2500 || p.FeeAmount != payments.Fee(payments.PlanFree, "usd", 2500) {
			t.Errorf("got payment %+v, want succeeded, 2500 received, fee %d", p, payments.Fee(payments.PlanFree, "usd", 2500))
		}
	})
	t.Run("a checkout payment cannot be confirmed here", func(t *testing.T) {
		s := createSessionOK(t, h, aTest, sessionBody(oneItem()))
		if r := payCheckout(t, h, s.ID, cardForm(sandbox.CardDeclined, "d@example.com", "D")); r.Status != http.StatusPaymentRequired {
			t.Fatalf("got %d, want 402 for the declined card", r.Status)
		}
		pi := deref(getSessionOK(t, h, aTest, s.ID).PaymentIntent)
		r := confirm(t, h, pi, iv.PublishableKey, "", sandbox.CardSuccess)
		if r.Status != http.StatusUnauthorized {
			t.Errorf("got %d %s, want 401", r.Status, r.Raw)
		}
	})
}

// --- test payments ------------------------------------------------------------

func TestTestPayments(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	aTest, aLive, bTest := h.key(mA, false), h.key(mA, true), h.key(mB, false)
	cus := createCustomerOK(t, h, aTest, map[string]any{"email": "known@example.com"})

	// Newest last: two checkouts, an embedded intent, a checkout with a customer.
	var want []paymentView
	checkout := func(key string, body map[string]any, email, name string) sessionView {
		s := createSessionOK(t, h, key, body)
		payOK(t, h, s, email, name)
		return getSessionOK(t, h, key, s.ID)
	}
	for i, who := range []struct{ email, name string }{{"one@example.com", "Una One"}, {"two@example.com", "Tom Two"}} {
		s := checkout(aTest, sessionBody([]map[string]any{customItem(int64(1000*(i+1)), "usd", "Thing", 1)}, "metadata", map[string]string{"n": strconv.Itoa(i)}), who.email, who.name)
		want = append(want, paymentView{
			ID: deref(s.PaymentIntent), Amount: s.AmountTotal, AmountReceived: s.AmountTotal, Currency: "usd", Status: "succeeded",
			CustomerName: ptr(who.name), CustomerEmail: ptr(who.email), PaymentSession: &s.ID,
			FeeAmount: payments.Fee(payments.PlanFree, "usd", s.AmountTotal), Metadata: map[string]string{"n": strconv.Itoa(i)},
		})
	}
	iv := createIntentOK(t, h, aTest, map[string]any{"amount": 777, "currency": "eur", "description": "Embedded"})
	want = append(want, paymentView{ID: iv.PaymentIntentID, Amount: 777, Currency: "eur", Status: "requires_payment_method",
		Description: ptr("Embedded"), Metadata: map[string]string{}})
	s := checkout(aTest, sessionBody(oneItem(), "customer_id", cus.ID), "typed@example.com", "Kim Known")
	want = append(want, paymentView{
		ID: deref(s.PaymentIntent), Amount: 3000, AmountReceived: 3000, Currency: "usd", Status: "succeeded", Customer: &cus.ID,
		CustomerName: ptr("Kim Known"), CustomerEmail: ptr("typed@example.com"), PaymentSession: &s.ID,
		FeeAmount: payments.Fee(payments.PlanFree, "usd", 3000), Metadata: map[string]string{},
	})
	// Other merchants' and the live mode's payments must not show.
	checkout(bTest, sessionBody(oneItem()), "b@example.com", "B")
	checkout(aLive, sessionBody(oneItem()), "live@example.com", "L")
	createIntentOK(t, h, aLive, map[string]any{"amount": 100, "currency": "usd"})
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}

	t.Run("newest first with checkout details", func(t *testing.T) {
		ps, hasMore := listPayments(t, h, aTest, "")
		if hasMore {
			t.Errorf("got has_more true, want false")
		}
		for i := range ps {
			if i < len(want) {
				want[i].Created = ps[i].Created
			}
			if ps[i].Livemode {
				t.Errorf("payment %s: got livemode true, want false", ps[i].ID)
			}
		}
		wantSameJSON(t, "test payments", ps, want)
	})
	t.Run("paginates", func(t *testing.T) {
		var ids []string
		after := ""
		for page := 0; page < 10; page++ {
			q := "limit=3"
			if after != "" {
				q += "&starting_after=" + after
			}
			ps, hasMore := listPayments(t, h, aTest, q)
			ids = append(ids, paymentIDs(ps)...)
			if !hasMore {
				break
			}
			if len(ps) != 3 {
				t.Fatalf("got a page of %d with has_more true, want 3", len(ps))
			}
			after = ps[len(ps)-1].ID
		}
		if got, w := strings.Join(ids, ","), strings.Join(paymentIDs(want), ","); got != w {
			t.Errorf("got pages %s, want %s", got, w)
		}
		ps, hasMore := listPayments(t, h, aTest, "limit=4")
		if len(ps) != 4 || hasMore {
			t.Errorf("limit=4: got %d items has_more %v, want 4 and false", len(ps), hasMore)
		}
	})
	t.Run("bad paging", func(t *testing.T) {
		for _, q := range []string{"limit=0", "limit=101", "limit=x", "starting_after=", "starting_after=pi_doesnotexist000000000"} {
			wantValidation(t, h.do("GET", "/v1/test-payments?"+q, aTest, nil), "")
		}
		// Another merchant's payment is not a cursor here.
		bp, _ := listPayments(t, h, bTest, "")
		if len(bp) != 1 {
			t.Fatalf("got %d payments for B, want 1", len(bp))
		}
		wantValidation(t, h.do("GET", "/v1/test-payments?starting_after="+bp[0].ID, aTest, nil), "starting_after")
	})
	t.Run("another merchant sees only its own", func(t *testing.T) {
		ps, _ := listPayments(t, h, bTest, "limit=100")
		for _, p := range ps {
			for _, w := range want {
				if p.ID == w.ID {
					t.Errorf("B's list holds A's payment %s", p.ID)
				}
			}
		}
		if len(ps) != 1 || deref(ps[0].CustomerEmail) != "b@example.com" {
			t.Errorf("got B's payments %+v, want its one checkout", ps)
		}
	})
	t.Run("a live key", func(t *testing.T) {
		wantError(t, h.do("GET", "/v1/test-payments", aLive, nil), http.StatusBadRequest, "validation_error")
		wantError(t, h.do("GET", "/v1/test-payments?limit=5", aLive, nil), http.StatusBadRequest, "validation_error")
	})
}

// --- events -------------------------------------------------------------------

// TestCheckoutEvents: a paid checkout writes checkout.session.completed then
// payment_intent.succeeded, in the session's mode only; a decline first
// writes payment_intent.payment_failed.
func TestCheckoutEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})

	// Both events of a payment are written in one transaction; their order
	// must hold every time, so check several sessions.
	for i := range 8 {
		for _, live := range []bool{false, true} {
			t.Run(fmt.Sprintf("success %d livemode %v", i, live), func(t *testing.T) {
				m := h.merchant(payments.PlanFree)
				key := h.key(m, live)
				md := map[string]string{"order_id": fmt.Sprintf("o-%d", i)}
				s := createSessionOK(t, h, key, sessionBody(oneItem(), "metadata", md))
				if evs := events(t, h, m, live); len(evs) != 0 {
					t.Fatalf("got events %v before payment, want none", eventTypes(evs))
				}
				payOK(t, h, s, "e@example.com", "E")
				done := getSessionOK(t, h, key, s.ID)
				evs := events(t, h, m, live)
				if got := strings.Join(eventTypes(evs), ","); got != "checkout.session.completed,payment_intent.succeeded" {
					t.Fatalf("got events %s, want checkout.session.completed,payment_intent.succeeded", got)
				}
				cs, pi := evs[0], evs[1]
				if cs.Data.ID != s.ID || cs.Data.Status != "complete" || cs.Data.PaymentStatus != "paid" || deref(cs.Data.PaymentIntent) != deref(done.PaymentIntent) {
					t.Errorf("checkout.session.completed data: got id %s status %s payment_status %s payment_intent %s, want %s complete paid %s",
						cs.Data.ID, cs.Data.Status, cs.Data.PaymentStatus, deref(cs.Data.PaymentIntent), s.ID, deref(done.PaymentIntent))
				}
				wantSameJSON(t, "checkout.session.completed data.metadata", cs.Data.Metadata, md)
				if pi.Data.ID != deref(done.PaymentIntent) || pi.Data.Amount != done.AmountTotal || pi.Data.Status != "succeeded" || deref(pi.Data.PaymentSession) != s.ID {
					t.Errorf("payment_intent.succeeded data: got id %s amount %d status %s session %s, want %s %d succeeded %s",
						pi.Data.ID, pi.Data.Amount, pi.Data.Status, deref(pi.Data.PaymentSession), deref(done.PaymentIntent), done.AmountTotal, s.ID)
				}
				wantSameJSON(t, "payment_intent.succeeded data.metadata", pi.Data.Metadata, md)
				for _, e := range evs {
					if !strings.HasPrefix(e.ID, "evt_") || e.Livemode != live || e.Created < s.Created {
						t.Errorf("event %s: got livemode %v created %d, want evt_, %v, created ≥ %d", e.ID, e.Livemode, e.Created, live, s.Created)
					}
				}
				// data is the object as the API returns it.
				var data struct {
					Data sessionView `json:"data"`
				}
				if err := json.Unmarshal(cs.Raw, &data); err != nil {
					t.Fatal(err)
				}
				wantSameJSON(t, "checkout.session.completed data", data.Data, done)
				if other := events(t, h, m, !live); len(other) != 0 {
					t.Errorf("got events %v in the other mode, want none", eventTypes(other))
				}
			})
		}
	}

	t.Run("decline first", func(t *testing.T) {
		m := h.merchant(payments.PlanFree)
		key := h.key(m, false)
		md := map[string]string{"order_id": "o-declined"}
		s := createSessionOK(t, h, key, sessionBody(oneItem(), "metadata", md))
		r := payCheckout(t, h, s.ID, cardForm(sandbox.CardDeclined, "d@example.com", "Dee"))
		if r.Status != http.StatusPaymentRequired || !strings.Contains(r.Body, "declined") {
			t.Fatalf("got %d, want the 402 page saying the card was declined", r.Status)
		}
		mid := getSessionOK(t, h, key, s.ID)
		if mid.Status != "open" || mid.PaymentStatus != "unpaid" || mid.URL == nil {
			t.Errorf("after a decline: got status %s payment_status %s url %s, want open, unpaid and the url", mid.Status, mid.PaymentStatus, deref(mid.URL))
		}
		evs := events(t, h, m, false)
		if len(evs) != 1 || evs[0].Type != "payment_intent.payment_failed" {
			t.Fatalf("got events %v, want [payment_intent.payment_failed]", eventTypes(evs))
		}
		if evs[0].Data.ID != deref(mid.PaymentIntent) || deref(evs[0].Data.LastDecline) != "card_declined" {
			t.Errorf("got data.id %s last_decline_code %s, want %s card_declined", evs[0].Data.ID, deref(evs[0].Data.LastDecline), deref(mid.PaymentIntent))
		}
		wantSameJSON(t, "payment_failed data.metadata", evs[0].Data.Metadata, md)

		payOK(t, h, s, "d@example.com", "Dee")
		done := getSessionOK(t, h, key, s.ID)
		evs = events(t, h, m, false)
		if got := strings.Join(eventTypes(evs), ","); got != "payment_intent.payment_failed,checkout.session.completed,payment_intent.succeeded" {
			t.Fatalf("got events %s, want payment_failed, completed, succeeded", got)
		}
		if deref(done.PaymentIntent) != deref(mid.PaymentIntent) || evs[2].Data.ID != deref(done.PaymentIntent) {
			t.Errorf("got payment %s after the retry (event %s), want the same payment %s as the decline", deref(done.PaymentIntent), evs[2].Data.ID, deref(mid.PaymentIntent))
		}
		var n int
		if err := h.db.Get(&n, `SELECT count(*) FROM payment_intents WHERE session_id = $1`, s.ID); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("got %d payment rows for the session, want 1", n)
		}
	})
}

// --- concurrency ----------------------------------------------------------------

// TestCheckoutConcurrentPay: ten submits of the same session at once charge
// once: one redirect, the rest told the session is paid.
func TestCheckoutConcurrentPay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, false)
	s := createSessionOK(t, h, key, sessionBody(oneItem()))

	const n = 10
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]pageResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = postCheckout(h, s.ID, cardForm(sandbox.CardSuccess, fmt.Sprintf("c%d@example.com", i), "C"))
		}()
	}
	close(start)
	wg.Wait()

	statuses := map[int]int{}
	want := strings.ReplaceAll(successURL, "{CHECKOUT_SESSION_ID}", s.ID)
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		statuses[r.Status]++
		if r.Status == http.StatusSeeOther && r.Location != want {
			t.Errorf("got Location %q, want %q", r.Location, want)
		}
	}
	if statuses[http.StatusSeeOther] != 1 || statuses[http.StatusGone] != n-1 {
		t.Errorf("got statuses %v, want one 303 and %d 410", statuses, n-1)
	}

	var rows []struct {
		ID     string `db:"id"`
		Status string `db:"status"`
	}
	if err := h.db.Select(&rows, `SELECT id, status FROM payment_intents WHERE session_id = $1`, s.ID); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Status != "succeeded" {
		t.Errorf("got payment rows %+v, want exactly one succeeded", rows)
	}
	evs := events(t, h, m, false)
	if c := countType(evs, "payment_intent.succeeded"); c != 1 {
		t.Errorf("got %d payment_intent.succeeded events, want 1", c)
	}
	if c := countType(evs, "checkout.session.completed"); c != 1 {
		t.Errorf("got %d checkout.session.completed events, want 1", c)
	}
	if len(evs) != 2 {
		t.Errorf("got events %v, want exactly completed and succeeded", eventTypes(evs))
	}
	got := getSessionOK(t, h, key, s.ID)
	if got.Status != "complete" || len(rows) == 1 && deref(got.PaymentIntent) != rows[0].ID {
		t.Errorf("got session status %s payment_intent %s, want complete and the one payment", got.Status, deref(got.PaymentIntent))
	}
}
