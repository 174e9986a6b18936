package httpapi

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"testing"

	"paysvc/internal/payments"
)

func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Mug","price":{"amount":1200,"currency":"usd"}}`,
		`{"name":"x","description":null,"images":["https://a.example/x.png"],"metadata":{"a":"b"},"active":false,` +
			`"url":"https://a.example","shippable":true,"unit_label":"u","statement_descriptor":"S","tax_code":"t",` +
			`"price":{"amount":1,"currency":"EUR","tax_behavior":"inclusive"}}`,
		`{}`,
		` {"name":"x"} `,
		`{"name":1}`,
		`{"name":"x","price":{"amount":"1"}}`,
		`{"name":"x","price":{"amount":1.5}}`,
		`{"name":"x","price":{"amount":1e400}}`,
		`{"name":"x","price":{"x":1}}`,
		`{"name":"x","metadata":{"a/b~c":1}}`,
		`{"name":"x","images":[1]}`,
		`{"name":"x","images":{"0":"a"}}`,
		`{"name":"x","name":"y"}`,
		`{"NAME":"x"}`,
		`{"name":"\ud800"}`,
		"{\"name\":\"\xff\"}",
		`{"name":"x"}{"name":"y"}`,
		`{"name":`,
		`{`,
		`[]`,
		`null`,
		`"x"`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in payments.ProductInput
		err := decodeJSON(body, &in)
		if err == nil {
			// Accepted input is one JSON object.
			if !stdjson.Valid(body) || !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
				t.Fatalf("decodeJSON accepted %q, which is not a JSON object", body)
			}
			return
		}
		var pe *payments.Error
		if !errors.As(err, &pe) {
			t.Fatalf("decodeJSON(%q) = %v (%T), want a *payments.Error", body, err, err)
		}
		if pe.Code != payments.ValidationError || pe.Msg == "" {
			t.Fatalf("decodeJSON(%q) = code %q message %q, want validation_error with a message", body, pe.Code, pe.Msg)
		}
	})
}
