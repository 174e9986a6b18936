package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// The API answers a sandbox merchant on its own clock: what it creates is
// dated on that clock, and the hosted page expires its sessions by it,
// while its other mode keeps real time.
func TestSandboxClockDatesWhatTheAPIReturns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	m := h.merchant(payments.PlanFree)
	testKey, liveKey := h.key(m, false), h.key(m, true)
	s := createSessionOK(t, h, testKey, sessionBody(oneItem()))

	const by = 30 * 24 * time.Hour
	if _, err := h.store.AdvanceClock(context.Background(), payments.Scope{MerchantID: m}, by); err != nil {
		t.Fatal(err)
	}
	created := func(key string) time.Time {
		t.Helper()
		r := h.do("POST", "/v1/customers", key, map[string]any{"email": "ada@example.com"})
		wantOK(t, r)
		var c struct{ Created int64 }
		r.data(t, &c)
		return time.Unix(c.Created, 0)
	}
	near := func(got, want time.Time) bool { return got.Sub(want).Abs() < time.Minute }
	if got, want := created(testKey), time.Now().Add(by); !near(got, want) {
		t.Errorf("customer created in the moved mode: got %v, want about %v", got, want)
	}
	if got, want := created(liveKey), time.Now(); !near(got, want) {
		t.Errorf("customer created in the other mode: got %v, want about %v", got, want)
	}

	// The page reads the clock through a cache of at most a second.
	var status int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(h.url + "/checkout/" + s.ID)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if status = resp.StatusCode; status == http.StatusGone {
			break
		}
	}
	if status != http.StatusGone {
		t.Errorf("GET /checkout/%s a month later on the merchant's clock: got %d, want 410", s.ID, status)
	}
}
