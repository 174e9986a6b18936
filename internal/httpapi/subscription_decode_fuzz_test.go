package httpapi

import (
	"testing"

	"paysvc/internal/payments"
)

// FuzzDecodeSubscriptionProduct: the subscription product body decodes to
// its input or fails with a validation_error naming what is wrong; the
// input's own checks then give validation_error or invalid_interval, never
// anything else and never a panic.
func FuzzDecodeSubscriptionProduct(f *testing.F) {
	for _, seed := range []string{
		`{"name":"Pro","amount":1500,"currency":"usd","interval":"monthly"}`,
		`{"name":"Team","description":null,"amount":1,"currency":"EUR","interval":"annual","trial_period_days":14,"metadata":{"a":"b"}}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"day"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":null}`,
		`{"name":"x","amount":1,"currency":"usd","interval":["monthly"]}`,
		`{"name":"x","amount":"1","currency":"usd","interval":"monthly"}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"monthly","trial_period_days":1.5}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"monthly","trial_period_days":99999999999999999999}`,
		`{"name":"x","amount":1,"currency":"usd","interval":"monthly","price":{}}`,
		`{"name":"x","interval":"monthly","interval":"weekly"}`,
		`{"INTERVAL":"monthly"}`,
		"{\"interval\":\"\xff\"}",
		`{}`,
		`{`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var in payments.SubscriptionProductInput
		if !decodedOrRefused(t, body, &in) {
			return
		}
		iv := ""
		if in.Interval != nil {
			iv = *in.Interval
		}
		if _, err := payments.ProductInterval(iv); err != nil && payments.ErrorCode(err) != payments.InvalidInterval {
			t.Fatalf("ProductInterval(%q) = %v, want nil or invalid_interval", iv, err)
		}
	})
}
