package httpapi

import (
	"errors"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"paysvc/internal/payments"
)

// bindJSON decodes the body strictly into v: it must be one JSON object with
// known, case-exact member names, the right types and no duplicates. Every
// failure is a validation_error whose message names the field, or
// payload_too_large.
func bindJSON(c *gin.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// errNull marks a JSON null met by refuseNull.
var errNull = errors.New("null")

// refuseNull makes a null anywhere in a request body an error instead of
// "omitted": no field of any request takes null (an optional text field is
// cleared with "", as in Stripe's API), and a client that sends null for a
// name, a flag or metadata meant something else than leaving it unchanged.
var refuseNull = json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, _ any) error {
	if dec.PeekKind() == 'n' {
		return errNull
	}
	return errors.ErrUnsupported // decode as usual
}))

// decodeJSON is bindJSON's decoder, separate so that it can be fuzzed.
func decodeJSON(body []byte, v any) error {
	trimmed := strings.TrimLeft(string(body), " \t\r\n")
	if !strings.HasPrefix(trimmed, "{") {
		return payments.Errorf(payments.ValidationError, "The request body must be a JSON object.")
	}
	err := json.Unmarshal(body, v, json.RejectUnknownMembers(true), refuseNull)
	if err == nil {
		return nil
	}
	var pe *payments.Error // from a type's own decoder, e.g. MetadataInput
	if errors.As(err, &pe) {
		return pe
	}
	var se *json.SemanticError
	if errors.As(err, &se) {
		field := fieldName(string(se.JSONPointer))
		switch {
		case errors.Is(se.Err, errNull):
			return payments.Invalid(field, "must not be null: leave the field out instead (\"\" clears an optional text field)")
		case errors.Is(se.Err, json.ErrUnknownName):
			return payments.Errorf(payments.ValidationError, "Unknown field: %s.", field)
		case field == "":
			return payments.Errorf(payments.ValidationError, "The request body must be a JSON object.")
		}
		return payments.Invalid(field, "has the wrong type%s", wantType(se))
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return malformed(syn)
	}
	return payments.Errorf(payments.ValidationError, "Malformed JSON.")
}

// malformed is the validation_error of a body that is not JSON.
func malformed(syn *jsontext.SyntacticError) *payments.Error {
	if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
		return payments.Errorf(payments.ValidationError, "Duplicate field: %s.", fieldName(string(syn.JSONPointer)))
	}
	where := ""
	if f := fieldName(string(syn.JSONPointer)); f != "" {
		where = " in field " + f
	}
	return payments.Errorf(payments.ValidationError, "Malformed JSON at byte %d%s.", syn.ByteOffset, where)
}

// fieldName turns a JSON pointer such as /price/amount into price.amount.
func fieldName(ptr string) string {
	parts := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, p := range parts {
		p = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			parts[i] = "[" + p + "]"
			continue
		}
		parts[i] = p
	}
	return strings.ReplaceAll(strings.Join(parts, "."), ".[", "[")
}

func wantType(se *json.SemanticError) string {
	if se.GoType == nil {
		return ""
	}
	t := se.GoType.String()
	switch {
	case strings.HasSuffix(t, "int64") || strings.HasSuffix(t, "int"):
		return ": expected an integer"
	case strings.HasSuffix(t, "string"):
		return ": expected a string"
	case strings.HasSuffix(t, "bool"):
		return ": expected a boolean"
	case strings.Contains(t, "[]"):
		return ": expected an array"
	case strings.Contains(t, "map[") || strings.Contains(t, "payments."):
		return ": expected an object"
	}
	return ""
}

// listParams reads limit (1..100, default 10) and starting_after.
func listParams(c *gin.Context, def int) (payments.ListParams, error) {
	lp := payments.ListParams{Limit: def}
	if v, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > payments.MaxLimit {
			return lp, payments.Invalid("limit", "must be an integer between 1 and %d", payments.MaxLimit)
		}
		lp.Limit = n
	}
	if v, ok := c.GetQuery("starting_after"); ok {
		if v == "" {
			return lp, payments.Invalid("starting_after", "must not be empty")
		}
		lp.StartingAfter = v
	}
	return lp, nil
}
