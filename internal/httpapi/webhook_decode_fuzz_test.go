package httpapi

import (
	"errors"
	"testing"

	"paysvc/internal/payments"
)

// FuzzDecodeWebhookOps: the bodies of the webhook operations (endpoint
// update, rotate-secret, event resend) decode or fail with a
// validation_error that says what is wrong, never anything else and never
// a panic.
func FuzzDecodeWebhookOps(f *testing.F) {
	for _, seed := range []string{
		`{"url":"https://a.example/h","events":["charge.refunded"],"description":"","status":"enabled"}`,
		`{"status":"disabled"}`,
		`{"status":null}`,
		`{"events":"*"}`,
		`{"grace_period":86400}`,
		`{"grace_period":-1}`,
		`{"grace_period":1e30}`,
		`{"grace_period":"1h"}`,
		`{"endpoint":"we_123"}`,
		`{"endpoint":["we_1"]}`,
		`{"endpoint":"we_1","endpoint":"we_2"}`,
		"{\"endpoint\":\"\xff\"}",
		`{}`,
		`{`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, in := range []any{&payments.EndpointUpdate{}, &payments.RotateInput{}, &payments.ResendInput{}} {
			decodedOrRefused(t, body, in)
		}
	})
}

// decodedOrRefused decodes body into in and reports whether it was
// accepted; a refusal must be a validation_error with a message.
func decodedOrRefused(t *testing.T, body []byte, in any) bool {
	t.Helper()
	err := decodeJSON(body, in)
	if err == nil {
		return true
	}
	var pe *payments.Error
	if !errors.As(err, &pe) || pe.Code != payments.ValidationError || pe.Msg == "" {
		t.Fatalf("decodeJSON(%q) into %T = %v, want a validation_error with a message", body, in, err)
	}
	return false
}
