package validate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/parameters"
	"github.com/pb33f/libopenapi-validator/schema_validation"

	"paysvc/internal/apispec"
	"paysvc/internal/payments"
)

const requestID = "6f1c2b8e-3d4a-4c5b-9e6f-7a8b9c0d1e2f"

// productJSON is a product as the server returns it, every key present.
func productJSON() map[string]any {
	return map[string]any{
		"id":          "prod_x",
		"name":        "T-shirt",
		"description": nil,
		"active":      true,
		"images":      []any{"https://example.com/a.png"},
		"url":         nil,
		"metadata":    map[string]any{"sku": "ts-1"},
		"default_price": map[string]any{
			"id":           "price_abc",
			"amount":       1500,
			"currency":     "usd",
			"tax_behavior": nil,
		},
		"shippable":            true,
		"unit_label":           nil,
		"statement_descriptor": nil,
		"tax_code":             nil,
		"livemode":             false,
		"created":              1735689600,
	}
}

func customerJSON() map[string]any {
	return map[string]any{
		"id":       "cus_x",
		"email":    "a@example.com",
		"name":     nil,
		"phone":    nil,
		"metadata": map[string]any{},
		"livemode": false,
		"created":  1735689600,
	}
}

func success(data any) map[string]any {
	return map[string]any{"success": true, "data": data, "request_id": requestID}
}

func failure(code, msg string) map[string]any {
	return map[string]any{
		"success":    false,
		"error":      map[string]any{"code": code, "message": msg},
		"request_id": requestID,
	}
}

// response builds a response the way the server would write it.
func response(t *testing.T, status int, body any, mutate ...func(http.Header)) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h := rec.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("X-Request-Id", requestID)
	h.Set("X-API-Version", "2025-01-01")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
	if status == http.StatusTooManyRequests {
		h.Set("Retry-After", "60")
	}
	for _, m := range mutate {
		m(h)
	}
	rec.WriteHeader(status)
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = rec.Write(raw)
	return rec.Result()
}

func request(method, target, body string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	req.Header.Set("Authorization", "Bearer svc_test_abc")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func mustNew(t *testing.T) *Validator {
	t.Helper()
	v, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// mustFail asserts err is a validation *Error mentioning every want substring.
func mustFail(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("validation passed, want a failure")
	}
	var verr *Error
	if !errors.As(err, &verr) || len(verr.Problems) == 0 {
		t.Fatalf("error is %T %v, want *Error with problems", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q:\n%v", w, err)
		}
	}
	t.Logf("expected failure:\n%v", err)
}

func TestDocumentBuilds(t *testing.T) {
	doc, err := libopenapi.NewDocument(apispec.YAML)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		for _, e := range unwrapAll(err) {
			t.Errorf("model building error: %v", e)
		}
		t.FailNow()
	}
	m := model.Model
	if m.Version != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", m.Version)
	}
	if m.Info == nil || m.Info.Version != "2025-01-01" {
		t.Errorf("info.version is not 2025-01-01")
	}
	if len(m.Servers) != 1 || m.Servers[0].URL != "http://localhost:8080" {
		t.Errorf("servers = %v, want http://localhost:8080", m.Servers)
	}

	// The exact set of operations the contract covers now.
	want := map[string]bool{
		"POST /v1/products": true, "GET /v1/products": true,
		"GET /v1/products/{id}": true, "PUT /v1/products/{id}": true, "DELETE /v1/products/{id}": true,
		"POST /v1/customers": true, "GET /v1/customers": true,
		"GET /v1/customers/{id}": true, "PUT /v1/customers/{id}": true, "DELETE /v1/customers/{id}": true,
		"POST /v1/payment-sessions": true, "GET /v1/payment-sessions/{id}": true,
		"POST /v1/payment-intents": true, "GET /v1/test-payments": true,
		"POST /v1/webhook-endpoints": true, "GET /v1/webhook-endpoints": true,
		"DELETE /v1/webhook-endpoints/{id}": true,
		"GET /v1/events":                    true, "GET /v1/events/{id}": true,
		"POST /v1/refunds": true, "GET /v1/disputes": true, "GET /v1/disputes/{id}": true,
		"POST /v1/disputes/{id}/evidence": true, "GET /v1/refunds/{id}": true, "GET /v1/balance": true,
		"GET /v1/openapi.yaml": true,
	}
	want["POST /v1/subscription-products"], want["GET /v1/subscription-products"] = true, true
	for _, op := range []string{"POST /v1/subscription-sessions", "GET /v1/subscriptions", "GET /v1/subscriptions/{id}",
		"POST /v1/subscriptions/{id}/cancel", "POST /v1/subscriptions/{id}/resume",
		"POST /v1/subscriptions/{id}/portal-session"} {
		want[op] = true
	}
	for _, op := range []string{"GET /v1/webhook-endpoints/{id}", "POST /v1/webhook-endpoints/{id}",
		"POST /v1/webhook-endpoints/{id}/rotate-secret", "GET /v1/webhook-endpoints/{id}/deliveries",
		"GET /v1/webhook-endpoints/{id}/deliveries/{delivery}", "POST /v1/events/{id}/resend",
		"GET /v1/account", "POST /stripe/webhook",
		"PATCH /v1/subscriptions/{id}/quantity", "POST /v1/subscriptions/{id}/quantity/preview"} {
		want[op] = true
	}
	got := map[string]bool{}
	for path, item := range m.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			key := strings.ToUpper(method) + " " + path
			got[key] = true
			if !strings.HasPrefix(path, "/v1/") {
				continue // Stripe's webhook receiver: Stripe's conventions, not the API's
			}
			for _, code := range []string{"200", "400", "401", "404", "413", "429", "500", "502"} {
				r := op.Responses.Codes.GetOrZero(code)
				if r == nil {
					t.Errorf("%s: response %s not declared", key, code)
					continue
				}
				for _, h := range []string{"X-Request-Id", "X-API-Version"} {
					if r.Headers == nil || r.Headers.GetOrZero(h) == nil {
						t.Errorf("%s %s: header %s not declared", key, code, h)
					}
				}
				if code == "429" && (r.Headers == nil || r.Headers.GetOrZero("Retry-After") == nil) {
					t.Errorf("%s 429: Retry-After not declared", key)
				}
			}
			if method == "post" {
				found := false
				for _, p := range op.Parameters {
					if p.Name == "Idempotency-Key" && p.In == "header" {
						found = true
					}
				}
				if !found {
					t.Errorf("%s: Idempotency-Key header parameter not declared", key)
				}
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("operation %s missing", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("unexpected operation %s", k)
		}
	}

	// New also checks the document against the OpenAPI 3.1 meta-schema.
	mustNew(t)
}

func unwrapAll(err error) []error {
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, unwrapAll(e)...)
		}
		return out
	}
	return []error{err}
}

func TestProductResponseValid(t *testing.T) {
	v := mustNew(t)
	req := request(http.MethodGet, "/v1/products/prod_x", "")
	resp := response(t, http.StatusOK, success(productJSON()))
	if err := v.Response(req, resp); err != nil {
		t.Fatalf("valid product response rejected:\n%v", err)
	}
	// The caller can still read the body.
	b, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(b), `"prod_x"`) {
		t.Fatalf("body not readable after validation: %q, %v", b, err)
	}

	// No default price, archived.
	p := productJSON()
	p["default_price"] = nil
	p["active"] = false
	if err := v.Response(req, response(t, http.StatusOK, success(p))); err != nil {
		t.Fatalf("product without default price rejected:\n%v", err)
	}
}

func TestProductResponseMissingCreated(t *testing.T) {
	v := mustNew(t)
	p := productJSON()
	delete(p, "created")
	err := v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, success(p)))
	mustFail(t, err, "created")
}

func TestProductResponseExtraField(t *testing.T) {
	v := mustNew(t)
	p := productJSON()
	p["price"] = 100
	err := v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, success(p)))
	mustFail(t, err, "price")

	// An extra field in the envelope fails too.
	env := success(productJSON())
	env["object"] = "product"
	err = v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, env))
	mustFail(t, err, "object")
}

func TestProductResponseAmountAsString(t *testing.T) {
	v := mustNew(t)
	p := productJSON()
	p["default_price"].(map[string]any)["amount"] = "1500"
	err := v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, success(p)))
	mustFail(t, err, "amount")
}

func TestProductResponseOtherDrift(t *testing.T) {
	v := mustNew(t)
	req := request(http.MethodGet, "/v1/products/prod_x", "")
	cases := map[string]func(p map[string]any){
		"wrong id prefix":       func(p map[string]any) { p["id"] = "prd_x" },
		"created as string":     func(p map[string]any) { p["created"] = "2025-01-01T00:00:00Z" },
		"metadata non-string":   func(p map[string]any) { p["metadata"] = map[string]any{"n": 1} },
		"null name":             func(p map[string]any) { p["name"] = nil },
		"price id prefix":       func(p map[string]any) { p["default_price"].(map[string]any)["id"] = "pr_1" },
		"image not a uri":       func(p map[string]any) { p["images"] = []any{"not a uri"} },
		"missing livemode":      func(p map[string]any) { delete(p, "livemode") },
		"missing default_price": func(p map[string]any) { delete(p, "default_price") },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			p := productJSON()
			mutate(p)
			mustFail(t, v.Response(req, response(t, http.StatusOK, success(p))))
		})
	}
	t.Run("success false", func(t *testing.T) {
		env := success(productJSON())
		env["success"] = false
		mustFail(t, v.Response(req, response(t, http.StatusOK, env)), "success")
	})
	t.Run("request_id not uuid", func(t *testing.T) {
		env := success(productJSON())
		env["request_id"] = "req_123"
		mustFail(t, v.Response(req, response(t, http.StatusOK, env)), "request_id")
	})
	t.Run("empty body", func(t *testing.T) {
		mustFail(t, v.Response(req, response(t, http.StatusOK, "")), "empty body")
	})
	t.Run("undeclared status", func(t *testing.T) {
		mustFail(t, v.Response(req, response(t, http.StatusCreated, success(productJSON()))))
	})
	t.Run("missing X-API-Version", func(t *testing.T) {
		resp := response(t, http.StatusOK, success(productJSON()), func(h http.Header) { h.Del("X-API-Version") })
		mustFail(t, v.Response(req, resp), "X-API-Version")
	})
	t.Run("wrong X-API-Version", func(t *testing.T) {
		resp := response(t, http.StatusOK, success(productJSON()), func(h http.Header) { h.Set("X-API-Version", "2024-01-01") })
		mustFail(t, v.Response(req, resp))
	})
	t.Run("bad Idempotent-Replayed", func(t *testing.T) {
		post := request(http.MethodPost, "/v1/products", "")
		ok := response(t, http.StatusOK, success(productJSON()), func(h http.Header) { h.Set("Idempotent-Replayed", "true") })
		if err := v.Response(post, ok); err != nil {
			t.Fatalf("replayed response rejected:\n%v", err)
		}
		resp := response(t, http.StatusOK, success(productJSON()), func(h http.Header) { h.Set("Idempotent-Replayed", "yes") })
		mustFail(t, v.Response(post, resp), "Idempotent-Replayed")
	})
	t.Run("not json", func(t *testing.T) {
		resp := response(t, http.StatusOK, success(productJSON()), func(h http.Header) { h.Set("Content-Type", "text/plain") })
		mustFail(t, v.Response(req, resp))
	})
}

func TestErrorEnvelope(t *testing.T) {
	v := mustNew(t)
	req := request(http.MethodGet, "/v1/products/prod_x", "")
	if err := v.Response(req, response(t, http.StatusNotFound, failure("product_not_found", "no such product"))); err != nil {
		t.Fatalf("valid error envelope rejected:\n%v", err)
	}
	mustFail(t, v.Response(req, response(t, http.StatusNotFound, failure("not_found", "no such product"))), "code")

	env := failure("product_not_found", "x")
	delete(env["error"].(map[string]any), "message")
	mustFail(t, v.Response(req, response(t, http.StatusNotFound, env)), "message")

	// 429 must carry Retry-After.
	lreq := request(http.MethodGet, "/v1/products", "")
	if err := v.Response(lreq, response(t, http.StatusTooManyRequests, failure("rate_limit_exceeded", "slow down"))); err != nil {
		t.Fatalf("valid 429 rejected:\n%v", err)
	}
	resp := response(t, http.StatusTooManyRequests, failure("rate_limit_exceeded", "slow down"),
		func(h http.Header) { h.Del("Retry-After") })
	mustFail(t, v.Response(lreq, resp), "Retry-After")
}

func TestUnknownEndpoint(t *testing.T) {
	v := mustNew(t)
	for _, req := range []*http.Request{
		request(http.MethodGet, "/v1/nope", ""),
		request(http.MethodPatch, "/v1/products/prod_x", `{}`), // known path, unknown method
	} {
		name := req.Method + " " + req.URL.Path
		if err := v.Response(req, response(t, http.StatusNotFound, failure("endpoint_not_found", "unknown endpoint"))); err != nil {
			t.Errorf("%s: valid endpoint_not_found rejected:\n%v", name, err)
		}
		mustFail(t, v.Response(req, response(t, http.StatusNotFound, failure("nope", "unknown endpoint"))), "code")
		mustFail(t, v.Response(req, response(t, http.StatusNotFound, map[string]any{"error": "not found"})))
		mustFail(t, v.Response(req, response(t, http.StatusOK, success(productJSON()))), "matches no operation")
		mustFail(t, v.Request(req), "not found")
	}
}

func TestOtherResponses(t *testing.T) {
	v := mustNew(t)
	cases := []struct {
		method, target string
		body           any
	}{
		{http.MethodPost, "/v1/products", success(productJSON())},
		{http.MethodPut, "/v1/products/prod_x", success(productJSON())},
		{http.MethodGet, "/v1/products?limit=2", success(map[string]any{"data": []any{productJSON(), productJSON()}, "has_more": true})},
		{http.MethodGet, "/v1/products", success(map[string]any{"data": []any{}, "has_more": false})},
		{http.MethodDelete, "/v1/products/prod_x", success(map[string]any{"id": "prod_x", "deleted": true})},
		{http.MethodPost, "/v1/customers", success(customerJSON())},
		{http.MethodGet, "/v1/customers/cus_x", success(customerJSON())},
		{http.MethodPut, "/v1/customers/cus_x", success(customerJSON())},
		{http.MethodGet, "/v1/customers", success(map[string]any{"data": []any{customerJSON()}, "has_more": false})},
		{http.MethodDelete, "/v1/customers/cus_x", success(map[string]any{"id": "cus_x", "deleted": true})},
	}
	for _, c := range cases {
		req := request(c.method, c.target, "")
		if err := v.Response(req, response(t, http.StatusOK, c.body)); err != nil {
			t.Errorf("%s %s: valid response rejected:\n%v", c.method, c.target, err)
		}
	}

	// Drift in lists, deleted and customers is caught.
	mustFail(t, v.Response(request(http.MethodGet, "/v1/products", ""),
		response(t, http.StatusOK, success(map[string]any{"data": []any{}}))), "has_more")
	mustFail(t, v.Response(request(http.MethodDelete, "/v1/customers/cus_x", ""),
		response(t, http.StatusOK, success(map[string]any{"id": "cus_x", "deleted": false}))), "deleted")
	c := customerJSON()
	c["email"] = "not-an-email"
	mustFail(t, v.Response(request(http.MethodGet, "/v1/customers/cus_x", ""),
		response(t, http.StatusOK, success(c))), "email")
	c = customerJSON()
	delete(c, "phone")
	mustFail(t, v.Response(request(http.MethodGet, "/v1/customers/cus_x", ""),
		response(t, http.StatusOK, success(c))), "phone")

	// The YAML document itself.
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Type", "application/yaml")
	rec.Header().Set("X-Request-Id", requestID)
	rec.Header().Set("X-API-Version", "2025-01-01")
	rec.Header().Set("X-Content-Type-Options", "nosniff")
	rec.Header().Set("X-Frame-Options", "DENY")
	rec.Header().Set("Strict-Transport-Security", "max-age=63072000")
	_, _ = rec.Write(apispec.YAML)
	req := httptest.NewRequest(http.MethodGet, "/v1/openapi.yaml", nil)
	if err := v.Request(req); err != nil {
		t.Errorf("unauthenticated GET /v1/openapi.yaml rejected:\n%v", err)
	}
	if err := v.Response(req, rec.Result()); err != nil {
		t.Errorf("openapi.yaml response rejected:\n%v", err)
	}
}

func TestRequestValidation(t *testing.T) {
	v := mustNew(t)

	okBody := `{"name":"T-shirt","images":["https://example.com/a.png"],"statement_descriptor":"TSHIRT",` +
		`"price":{"amount":1500,"currency":"usd","tax_behavior":"exclusive"}}`
	req := request(http.MethodPost, "/v1/products", okBody)
	req.Header.Set("Idempotency-Key", "k-1")
	if err := v.Request(req); err != nil {
		t.Fatalf("valid create request rejected:\n%v", err)
	}
	// The body can still be read (and the request sent) afterwards.
	b, _ := io.ReadAll(req.Body)
	if string(b) != okBody {
		t.Fatalf("request body after validation = %q", b)
	}

	unknown := request(http.MethodPost, "/v1/products", `{"name":"T-shirt","colour":"red"}`)
	mustFail(t, v.Request(unknown), "colour")
	b, _ = io.ReadAll(unknown.Body)
	if !strings.Contains(string(b), "colour") {
		t.Fatalf("request body not restored after failed validation: %q", b)
	}

	bad := map[string]struct {
		method, target, body string
	}{
		"missing name":          {http.MethodPost, "/v1/products", `{"description":"x"}`},
		"empty name":            {http.MethodPost, "/v1/products", `{"name":""}`},
		"http image":            {http.MethodPost, "/v1/products", `{"name":"a","images":["http://x"]}`},
		"nine images":           {http.MethodPost, "/v1/products", `{"name":"a","images":["https://1","https://2","https://3","https://4","https://5","https://6","https://7","https://8","https://9"]}`},
		"long descriptor":       {http.MethodPost, "/v1/products", `{"name":"a","statement_descriptor":"12345678901234567890123"}`},
		"price unknown field":   {http.MethodPost, "/v1/products", `{"name":"a","price":{"amount":1,"currency":"usd","interval":"month"}}`},
		"price amount zero":     {http.MethodPost, "/v1/products", `{"name":"a","price":{"amount":0,"currency":"usd"}}`},
		"price bad currency":    {http.MethodPost, "/v1/products", `{"name":"a","price":{"amount":1,"currency":"us"}}`},
		"price bad tax":         {http.MethodPost, "/v1/products", `{"name":"a","price":{"amount":1,"currency":"usd","tax_behavior":"x"}}`},
		"update unknown field":  {http.MethodPut, "/v1/products/prod_x", `{"colour":"red"}`},
		"customer no email":     {http.MethodPost, "/v1/customers", `{"name":"a"}`},
		"customer bad email":    {http.MethodPost, "/v1/customers", `{"email":"nope"}`},
		"customer update extra": {http.MethodPut, "/v1/customers/cus_x", `{"email":"a@example.com","x":1}`},
		"limit zero":            {http.MethodGet, "/v1/products?limit=0", ""},
		"limit 101":             {http.MethodGet, "/v1/customers?limit=101", ""},
		"empty starting_after":  {http.MethodGet, "/v1/products?starting_after=", ""},
	}
	for name, c := range bad {
		t.Run(name, func(t *testing.T) {
			mustFail(t, v.Request(request(c.method, c.target, c.body)))
		})
	}

	t.Run("empty product update", func(t *testing.T) {
		if err := v.Request(request(http.MethodPut, "/v1/products/prod_x", `{}`)); err != nil {
			t.Fatalf("empty update rejected:\n%v", err)
		}
	})
	t.Run("list paging", func(t *testing.T) {
		if err := v.Request(request(http.MethodGet, "/v1/customers?limit=100&starting_after=cus_x", "")); err != nil {
			t.Fatalf("paged list rejected:\n%v", err)
		}
	})
	t.Run("idempotency key too long", func(t *testing.T) {
		r := request(http.MethodPost, "/v1/customers", `{"email":"a@example.com"}`)
		r.Header.Set("Idempotency-Key", strings.Repeat("k", 256))
		mustFail(t, v.Request(r), "Idempotency-Key")
	})
	t.Run("missing authorization", func(t *testing.T) {
		r := request(http.MethodGet, "/v1/products", "")
		r.Header.Del("Authorization")
		mustFail(t, v.Request(r), "Authorization")
	})
}

// TestConcurrentUse runs validations from many goroutines (go test -race).
func TestConcurrentUse(t *testing.T) {
	v := mustNew(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := productJSON()
			p["name"] = fmt.Sprintf("p%d", i)
			if err := v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, success(p))); err != nil {
				errs <- err
			}
			if err := v.Request(request(http.MethodPost, "/v1/products", `{"name":"x"}`)); err != nil {
				errs <- err
			}
			delete(p, "created")
			if err := v.Response(request(http.MethodGet, "/v1/products/prod_x", ""), response(t, http.StatusOK, success(p))); err == nil {
				errs <- errors.New("missing created passed")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v2 := mustNew(t); v2 != v {
		t.Error("New returned a different validator")
	}
}

// TestBuildReportsDocumentErrors shows that a broken contract makes New fail
// loudly instead of validating against a partial model.
func TestBuildReportsDocumentErrors(t *testing.T) {
	cases := map[string]string{
		"not yaml": "openapi: [3.1.0\n",
		"dangling $ref": `openapi: 3.1.0
info: {title: t, version: "1"}
paths:
  /x:
    get:
      responses:
        "200":
          description: ok
          content:
            application/json:
              schema:
                $ref: "#/components/schemas/Missing"
`,
		"invalid against the 3.1 meta-schema": `openapi: 3.1.0
info: {title: t}
paths:
  /x:
    get:
      responses:
        "200": {}
`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			v, err := build([]byte(doc))
			if err == nil {
				t.Fatalf("build succeeded (%v), want an error", v != nil)
			}
			t.Logf("reported: %v", err)
		})
	}
}

func endpointJSON() map[string]any {
	return map[string]any{
		"id":          "we_x",
		"url":         "https://example.com/hook",
		"events":      []any{"*"},
		"status":      "enabled",
		"description": nil,
		"livemode":    false,
		"created":     1735689600,

		"failure_count":              0,
		"disabled_reason":            nil,
		"disabled_at":                nil,
		"last_delivery_at":           nil,
		"previous_secret_expires_at": nil,
	}
}

// TestWebhookEndpointResponses: the secret is required in the create
// response and refused in the list; the list is an array in data.
func TestWebhookEndpointResponses(t *testing.T) {
	v := mustNew(t)
	post := request(http.MethodPost, "/v1/webhook-endpoints", "")
	list := request(http.MethodGet, "/v1/webhook-endpoints", "")
	del := request(http.MethodDelete, "/v1/webhook-endpoints/we_x", "")
	created := func() map[string]any {
		e := endpointJSON()
		e["secret"] = "whsec_" + strings.Repeat("aB3", 11)
		return e
	}
	typed := endpointJSON()
	typed["events"] = []any{"payment_intent.succeeded", "checkout.session.completed"}
	typed["description"] = "orders"
	typed["status"] = "disabled"
	typed["failure_count"], typed["disabled_reason"], typed["disabled_at"] = 10, "consecutive_failures", 1735690000

	valid := []struct {
		name string
		req  *http.Request
		body any
	}{
		{"create", post, success(created())},
		{"list", list, success([]any{endpointJSON(), typed})},
		{"empty list", list, success([]any{})},
		{"delete", del, success(map[string]any{"id": "we_x", "deleted": true})},
		{"delete unknown", del, failure("endpoint_not_found", "No such webhook endpoint")},
		{"http url", post, failure("webhook_url_must_be_https", "use https")},
	}
	for _, c := range valid {
		t.Run("valid "+c.name, func(t *testing.T) {
			status := http.StatusOK
			if env := c.body.(map[string]any); env["success"] == false {
				status = http.StatusBadRequest
				if c.req == del {
					status = http.StatusNotFound
				}
			}
			if err := v.Response(c.req, response(t, status, c.body)); err != nil {
				t.Errorf("got %v, want the response accepted", err)
			}
		})
	}

	drift := []struct {
		name string
		req  *http.Request
		body func() any
		want string
	}{
		{"create without secret", post, func() any { return success(endpointJSON()) }, "secret"},
		{"create secret without prefix", post, func() any { e := created(); e["secret"] = strings.Repeat("a", 38); return success(e) }, "secret"},
		{"create short secret", post, func() any { e := created(); e["secret"] = "whsec_abc"; return success(e) }, "secret"},
		{"list with secret", list, func() any { return success([]any{created()}) }, "secret"},
		{"list as a List", list, func() any { return success(map[string]any{"data": []any{endpointJSON()}, "has_more": false}) }, "data"},
		{"wrong id prefix", list, func() any { e := endpointJSON(); e["id"] = "whe_x"; return success([]any{e}) }, "id"},
		{"unknown event type", list, func() any { e := endpointJSON(); e["events"] = []any{"payment.succeeded"}; return success([]any{e}) }, "events"},
		{"unknown status", list, func() any { e := endpointJSON(); e["status"] = "active"; return success([]any{e}) }, "status"},
		{"missing description", list, func() any { e := endpointJSON(); delete(e, "description"); return success([]any{e}) }, "description"},
		{"missing livemode", post, func() any { e := created(); delete(e, "livemode"); return success(e) }, "livemode"},
	}
	for _, c := range drift {
		t.Run(c.name, func(t *testing.T) {
			mustFail(t, v.Response(c.req, response(t, http.StatusOK, c.body())), c.want)
		})
	}
}

func TestWebhookEndpointRequests(t *testing.T) {
	v := mustNew(t)
	good := []string{
		`{"url":"https://example.com/hook"}`,
		`{"url":"https://example.com/hook","events":["*"],"description":"all"}`,
		`{"url":"https://example.com/hook","events":["payment_intent.succeeded","charge.refunded"]}`,
	}
	for _, body := range good {
		if err := v.Request(request(http.MethodPost, "/v1/webhook-endpoints", body)); err != nil {
			t.Errorf("%s: got %v, want accepted", body, err)
		}
	}
	bad := map[string]string{
		"missing url":        `{"events":["*"]}`,
		"http url":           `{"url":"http://example.com/hook"}`,
		"unknown event type": `{"url":"https://example.com/hook","events":["payment.succeeded"]}`,
		"empty events":       `{"url":"https://example.com/hook","events":[]}`,
		"duplicate events":   `{"url":"https://example.com/hook","events":["charge.refunded","charge.refunded"]}`,
		"unknown field":      `{"url":"https://example.com/hook","secret":"whsec_x"}`,
	}
	for name, body := range bad {
		t.Run(name, func(t *testing.T) {
			mustFail(t, v.Request(request(http.MethodPost, "/v1/webhook-endpoints", body)))
		})
	}
}

// TestWebhooksSection checks the top-level webhooks entry: the delivery's
// headers and the event payload, against payments.EventTypes.
func TestWebhooksSection(t *testing.T) {
	v := mustNew(t)
	if v.model.Webhooks == nil || v.model.Webhooks.GetOrZero("event") == nil || v.model.Webhooks.GetOrZero("event").Post == nil {
		t.Fatal("got no webhooks.event.post, want the event delivery described")
	}
	op := v.model.Webhooks.GetOrZero("event").Post
	desc := strings.Join(strings.Fields(op.Description), " ")
	for _, w := range []string{"constant time", "sha256=", "exact raw request body", "event id", "2xx", "10 seconds"} {
		if !strings.Contains(desc, w) {
			t.Errorf("webhooks.event.post description does not mention %q", w)
		}
	}

	evtSchema := v.model.Components.Schemas.GetOrZero("EventType").Schema()
	var enum []string
	for _, n := range evtSchema.Enum {
		enum = append(enum, n.Value)
	}
	if !slices.Equal(enum, payments.EventTypes) {
		t.Errorf("got EventType enum %v, want payments.EventTypes %v", enum, payments.EventTypes)
	}

	headers := map[string]struct{ good, bad []string }{
		"X-Service-Signature": {
			good: []string{"sha256=" + strings.Repeat("0a", 32)},
			bad: []string{"", strings.Repeat("0a", 32), "SHA256=" + strings.Repeat("0a", 32),
				"sha256=" + strings.Repeat("0A", 32), "sha256=" + strings.Repeat("0", 63), "sha256=" + strings.Repeat("0", 65),
				"sha256=" + strings.Repeat("g", 64)},
		},
		"X-Service-Event-Id":   {good: []string{"evt_abc"}, bad: []string{"ev_abc", ""}},
		"X-Service-Event-Type": {good: payments.EventTypes, bad: []string{"payment.succeeded", "*"}},
		"webhook-id":           {good: []string{"evt_abc"}, bad: []string{"msg_abc", ""}},
		"webhook-timestamp":    {good: []string{"1735689600"}, bad: []string{"", "17356896.5", "-1", "now"}},
		"webhook-signature":    {good: []string{"v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=", "v1,AAAA v1,BBBB"}, bad: []string{""}},
	}
	seen := map[string]bool{}
	for _, p := range op.Parameters {
		c, ok := headers[p.Name]
		if !ok || p.In != "header" {
			t.Errorf("unexpected parameter %s in %s", p.Name, p.In)
			continue
		}
		seen[p.Name] = true
		if p.Required == nil || !*p.Required {
			t.Errorf("%s: got not required, want required", p.Name)
		}
		schema := p.Schema.Schema()
		for _, val := range c.good {
			if errs := parameters.ValidateParameterSchema(schema, nil, val, "header", "header", p.Name,
				helpers.ParameterValidation, "header", v.opts); len(errs) > 0 {
				t.Errorf("%s %q: got %v, want accepted", p.Name, val, problems(errs))
			}
		}
		for _, val := range c.bad {
			if errs := parameters.ValidateParameterSchema(schema, nil, val, "header", "header", p.Name,
				helpers.ParameterValidation, "header", v.opts); len(errs) == 0 {
				t.Errorf("%s %q: got accepted, want rejected", p.Name, val)
			}
		}
	}
	for name := range headers {
		if !seen[name] {
			t.Errorf("header %s not declared", name)
		}
	}

	body := op.RequestBody.Content.GetOrZero("application/json").Schema.Schema()
	sv := schema_validation.NewSchemaValidator(config.WithExistingOpts(v.opts))
	good := `{"id":"evt_1","type":"payment_intent.succeeded","created":1735689600,"livemode":false,` +
		`"data":{"id":"pi_1","metadata":{"order":"42"}}}`
	if ok, errs := sv.ValidateSchemaStringWithVersion(body, good, v.version); !ok {
		t.Errorf("valid event rejected: %v", problems(errs))
	}
	for name, payload := range map[string]string{
		"id prefix":        `{"id":"ev_1","type":"payment_intent.succeeded","created":1,"livemode":false,"data":{"id":"pi_1"}}`,
		"unknown type":     `{"id":"evt_1","type":"payment.succeeded","created":1,"livemode":false,"data":{"id":"pi_1"}}`,
		"created string":   `{"id":"evt_1","type":"payment_intent.succeeded","created":"1","livemode":false,"data":{"id":"pi_1"}}`,
		"missing livemode": `{"id":"evt_1","type":"payment_intent.succeeded","created":1,"data":{"id":"pi_1"}}`,
		"data not object":  `{"id":"evt_1","type":"payment_intent.succeeded","created":1,"livemode":false,"data":"pi_1"}`,
		"data without id":  `{"id":"evt_1","type":"payment_intent.succeeded","created":1,"livemode":false,"data":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if ok, _ := sv.ValidateSchemaStringWithVersion(body, payload, v.version); ok {
				t.Errorf("got %s accepted, want rejected", payload)
			}
		})
	}
}

// TestRequestLimits: every limit the server enforces on a request is in the
// description, so a client generated from it never sends what the server
// refuses; lengths count characters.
func TestRequestLimits(t *testing.T) {
	v := mustNew(t)
	rep := strings.Repeat
	metadata := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":"v"`, i)
		}
		return `{"email":"a@example.com","metadata":{` + b.String() + `}}`
	}
	session := func(field, value string) string {
		b := map[string]any{
			"line_items":  []any{map[string]any{"amount": 100, "currency": "usd", "name": "a", "quantity": 1}},
			"success_url": "https://a.example/s?cs={CHECKOUT_SESSION_ID}", "cancel_url": "https://a.example/c",
		}
		b[field] = value
		enc, _ := json.Marshal(b)
		return string(enc)
	}
	cases := []struct {
		name, method, target, body string
		ok                         bool
	}{
		{"metadata key of 40 characters", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"` + rep("é", 40) + `":"v"}}`, true},
		{"metadata key of 41 characters", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"` + rep("k", 41) + `":"v"}}`, false},
		{"empty metadata key", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"":"v"}}`, false},
		{"metadata value of 500 characters", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"k":"` + rep("é", 500) + `"}}`, true},
		{"metadata value of 501 characters", "POST", "/v1/customers", `{"email":"a@example.com","metadata":{"k":"` + rep("v", 501) + `"}}`, false},
		{"50 metadata keys", "POST", "/v1/customers", metadata(50), true},
		{"51 metadata keys", "POST", "/v1/customers", metadata(51), false},
		{"phone of 40 characters", "POST", "/v1/customers", `{"email":"a@example.com","phone":"` + rep("é", 40) + `"}`, true},
		{"phone of 41 characters", "POST", "/v1/customers", `{"email":"a@example.com","phone":"` + rep("1", 41) + `"}`, false},
		{"name of 5001 characters", "POST", "/v1/customers", `{"email":"a@example.com","name":"` + rep("a", 5001) + `"}`, false},
		{"IDN top-level domain", "POST", "/v1/customers", `{"email":"a@example.xn--p1ai"}`, true},
		{"quoted local part", "POST", "/v1/customers", `{"email":"\"a b\"@example.com"}`, false},
		{"IP literal", "POST", "/v1/customers", `{"email":"a@[127.0.0.1]"}`, false},
		{"null name", "POST", "/v1/customers", `{"email":"a@example.com","name":null}`, false},
		{"known currency", "POST", "/v1/payment-intents", `{"amount":1,"currency":"jpy"}`, true},
		{"unknown currency", "POST", "/v1/payment-intents", `{"amount":1,"currency":"zzz"}`, false},
		{"intent description of 5001", "POST", "/v1/payment-intents", `{"amount":1,"currency":"usd","description":"` + rep("d", 5001) + `"}`, false},
		{"product text of 5000", "POST", "/v1/products", `{"name":"` + rep("é", 5000) + `","tax_code":"` + rep("t", 5000) + `"}`, true},
		{"product unit label of 5001", "POST", "/v1/products", `{"name":"a","unit_label":"` + rep("u", 5001) + `"}`, false},
		{"product url without host", "POST", "/v1/products", `{"name":"a","url":"https://"}`, false},
		{"product url with port only", "POST", "/v1/products", `{"name":"a","url":"https://:443/x"}`, false},
		{"product image without host", "POST", "/v1/products", `{"name":"a","images":["https:///a.png"]}`, false},
		{"product image bad escape", "POST", "/v1/products", `{"name":"a","images":["https://a.example/%zz"]}`, false},
		{"product image IPv6", "POST", "/v1/products", `{"name":"a","images":["https://[2001:db8::1]:8443/a.png?x=1#y"]}`, true},
		{"product update clears url", "PUT", "/v1/products/prod_x", `{"url":""}`, true},
		{"product create empty url", "POST", "/v1/products", `{"name":"a","url":""}`, false},
		{"session success url", "POST", "/v1/payment-sessions", session("success_url", "https://a.example/s?cs={CHECKOUT_SESSION_ID}"), true},
		{"session success url without host", "POST", "/v1/payment-sessions", session("success_url", "https://?x"), false},
		{"session line item currency", "POST", "/v1/payment-sessions", strings.Replace(session("cancel_url", "https://a.example/c"), `"usd"`, `"xyz"`, 1), false},
		{"session shipping label of 5001", "POST", "/v1/payment-sessions", strings.Replace(session("cancel_url", "https://a.example/c"), `"cancel_url"`, `"shipping_options":[{"label":"`+rep("l", 5001)+`","amount":0}],"cancel_url"`, 1), false},
		{"refund by session", "POST", "/v1/refunds", `{"session_id":"cs_x"}`, true},
		{"refund by payment", "POST", "/v1/refunds", `{"payment_intent":"pi_x","amount":1}`, true},
		{"refund by both", "POST", "/v1/refunds", `{"session_id":"cs_x","payment_intent":"pi_x"}`, false},
		{"refund by neither", "POST", "/v1/refunds", `{"amount":1}`, false},
		{"webhook url of 2048", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/` + rep("p", 2048-len("https://a.example/")) + `"}`, true},
		{"webhook url of 2049", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/` + rep("p", 2049-len("https://a.example/")) + `"}`, false},
		{"webhook url with credentials", "POST", "/v1/webhook-endpoints", `{"url":"https://u:p@a.example/"}`, false},
		{"webhook star alone", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","events":["*"]}`, true},
		{"webhook star with a type", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","events":["*","charge.refunded"]}`, false},
		{"webhook description of 5001", "POST", "/v1/webhook-endpoints", `{"url":"https://a.example/","description":"` + rep("d", 5001) + `"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := v.Request(request(c.method, c.target, c.body))
			if c.ok && err != nil {
				t.Fatalf("valid request rejected:\n%v", err)
			}
			if !c.ok {
				mustFail(t, err)
			}
		})
	}
	t.Run("idempotency key of 255 characters", func(t *testing.T) {
		r := request(http.MethodPost, "/v1/customers", `{"email":"a@example.com"}`)
		r.Header.Set("Idempotency-Key", rep("é", 255))
		if err := v.Request(r); err != nil {
			t.Fatalf("valid key rejected:\n%v", err)
		}
	})
}

// TestSharedPatterns: the description's patterns are the server's own.
func TestSharedPatterns(t *testing.T) {
	model, err := Model()
	if err != nil {
		t.Fatal(err)
	}
	schemas := model.Components.Schemas
	if got := schemas.GetOrZero("Email").Schema().Pattern; got != payments.EmailPattern {
		t.Errorf("Email pattern\n got %s\nwant %s (payments.EmailPattern)", got, payments.EmailPattern)
	}
	var codes []string
	for _, n := range schemas.GetOrZero("Currency").Schema().Enum {
		codes = append(codes, n.Value)
	}
	if want := payments.Currencies(); !slices.Equal(codes, want) {
		t.Errorf("Currency enum\n got %v\nwant %v (payments.Currencies)", codes, want)
	}
}
