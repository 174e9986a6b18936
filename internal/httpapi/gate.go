package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/go-json-experiment/json/jsontext"

	"paysvc/internal/payments"
)

// maxIdempotencyKey is the Idempotency-Key limit, in characters.
const maxIdempotencyKey = 255

// gatedHeaders are the request headers the service reads, by canonical
// name (the header map is indexed directly).
var gatedHeaders = []string{"Authorization", "Idempotency-Key", "Content-Type"}

// gate is the one check of client text, on every route of the engine (so a
// new route has it without asking): path and query parameters, the headers
// the service reads and every string of the body are valid UTF-8 without
// NUL before a handler or a query sees them (PostgreSQL refuses both in
// text, which used to surface as a 500).
//
//   - A path or query parameter that is not text is replaced by the same
//     text with U+FFFD for each bad byte, which no id ever contains: the
//     route answers as for any unknown id (404 with its resource's code, an
//     unknown starting_after 400 validation_error, the checkout page's "not
//     found"), in its own format, without a table of codes here.
//   - A header, or a string anywhere in the body (object keys included), is
//     refused: 400 validation_error naming it (401 for Authorization).
//
// It also holds the Idempotency-Key rules, as the first reader of the
// header: on a POST, present means 1 to 255 characters (an empty one is an
// error, not "no key").
func (s *Server) gate(c *gin.Context) {
	if c.FullPath() == "" { // no route: 404 endpoint_not_found reads nothing
		c.Next()
		return
	}
	for i, p := range c.Params {
		if !isText(p.Value) {
			c.Params[i].Value = asText(p.Value)
		}
	}
	if q, ok := textQuery(c.Request.URL.RawQuery); !ok {
		c.Request.URL.RawQuery = q
	}
	if err := checkHeaders(c.Request); err != nil {
		s.reject(c, err)
		return
	}
	if err := checkBody(c); err != nil {
		s.reject(c, err)
		return
	}
	c.Next()
}

// reject answers a request the gate refused: the API's envelope on /v1,
// and on the public pages their own format.
func (s *Server) reject(c *gin.Context, err error) {
	var pe *payments.Error
	if s.pages != nil && !strings.HasPrefix(c.FullPath(), "/v1/") && errors.As(err, &pe) {
		s.pages.Reject(c, statusOf[pe.Code], pe.Msg)
		c.Abort()
		return
	}
	s.writeError(c, err)
}

// isText reports whether s is valid UTF-8 without NUL.
func isText(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// asText replaces each NUL and each byte that is not UTF-8 with U+FFFD.
func asText(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

// textQuery reports whether every name and value of a raw query decodes to
// text; when one does not, it returns the query encoded again with each of
// them made text (pairs that do not decode are dropped, as gin drops them).
func textQuery(raw string) (string, bool) {
	if strings.IndexByte(raw, '%') < 0 && isText(raw) {
		return raw, true // nothing escaped: what is read is what is here
	}
	vals, _ := url.ParseQuery(raw)
	clean := true
	for k, vs := range vals {
		clean = clean && isText(k)
		for _, v := range vs {
			clean = clean && isText(v)
		}
	}
	if clean {
		return raw, true
	}
	out := make(url.Values, len(vals))
	for k, vs := range vals {
		for _, v := range vs {
			out[asText(k)] = append(out[asText(k)], asText(v))
		}
	}
	return out.Encode(), false
}

func checkHeaders(r *http.Request) error {
	for _, name := range gatedHeaders {
		for _, v := range r.Header[name] {
			switch {
			case isText(v):
			case name == "Authorization":
				return payments.ErrUnauthorized() // not text: no key at all
			default:
				return payments.Errorf(payments.ValidationError, "The %s header must be UTF-8 text without NUL characters.", name)
			}
		}
	}
	if keys := r.Header["Idempotency-Key"]; idempotentMethod(r.Method) && len(keys) > 0 {
		if n := utf8.RuneCountInString(keys[0]); n < 1 || n > maxIdempotencyKey {
			return payments.Errorf(payments.ValidationError, "Idempotency-Key must be 1 to %d characters.", maxIdempotencyKey)
		}
	}
	return nil
}

// checkBody reads the body (within the limit; later readers get the same
// bytes) and checks its text as the handler will read it: a body that
// starts like JSON as JSON, a form as its decoded fields, anything else as
// raw text.
func checkBody(c *gin.Context) error {
	r := c.Request
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	switch ct := c.ContentType(); {
	case len(body) == 0:
		return nil
	case looksJSON(body):
		// A JSON body has no form fields, whatever its Content-Type says
		// (curl -d sends JSON as a form): a form handler must not read its
		// bytes as fields that this check never saw.
		r.PostForm = url.Values{}
		return checkJSONText(body)
	case ct == "application/x-www-form-urlencoded" || ct == "multipart/form-data":
		return checkForm(r, ct)
	case !isText(string(body)):
		return payments.Errorf(payments.ValidationError, "The request body must be UTF-8 text without NUL characters.")
	}
	return nil
}

func looksJSON(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && (b[0] == '{' || b[0] == '[' || b[0] == '"')
}

// checkForm parses the form as gin will read it (the parsed form is kept)
// and checks every field name and value.
func checkForm(r *http.Request, ct string) error {
	if ct == "multipart/form-data" {
		_ = r.ParseMultipartForm(maxBody) // what does not parse is not read either
	} else {
		_ = r.ParseForm()
	}
	bad := ""
	for k, vs := range r.PostForm {
		if !isText(k) {
			return payments.Errorf(payments.ValidationError, "Form field names must be UTF-8 text without NUL characters.")
		}
		for _, v := range vs {
			if !isText(v) && (bad == "" || k < bad) {
				bad = k
			}
		}
	}
	if bad != "" {
		return payments.Invalid(bad, "must be UTF-8 text without NUL characters")
	}
	return nil
}

var nulEscape = []byte(`\u0000`)

// checkJSONText checks every string of a JSON body, object keys included,
// for valid UTF-8 (lone surrogate escapes are not) without NUL (\u0000
// included). Clean bodies, nearly all, take one look at the bytes; the
// others are read token by token to name the field.
func checkJSONText(body []byte) error {
	if utf8.Valid(body) && bytes.IndexByte(body, 0) < 0 && !bytes.Contains(body, nulEscape) {
		return nil
	}
	// Duplicate names are the handler's to refuse; here they must not stop
	// the reading before a later string.
	dec := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			return nil // every string is text: \u0000 was escaped text (\\u0000)
		}
		var syn *jsontext.SyntacticError
		if errors.As(err, &syn) {
			if badTextAt(body[min(syn.ByteOffset, int64(len(body))):]) {
				return notText(fieldName(string(syn.JSONPointer)))
			}
			return malformed(syn)
		}
		if err != nil {
			return payments.Errorf(payments.ValidationError, "Malformed JSON.")
		}
		if tok.Kind() != '"' || strings.IndexByte(tok.String(), 0) < 0 {
			continue
		}
		ptr := string(dec.StackPointer())
		if kind, n := dec.StackIndex(dec.StackDepth()); kind == '{' && n%2 == 1 {
			// An object key: name the object that holds it.
			return notText(fieldName(ptr[:strings.LastIndexByte(ptr, '/')]))
		}
		return notText(fieldName(ptr))
	}
}

func notText(field string) error {
	if field == "" {
		return payments.Errorf(payments.ValidationError, "The request body must be UTF-8 text without NUL characters.")
	}
	return payments.Invalid(field, "must be UTF-8 text without NUL characters")
}

// badTextAt reports whether b starts with NUL, with a byte that is not
// UTF-8 or with the escape of a UTF-16 surrogate (which jsontext accepts
// only in pairs).
func badTextAt(b []byte) bool {
	if len(b) > 0 && b[0] == 0 {
		return true
	}
	if r, size := utf8.DecodeRune(b); r == utf8.RuneError && size == 1 {
		return true
	}
	return len(b) >= 4 && b[0] == '\\' && b[1] == 'u' && (b[2] == 'd' || b[2] == 'D') && strings.IndexByte("89abcdefABCDEF", b[3]) >= 0
}
