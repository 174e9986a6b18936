package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"go.yaml.in/yaml/v4"

	"paysvc/internal/apispec/validate"
	"paysvc/internal/processor/sandbox"
)

// schemaGen builds JSON values from the OpenAPI description's schemas. The
// small variant has only what is required, at the lower bounds; the large
// one every optional field too, at the upper bounds (lengths in characters
// of two bytes each, arrays and objects as full as allowed).
type schemaGen struct {
	large bool
	ids   map[string]string // a real id for each id prefix a pattern names ("price_" → price_…)
}

func (g schemaGen) value(sp *base.SchemaProxy, salt int) any {
	return g.of(sp.Schema(), salt)
}

func (g schemaGen) of(s *base.Schema, salt int) any {
	s = flatten(s)
	switch {
	case s.Const != nil:
		return yamlValue(s.Const)
	case len(s.Enum) > 0:
		i := salt % len(s.Enum)
		if g.large {
			i = len(s.Enum) - 1 - i
		}
		return yamlValue(s.Enum[i])
	}
	switch schemaType(s) {
	case "object":
		return g.object(s, salt)
	case "array":
		n := int(deref64(s.MinItems, 0))
		if g.large {
			n = int(deref64(s.MaxItems, int64(max(n, 2))))
		}
		out := make([]any, 0, n)
		for i := range n {
			if s.Items != nil && s.Items.IsA() {
				out = append(out, g.value(s.Items.A, salt+i))
			}
		}
		return out
	case "integer", "number":
		if g.large && s.Maximum != nil {
			return int64(*s.Maximum)
		}
		if s.Minimum != nil {
			return int64(*s.Minimum)
		}
		return int64(1)
	case "boolean":
		return g.large
	}
	return g.text(s, salt)
}

// object has the required properties (and in the large variant the others,
// but not those a oneOf chooses among) and, where additionalProperties
// allows, the most entries allowed.
func (g schemaGen) object(s *base.Schema, salt int) map[string]any {
	out := map[string]any{}
	chosen := map[string]bool{}
	for _, r := range s.Required {
		chosen[r] = true
	}
	governed := map[string]bool{}
	for _, b := range s.OneOf {
		for _, r := range b.Schema().Required {
			governed[r] = true
		}
	}
	if len(s.OneOf) > 0 {
		for _, r := range s.OneOf[0].Schema().Required {
			chosen[r] = true
		}
	}
	if s.Properties != nil {
		for name, p := range s.Properties.FromOldest() {
			if chosen[name] || g.large && !governed[name] {
				out[name] = g.value(p, salt)
			}
		}
	}
	if g.large && s.AdditionalProperties != nil && s.AdditionalProperties.IsA() {
		keys := &base.Schema{Type: []string{"string"}}
		if s.PropertyNames != nil {
			keys = s.PropertyNames.Schema()
		}
		for i := range int(deref64(s.MaxProperties, 3)) {
			out[g.text(keys, salt+i+1).(string)] = g.value(s.AdditionalProperties.A, salt+i)
		}
	}
	return out
}

// text is a string of the schema: a real id where the pattern names an id
// prefix, else one built from the pattern, or characters of two bytes.
func (g schemaGen) text(s *base.Schema, salt int) any {
	minLen, maxLen := int(deref64(s.MinLength, 1)), int(deref64(s.MaxLength, 8))
	if s.Pattern != "" {
		if id, ok := g.ids[strings.TrimPrefix(s.Pattern, "^")]; ok {
			return id
		}
		for _, large := range []bool{g.large, false} {
			str := fromPattern(s.Pattern, large, salt)
			if utf8.RuneCountInString(str) <= maxLen || s.MaxLength == nil {
				return str
			}
		}
	}
	n := minLen
	if g.large {
		n = maxLen
	}
	r := []rune(strings.Repeat("é", max(n, 1)))
	tag := []rune(strconv.Itoa(salt)) // distinct values for distinct salts
	if salt > 0 && len(tag) <= len(r) {
		copy(r[len(r)-len(tag):], tag)
	}
	return string(r)
}

// fromPattern builds a string that the regular expression matches: the
// fewest repetitions (or, large, the most of bounded ones and three of the
// others), the first alternative, and a letter where a class allows one.
func fromPattern(pattern string, large bool, salt int) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		panic(fmt.Sprintf("pattern %q: %v", pattern, err))
	}
	var b strings.Builder
	var walk func(re *syntax.Regexp)
	walk = func(re *syntax.Regexp) {
		reps := func(lo, hi int) int {
			switch {
			case !large:
				return lo
			case hi >= 0:
				return hi
			}
			return lo + 3
		}
		switch re.Op {
		case syntax.OpLiteral:
			b.WriteString(string(re.Rune))
		case syntax.OpCharClass:
			b.WriteRune(classRune(re.Rune))
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			b.WriteByte('a')
		case syntax.OpCapture:
			walk(re.Sub[0])
		case syntax.OpConcat:
			for _, sub := range re.Sub {
				walk(sub)
			}
		case syntax.OpAlternate:
			walk(re.Sub[0])
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
			lo, hi := re.Min, re.Max
			switch re.Op {
			case syntax.OpStar:
				lo, hi = 0, -1
			case syntax.OpPlus:
				lo, hi = 1, -1
			case syntax.OpQuest:
				lo, hi = 0, 1
			}
			for range reps(lo, hi) {
				walk(re.Sub[0])
			}
		}
	}
	walk(re)
	return b.String()
}

// classRune picks from a character class a letter if it has one, else a
// digit, else its first printable character.
func classRune(ranges []rune) rune {
	for _, want := range []rune{'a', 'A', '0'} {
		for i := 0; i+1 < len(ranges); i += 2 {
			if ranges[i] <= want && want <= ranges[i+1] {
				return want
			}
		}
	}
	for i := 0; i+1 < len(ranges); i += 2 {
		for r := ranges[i]; r <= ranges[i+1]; r++ {
			if unicode.IsPrint(r) && r != ' ' {
				return r
			}
		}
	}
	return ranges[0]
}

// flatten merges allOf, and the first branch of anyOf (the first of oneOf
// is chosen by object), into one schema.
func flatten(s *base.Schema) *base.Schema {
	parts := slices.Clone(s.AllOf)
	if len(s.AnyOf) > 0 {
		parts = append(parts, s.AnyOf[0])
	}
	if len(parts) == 0 {
		return s
	}
	m := *s
	m.AllOf, m.AnyOf = nil, nil
	for _, p := range parts {
		o := flatten(p.Schema())
		if len(m.Type) == 0 {
			m.Type = o.Type
		}
		if m.Pattern == "" {
			m.Pattern = o.Pattern
		}
		if m.Const == nil {
			m.Const = o.Const
		}
		if len(m.Enum) == 0 {
			m.Enum = o.Enum
		}
		if m.Items == nil {
			m.Items = o.Items
		}
		if m.Properties == nil {
			m.Properties = o.Properties
		}
		m.Required = append(slices.Clone(m.Required), o.Required...)
		m.MinLength, m.MaxLength = tighter(m.MinLength, o.MinLength, true), tighter(m.MaxLength, o.MaxLength, false)
		m.MinItems, m.MaxItems = tighter(m.MinItems, o.MinItems, true), tighter(m.MaxItems, o.MaxItems, false)
	}
	return &m
}

// tighter is the stricter of two bounds: the larger lower one, or the
// smaller upper one.
func tighter(a, b *int64, lower bool) *int64 {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	v := min(*a, *b)
	if lower {
		v = max(*a, *b)
	}
	return &v
}

func schemaType(s *base.Schema) string {
	for _, t := range s.Type {
		if t != "null" {
			return t
		}
	}
	if s.Properties != nil {
		return "object"
	}
	return "string"
}

func deref64(p *int64, def int64) int64 {
	if p == nil {
		return def
	}
	return *p
}

func yamlValue(n *yaml.Node) any {
	var v any
	if err := n.Decode(&v); err != nil {
		panic(err)
	}
	return v
}

// genOp is one operation of the description.
type genOp struct {
	method, path string
	op           *v3.Operation
	params       []*v3.Parameter
}

func (o genOp) name() string { return o.method + " " + o.path }

func (o genOp) body() *base.SchemaProxy {
	if o.op.RequestBody == nil || o.op.RequestBody.Content == nil {
		return nil
	}
	if mt := o.op.RequestBody.Content.GetOrZero("application/json"); mt != nil {
		return mt.Schema
	}
	return nil
}

func describedOps(t *testing.T) []genOp {
	t.Helper()
	model, err := validate.Model()
	if err != nil {
		t.Fatal(err)
	}
	var ops []genOp
	for path, item := range model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			ops = append(ops, genOp{method: strings.ToUpper(method), path: path, op: op, params: append(slices.Clone(item.Parameters), op.Parameters...)})
		}
	}
	// Deletions last: they would take away what the others use.
	slices.SortStableFunc(ops, func(a, b genOp) int {
		return cmpBool(a.method == http.MethodDelete, b.method == http.MethodDelete)
	})
	return ops
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// genRequest is a request built from the description.
type genRequest struct {
	what   string
	method string
	path   string
	query  url.Values
	header map[string]string
	body   []byte // nil: none
}

func (r genRequest) http(ctx context.Context, key string) *http.Request {
	var idem *string
	if k, ok := r.header["Idempotency-Key"]; ok {
		idem = &k
	}
	ctype := ""
	if r.body != nil {
		ctype = "application/json"
	}
	req := stackRequest(ctx, r.method, r.path, r.query.Encode(), ctype, "Bearer "+key, idem, r.body)
	if r.body == nil {
		req.ContentLength = 0
	}
	return req
}

// build makes the operation's request from g: path ids are real ids of the
// resource the path names (idFor), other parameters come from their schemas.
func (o genOp) build(g schemaGen, salt int, idFor func(path string) string) genRequest {
	r := genRequest{what: o.name(), method: o.method, query: url.Values{}, header: map[string]string{}}
	r.path = o.path
	for _, p := range o.params {
		required := p.Required != nil && *p.Required
		if !required && !g.large {
			continue
		}
		var v string
		switch val := g.value(p.Schema, salt).(type) {
		case string:
			v = val
		default:
			v = fmt.Sprint(val)
		}
		switch p.In {
		case "path":
			r.path = strings.ReplaceAll(r.path, "{"+p.Name+"}", url.PathEscape(idFor(o.path)))
		case "query":
			if p.Name == "starting_after" {
				v = idFor(o.path + "/")
			}
			r.query.Set(p.Name, v)
		case "header":
			r.header[p.Name] = v // the salt makes it a new key each time
		}
	}
	if r.path != o.path {
		r.path, _ = url.PathUnescape(r.path)
	}
	if sp := o.body(); sp != nil {
		r.body, _ = json.Marshal(g.value(sp, salt))
	}
	return r
}

// documentedRefusals are the rules of the description that a schema cannot
// state, so that a request valid by its schemas may still break them; each
// is said in the operation's description.
var documentedRefusals = []string{
	"with fees passed on exceeds",            // createPaymentIntent: the grossed-up amount above 99999999
	"mixes the saved-price and inline forms", // createSubscriptionSession: a field of the other form
	"next_page token",                        // listSubscriptions: page is a token of an earlier answer, sent alone
	"no scheduled cancellation to resume",    // resumeSubscription: the subscription's state
	"is required unless preview is given",    // changeSubscriptionQuantity: quantity or preview
	"is not a preview of this subscription",  // changeSubscriptionQuantity: an sqp_ of this subscription
	"is not an item of this subscription",    // …Quantity: item_id names one of the subscription's items
	"must lie in the period being billed",    // …Quantity: proration_date within the period, not in the future
}

// validationCodes are the codes that say a request broke a rule.
var validationCodes = map[string]bool{"validation_error": true, "invalid_url": true, "webhook_url_must_be_https": true}

// TestOpenAPIGeneratedRequests builds, for every operation of the
// description, valid requests from its schemas (the fewest fields at the
// lower bounds, and every field at the upper bounds) and near-valid ones
// (each a valid one with one thing wrong), sends them through the real
// engine down to PostgreSQL and Redis, and checks every answer against the
// description. No answer may be a 5xx; a valid request may be refused only
// for what the description says beside its schemas (an unknown id, a refund
// the payment cannot take, a body over 1 MiB, documentedRefusals), so a
// client generated from the description never sends what the server
// refuses; a near-valid request the description refuses is refused.
func TestOpenAPIGeneratedRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: fuzzTerm, allowPrivateWebhooks: true})
	s := newShop(h)
	prod := createProductOK(t, h, s.key, map[string]any{"name": "Mug", "price": map[string]any{"amount": 1500, "currency": "usd"}})
	cus := createCustomerOK(t, h, s.key, map[string]any{"email": "ada@example.com"})
	var we struct{ ID string } // before the payments, so that it has deliveries
	h.do("POST", "/v1/webhook-endpoints", s.key, map[string]any{"url": "https://hooks.example/in"}).data(t, &we)
	payIntent(t, h, s.key, 99999999, sandbox.CardSuccess) // a balance for the refunds
	cs, pi := paySession(t, h, s.key, 90000)
	re := refundOK(t, h, s.key, map[string]any{"payment_intent": pi, "amount": 100})
	_, dp := disputed(t, h, s, 5000)
	var sp struct{ ID string }
	h.do("POST", "/v1/subscription-products", s.key, map[string]any{"name": "Plan", "amount": 900, "currency": "usd", "interval": "monthly"}).data(t, &sp)
	sub := newSubscription(t, h, s.key)
	var whd struct{ Data []struct{ ID string } }
	h.do("GET", "/v1/webhook-endpoints/"+we.ID+"/deliveries?limit=1", s.key, nil).data(t, &whd)
	if len(whd.Data) != 1 {
		t.Fatalf("got %d deliveries, want the endpoint's newest", len(whd.Data))
	}
	var ev struct{ Data []struct{ ID string } }
	h.do("GET", "/v1/events?limit=1", s.key, nil).data(t, &ev)
	if len(ev.Data) != 1 {
		t.Fatalf("got %d events, want the shop's newest", len(ev.Data))
	}
	ids := map[string]string{"price_": prod.DefaultPrice.ID, "cus_": cus.ID, "cs_": cs, "pi_": pi}
	byPath := map[string]string{
		"/v1/products/": prod.ID, "/v1/customers/": cus.ID, "/v1/payment-sessions/": cs,
		"/v1/refunds/": re.ID, "/v1/disputes/": dp, "/v1/webhook-endpoints/": we.ID, "/v1/test-payments/": pi,
		"/v1/subscription-products/": sp.ID, "/v1/events/": ev.Data[0].ID, "/v1/subscriptions/": sub.ID,
		"/v1/webhook-endpoints/{id}/deliveries/": whd.Data[0].ID,
	}
	idFor := func(path string) string { // the longest matching prefix
		id, best := "unknown", ""
		for prefix, v := range byPath {
			if strings.HasPrefix(path, prefix) && len(prefix) > len(best) {
				id, best = v, prefix
			}
		}
		return id
	}

	send := func(t *testing.T, o genOp, r genRequest) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.engine.ServeHTTP(rec, r.http(ctx, s.key))
		checkStackAnswer(t, gin.RouteInfo{Method: o.method, Path: o.path}, r.http(ctx, s.key), rec.Result())
		var env struct {
			Error *struct{ Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &env)
		if env.Error == nil {
			return rec.Code, "", ""
		}
		return rec.Code, env.Error.Code, env.Error.Message
	}
	// valid reports whether the description accepts r.
	valid := func(r genRequest) error {
		req := r.http(context.Background(), s.key)
		return validator.Request(req)
	}

	ops := describedOps(t)
	if len(ops) < 20 {
		t.Fatalf("got %d operations from openapi.yaml", len(ops))
	}
	for i, o := range ops {
		t.Run(o.name(), func(t *testing.T) {
			for _, g := range []schemaGen{{ids: ids}, {large: true, ids: ids}} {
				r := o.build(g, i+1, idFor)
				if err := valid(r); err != nil {
					t.Fatalf("generated request %s %s %s is not valid: %v", r.method, r.path, r.body, err)
				}
				status, code, msg := send(t, o, r)
				refused := validationCodes[code] && !slices.ContainsFunc(documentedRefusals, func(d string) bool { return strings.Contains(msg, d) })
				if refused || status == http.StatusRequestEntityTooLarge && len(r.body) <= mib {
					t.Errorf("valid request (large %v) %s %s refused: %d %s %s; body %.300q", g.large, r.method, r.path, status, code, msg, r.body)
				}
			}
			base := o.build(schemaGen{ids: ids}, i+100, idFor)
			for _, nv := range nearValid(o, base) {
				status, _, _ := send(t, o, nv)
				if valid(nv) != nil && status < 400 {
					t.Errorf("near-valid %s (%s %s %.300q) that the description refuses: got %d", nv.what, nv.method, nv.path, nv.body, status)
				}
			}
		})
	}
}

// nearValid returns variants of the valid request r with one thing wrong:
// the path id not text, a query parameter out of bounds, the
// Idempotency-Key empty, too long or not text, and in the body each field
// in turn null, of another type, too long, not text, out of its enum or
// bounds, left out when required; an unknown field; JSON that is not.
func nearValid(o genOp, r genRequest) []genRequest {
	var out []genRequest
	variant := func(what string, change func(v *genRequest)) {
		v := r
		v.what = what
		v.query = url.Values{}
		for k, vs := range r.query {
			v.query[k] = slices.Clone(vs)
		}
		v.header = map[string]string{}
		for k, val := range r.header {
			v.header[k] = val
		}
		change(&v)
		out = append(out, v)
	}
	for _, p := range o.params {
		switch p.In {
		case "path":
			for _, bad := range []string{"\x00", "\xff", "a\xed\xa0\x80"} {
				variant("path "+p.Name+" "+strconv.Quote(bad), func(v *genRequest) { v.path = strings.TrimSuffix(v.path, "/") + bad })
			}
		case "query":
			s := p.Schema.Schema()
			bads := []string{"", "\x00", "\xff", "1.5", "1e400", "-1"}
			if s.Maximum != nil {
				bads = append(bads, strconv.FormatInt(int64(*s.Maximum)+1, 10))
			}
			for _, bad := range bads {
				variant("query "+p.Name+"="+strconv.Quote(bad), func(v *genRequest) { v.query.Set(p.Name, bad) })
			}
		case "header":
			for _, bad := range []string{"", "k\x99", "k\x00", strings.Repeat("k", 256)} {
				variant("header "+p.Name+" "+strconv.Quote(bad), func(v *genRequest) { v.header[p.Name] = bad })
			}
		}
	}
	sp := o.body()
	if sp == nil {
		return out
	}
	var body map[string]any
	if json.Unmarshal(r.body, &body) != nil {
		return out
	}
	schema := flatten(sp.Schema())
	with := func(what string, change func(m map[string]any)) {
		m := map[string]any{}
		for k, v := range body {
			m[k] = v
		}
		change(m)
		b, _ := json.Marshal(m)
		variant(what, func(v *genRequest) { v.body = b })
	}
	raw := func(what string, b []byte) { variant(what, func(v *genRequest) { v.body = b }) }
	if schema.Properties != nil {
		for name, p := range schema.Properties.FromOldest() {
			ps := flatten(p.Schema())
			with(name+" null", func(m map[string]any) { m[name] = nil })
			with(name+" of another type", func(m map[string]any) {
				if schemaType(ps) == "string" {
					m[name] = 12345
				} else {
					m[name] = "12345"
				}
			})
			switch schemaType(ps) {
			case "string":
				with(name+" with NUL", func(m map[string]any) { m[name] = "a\x00" })
				if ps.MaxLength != nil {
					with(name+" too long", func(m map[string]any) { m[name] = strings.Repeat("é", int(*ps.MaxLength)+1) })
				}
				if len(ps.Enum) > 0 {
					with(name+" out of its enum", func(m map[string]any) { m[name] = "not-a-value" })
				}
				// Invalid UTF-8 cannot go through json.Marshal: put it in raw.
				mark := "\u2603marker\u2603"
				with(name+" not UTF-8", func(m map[string]any) { m[name] = mark })
				last := out[len(out)-1]
				out[len(out)-1].body = bytes.ReplaceAll(last.body, []byte(mark), []byte("\xff\xfe"))
			case "integer":
				if ps.Maximum != nil {
					with(name+" above its maximum", func(m map[string]any) { m[name] = int64(*ps.Maximum) + 1 })
				}
				if ps.Minimum != nil {
					with(name+" below its minimum", func(m map[string]any) { m[name] = int64(*ps.Minimum) - 1 })
				}
				with(name+" fractional", func(m map[string]any) { m[name] = 1.5 })
				with(name+" huge", func(m map[string]any) { m[name] = math.MaxFloat64 })
			case "array":
				if ps.MaxItems != nil {
					with(name+" with too many items", func(m map[string]any) {
						item := any("x")
						if arr, ok := m[name].([]any); ok && len(arr) > 0 {
							item = arr[0]
						}
						m[name] = slices.Repeat([]any{item}, int(*ps.MaxItems)+1)
					})
				}
			case "object":
				with(name+" with a NUL key", func(m map[string]any) { m[name] = map[string]any{"k\x00": "v"} })
			}
			if slices.Contains(schema.Required, name) {
				with(name+" left out", func(m map[string]any) { delete(m, name) })
			}
		}
	}
	with("an unknown field", func(m map[string]any) { m["unknown_field"] = 1 })
	raw("truncated JSON", r.body[:len(r.body)/2])
	raw("a lone surrogate", []byte(`{"x":"\ud800"}`))
	raw("not an object", []byte(`[]`))
	return out
}
