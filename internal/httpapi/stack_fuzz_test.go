package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// stackObjects are real objects of the fuzz merchant, so that fuzzed ids
// and bodies start from ones that exist and reach past the lookups.
type stackObjects struct {
	ids        []string // one of each kind: prod_, price_, cus_, cs_ (open), pi_, re_, dp_, we_
	product    string
	price      string
	customer   string
	session    string // open, for the checkout page
	intent     string // unpaid, for the confirm endpoint
	pk, secret string // the intent's publishable key and client secret
	paid       string // a succeeded payment with balance left to refund
	dispute    string
	endpoint   string
}

func newStackObjects(f *testing.F, h *harness, merchantID string) stackObjects {
	f.Helper()
	ctx := context.Background()
	sc := payments.Scope{MerchantID: merchantID}
	must := func(err error) {
		f.Helper()
		if err != nil {
			f.Fatal(err)
		}
	}
	str := func(s string) *string { return &s }
	num := func(n int64) *int64 { return &n }
	var o stackObjects

	p, err := h.svc.CreateProduct(ctx, sc, payments.ProductInput{Name: str("Mug"), Price: &payments.PriceInput{Amount: num(1500), Currency: str("usd")}})
	must(err)
	o.product, o.price = p.ID, p.DefaultPrice.ID
	cu, err := h.svc.CreateCustomer(ctx, sc, payments.CustomerInput{Email: str("ada@example.com")})
	must(err)
	o.customer = cu.ID
	cs, err := h.svc.CreateSession(ctx, sc, payments.SessionInput{
		LineItems:  []payments.LineItemInput{{PriceID: &o.price, Quantity: num(1)}},
		SuccessURL: str("https://shop.example/ok?cs={CHECKOUT_SESSION_ID}"), CancelURL: str("https://shop.example/cart"),
		CollectShippingAddress: func() *bool { b := true; return &b }(),
	})
	must(err)
	o.session = cs.ID
	in, err := h.svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: num(2000), Currency: str("usd")})
	must(err)
	o.intent, o.pk, o.secret = in.PaymentIntentID, in.PublishableKey, in.ClientSecret
	for range 3 { // a balance the fuzzer takes a while to refund away
		fuzzPayment(f, h, merchantID, 99999999, sandbox.CardSuccess)
	}
	o.paid = fuzzPayment(f, h, merchantID, 5000, sandbox.CardSuccess)
	re, err := h.svc.CreateRefund(ctx, sc, payments.RefundInput{PaymentIntent: &o.paid, Amount: num(100)})
	must(err)
	disputed := fuzzPayment(f, h, merchantID, 2500, sandbox.CardDispute)
	var pev string
	must(h.db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, disputed))
	must(h.svc.ApplyProcessorEvent(ctx, sc, pev))
	must(h.db.Get(&o.dispute, `SELECT id FROM disputes WHERE payment_intent_id = $1`, disputed))
	we, err := h.svc.CreateEndpoint(ctx, sc, payments.EndpointInput{URL: str("https://hooks.example/in")})
	must(err)
	o.endpoint = we.ID
	o.ids = []string{o.product, o.price, o.customer, o.session, o.intent, re.ID, o.dispute, o.endpoint}
	return o
}

// pickRoute returns the route named "METHOD /path" exactly, else one chosen
// by the name's hash: every route is reachable from any string.
func pickRoute(routes gin.RoutesInfo, name string) gin.RouteInfo {
	for _, r := range routes {
		if r.Method+" "+r.Path == name {
			return r
		}
	}
	hash := fnv.New32a()
	hash.Write([]byte(name))
	return routes[hash.Sum32()%uint32(len(routes))]
}

// fillParams puts param in place of each :name (and *name) segment.
func fillParams(pattern, param string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			segs[i] = param
		}
	}
	return strings.Join(segs, "/")
}

// stackRequest is a request as the server would have parsed it, but with
// any bytes in the path, query, headers and body: net/http's own checks of
// the wire are skipped, the gate must hold without them.
func stackRequest(ctx context.Context, method, path, rawQuery, ctype, auth string, idem *string, body []byte) *http.Request {
	req := &http.Request{
		Method: method, URL: &url.URL{Path: path, RawQuery: rawQuery}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Host: "api.example", RemoteAddr: "192.0.2.1:1234", RequestURI: path,
		Body: http.NoBody, ContentLength: int64(len(body)),
	}
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	req.Header.Set("Authorization", auth)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if idem != nil {
		req.Header.Set("Idempotency-Key", *idem)
	}
	return req.WithContext(ctx)
}

// checkStackAnswer fails a 5xx, and an answer outside the envelope: on /v1
// (and for no route) it must match openapi.yaml and carry the envelope; a
// public page answers a page, its JSON, a script or a redirect.
func checkStackAnswer(t *testing.T, route gin.RouteInfo, req *http.Request, res *http.Response) {
	t.Helper()
	raw, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(raw))
	what := fmt.Sprintf("%s %q (query %q)", req.Method, req.URL.Path, req.URL.RawQuery)
	if res.StatusCode >= 500 {
		t.Fatalf("%s: got %d %s", what, res.StatusCode, raw)
	}
	media, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	api := strings.HasPrefix(route.Path, "/v1/") || res.StatusCode == http.StatusNotFound && strings.Contains(string(raw), `"endpoint_not_found"`)
	if api {
		if err := validator.Response(req, res); err != nil {
			t.Errorf("%s: response does not match openapi.yaml: %v", what, err)
		}
		if media == "application/yaml" && res.StatusCode == http.StatusOK {
			return
		}
		r := &response{Status: res.StatusCode, Header: res.Header, Raw: raw}
		if err := json.Unmarshal(raw, &r.Body); err != nil {
			t.Fatalf("%s: body is not JSON: %q", what, raw)
		}
		checkEnvelope(t, r)
		return
	}
	switch {
	case res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusSeeOther:
	case media == "text/html":
		if !bytes.HasPrefix(raw, []byte("<!doctype html>")) {
			t.Errorf("%s: got %d text/html that is not a page: %q", what, res.StatusCode, raw)
		}
	case media == "application/json":
		var v struct {
			ID    string `json:"id"`
			Error *struct{ Code, Message string }
		}
		if json.Unmarshal(raw, &v) != nil || (v.ID == "" && (v.Error == nil || v.Error.Code == "" || v.Error.Message == "")) {
			t.Errorf("%s: got %d JSON without an id or an error: %q", what, res.StatusCode, raw)
		}
	case media == "text/javascript" && res.StatusCode == http.StatusOK:
	default:
		t.Errorf("%s: got %d %q: %q", what, res.StatusCode, res.Header.Get("Content-Type"), raw)
	}
}

// FuzzStack drives every route of the real engine, enumerated from the
// engine itself (a new route is fuzzed without editing this), down to
// PostgreSQL and Redis, with any bytes in the path parameter, the query,
// the headers the service reads and the body. No input may give a 5xx or
// an answer outside the envelope.
//
// Inputs: route is "METHOD /pattern" (or any string, hashed to a route);
// an empty auth is the fuzz merchant's valid key, any other is the whole
// Authorization header; an empty idem sends no Idempotency-Key, any other
// sends idem without its first byte (so "\x01" is an empty key).
func FuzzStack(f *testing.F) {
	h, m, key := fuzzServerWith(f, harnessOpts{allowPrivateWebhooks: true}) // no DNS in a fuzz loop
	o := newStackObjects(f, h, m)
	routes := h.engine.Routes()
	if len(routes) == 0 {
		f.Fatal("the engine has no routes")
	}
	const jsonType, formType = "application/json", "application/x-www-form-urlencoded"
	add := func(route, param, query, ctype, auth, idem, body string) {
		f.Add(route, []byte(param), []byte(query), ctype, []byte(auth), []byte(idem), []byte(body))
	}

	// The cases of the issue, as curl sent them (-d is a form to curl).
	add("POST /v1/customers", "", "", formType, "", "\x01k\x99", `{"email":"a@example.com"}`)
	add("GET /v1/products/:id", "prod_\x00", "", "", "", "", "")
	add("GET /v1/customers", "", "starting_after=%FF", "", "", "", "")
	add("POST /v1/customers", "", "", formType, "", "", `{"email":"a@example.com","metadata":{"k":"v\u0000"}}`)
	add("POST /v1/refunds", "", "", formType, "", "", `{"payment_intent":"pi_\u0000"}`)
	add("GET /checkout/:id", "\xff", "", "", "", "", "")
	add("POST /checkout/:id", o.session, "", formType, "", "", "name=%00&email=a%40example.com&card_number=4242424242424242&exp_month=12&exp_year=2040&cvc=123")
	add("POST /sandbox/v1/payment_intents/:id/confirm", "pi_\x00", "", jsonType, "", "", `{"publishable_key":"`+o.pk+`","client_secret":"`+o.secret+`","card_number":"4242424242424242"}`)

	// Text that is not text: NUL, invalid and overlong UTF-8, surrogates
	// (encoded, and escaped alone in JSON).
	badText := []string{"\x00", "\xff", "\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x00b", "%00", "\x01\x1f"}
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	deepObj := strings.Repeat(`{"metadata":`, 5000) + `{}` + strings.Repeat("}", 5000)
	bodies := []string{
		`{"name":"Mug","price":{"amount":1200,"currency":"usd"},"metadata":{"sku":"m-1"}}`,
		`{"email":"ada@example.com","name":"Ada","phone":"+1 555","metadata":{"crm":"42"}}`,
		`{"line_items":[{"price_id":"` + o.price + `","quantity":1},{"amount":500,"currency":"usd","name":"Wrap","quantity":1}],` +
			`"success_url":"https://a.example/s","cancel_url":"https://a.example/c","customer_id":"` + o.customer + `"}`,
		`{"amount":1000,"currency":"usd","description":"d","metadata":{"order":"1"}}`,
		`{"payment_intent":"` + o.paid + `","amount":1}`,
		`{"evidence":{"customer_name":"Ada"}}`,
		`{"url":"https://hooks.example/b","events":["charge.refunded"]}`,
		`{"publishable_key":"` + o.pk + `","client_secret":"` + o.secret + `","card_number":"4000000000000002"}`,
		`{"name":"\ud800"}`, `{"name":"\udc00\ud800"}`, `{"name":"\ud83d\ude00"}`,
		`{"metadata":{"k\u0000":"v"}}`, `{"email":"a@example.com","name":"\\u0000"}`,
		`{"amount":1e400,"currency":"usd"}`, `{"amount":1.5,"currency":"usd"}`, `{"amount":-0,"currency":"usd"}`,
		`{"amount":123456789012345678901234567890,"currency":"usd"}`, `{"price":{"amount":1E2,"currency":"usd"},"name":"n"}`,
		`{"name":null}`, `{"name":"a","name":"b"}`, `{"name":"a"} trailing`, `[]`, `null`, `"\u0000"`, `{`,
		deep, deepObj,
	}
	for _, b := range badText {
		bodies = append(bodies, `{"name":"`+b+`","email":"`+b+`@example.com","metadata":{"`+b+`":"`+b+`"}}`)
	}
	queries := []string{"limit=100&starting_after=" + o.customer, "starting_after=%00", "limit=%FF", "limit=1e400",
		"limit=1.5", "%FF=%FE", "a=%C0%80&starting_after=%ED%A0%80", "\xff=\x00;"}
	authHeaders := []string{"bearer " + key, "Bearer " + key + "\x00", "Bearer \xff", "Bearer svc_test_" + strings.Repeat("é", 100)}
	idems := []string{"\x01", "\x01" + strings.Repeat("é", 255), "\x01" + strings.Repeat("k", 256), "\x01k\x00"}

	// Every route: each real id and bad text as its parameter; GETs each
	// query; writes each body. Headers are the gate's, the same on every
	// route: one read and one write route take those.
	for i, r := range routes {
		name := r.Method + " " + r.Path
		if strings.ContainsAny(r.Path, ":*") {
			for _, id := range append(o.ids, badText[:5]...) {
				add(name, id, "", "", "", "", "")
			}
		}
		if r.Method == http.MethodGet {
			for _, q := range queries {
				add(name, o.product, q, "", "", "", "")
			}
		}
		if i < 2 || name == "POST /v1/customers" {
			for _, a := range authHeaders {
				add(name, o.product, "", "", a, "", "")
			}
			for _, i := range idems {
				add(name, o.product, "", jsonType, "", i, bodies[1])
			}
		}
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			continue
		}
		param := o.product
		if strings.HasPrefix(r.Path, "/checkout/") {
			param = o.session
		} else if strings.HasPrefix(r.Path, "/sandbox/") {
			param = o.intent
		}
		for _, b := range bodies {
			add(name, param, "", jsonType, "", "", b)
		}
		for _, ct := range []string{formType, "multipart/form-data; boundary=x", "text/plain"} {
			add(name, param, "", ct, "", "", "name=%00&email=%FF&x%00=1")
		}
	}

	f.Fuzz(func(t *testing.T, route string, param, query []byte, ctype string, auth, idem, body []byte) {
		rt := pickRoute(routes, route)
		authHeader := "Bearer " + key
		if len(auth) > 0 {
			authHeader = string(auth)
		}
		var idemKey *string
		if len(idem) > 0 {
			k := string(idem[1:])
			idemKey = &k
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := stackRequest(ctx, rt.Method, fillParams(rt.Path, string(param)), string(query), ctype, authHeader, idemKey, body)
		rec := httptest.NewRecorder()
		h.engine.ServeHTTP(rec, req)
		res := rec.Result()
		checkStackAnswer(t, rt, req, res)
		if bytes.Contains(rec.Body.Bytes(), []byte(`"prohibited_content"`)) {
			// Keep the merchant usable for the inputs that follow.
			if _, err := h.svc.UnsuspendMerchant(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
	})
}
