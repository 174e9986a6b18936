package httpapi

import (
	"errors"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// FuzzDecodeQuantity: the body of PATCH /v1/subscriptions/{id}/quantity
// (and of its preview) decodes to its input or fails with a
// validation_error; the input's checks then give a validation_error or a
// request within the limits (quantity 1..1000 unless a preview carries
// it, a known behaviour, an si_ item, a proration date before year 10000),
// never a panic.
func FuzzDecodeQuantity(f *testing.F) {
	for _, seed := range []string{
		`{"quantity":2}`,
		`{"quantity":1000,"proration_behavior":"always_invoice","item_id":"si_1","proration_date":1790000000}`,
		`{"quantity":3,"proration_behavior":"none"}`,
		`{"preview":"sqp_1"}`,
		`{"preview":"sqp_1","quantity":2,"proration_behavior":"create_prorations"}`,
		`{"quantity":0}`,
		`{"quantity":1001}`,
		`{"quantity":-1}`,
		`{"quantity":2.5}`,
		`{"quantity":"2"}`,
		`{"quantity":99999999999999999999}`,
		`{"quantity":2,"proration_behavior":"sometimes"}`,
		`{"quantity":2,"proration_date":-1}`,
		`{"quantity":2,"proration_date":9223372036854775807}`,
		`{"quantity":2,"item_id":"x"}`,
		`{"preview":"nope"}`,
		`{"quantity":2,"extra":true}`,
		"{\"item_id\":\"si_\xff\"}",
		`{}`,
		`{`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in payments.QuantityInput
		if !decodedOrRefused(t, body, &in) {
			return
		}
		req, err := in.Request()
		if err != nil {
			var pe *payments.Error
			if !errors.As(err, &pe) || pe.Code != payments.ValidationError {
				t.Fatalf("Request() of %q = %v, want a validation_error", body, err)
			}
			return
		}
		switch {
		case in.Preview == nil && (req.Quantity < 1 || req.Quantity > 1000):
			t.Fatalf("%q: accepted quantity %d", body, req.Quantity)
		case req.Behavior != payments.CreateProrations && req.Behavior != payments.AlwaysInvoice && req.Behavior != payments.ProrationNone:
			t.Fatalf("%q: accepted behaviour %q", body, req.Behavior)
		case req.ProrationDate != nil && req.ProrationDate.After(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)):
			t.Fatalf("%q: accepted proration date %s", body, req.ProrationDate)
		}
	})
}
