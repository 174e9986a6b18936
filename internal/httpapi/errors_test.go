package httpapi

import (
	"testing"

	"paysvc/internal/payments"
)

// Every domain error code has its HTTP status in the one table: a new code
// without one would otherwise answer 500 internal_error.
func TestEveryCodeHasAStatus(t *testing.T) {
	for _, c := range payments.Codes {
		if _, ok := statusOf[c]; !ok {
			t.Errorf("code %q has no HTTP status in statusOf", c)
		}
	}
	if len(statusOf) != len(payments.Codes) {
		t.Errorf("statusOf has %d codes, payments.Codes %d: they must name the same codes", len(statusOf), len(payments.Codes))
	}
}
