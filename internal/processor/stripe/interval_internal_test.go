package stripe

import "testing"

// Our periods in Stripe's largest dividing unit, and none beyond 3 years.
func TestStripeInterval(t *testing.T) {
	cases := []struct {
		months, days int
		unit         string
		count        int64
		ok           bool
	}{
		{1, 0, "month", 1, true}, {2, 0, "month", 2, true}, {6, 0, "month", 6, true},
		{12, 0, "year", 1, true}, {24, 0, "year", 2, true}, {36, 0, "year", 3, true}, {18, 0, "month", 18, true},
		{0, 7, "week", 1, true}, {0, 14, "week", 2, true}, {0, 3, "day", 3, true}, {0, 52 * 7, "week", 52, true},
		{37, 0, "", 0, false}, {0, 3*365 + 1, "", 0, false}, {0, 0, "", 0, false}, {1, 7, "", 0, false},
	}
	for _, c := range cases {
		unit, count, ok := stripeInterval(c.months, c.days)
		if unit != c.unit || count != c.count || ok != c.ok {
			t.Errorf("%d months %d days: got %s×%d %v, want %s×%d %v", c.months, c.days, unit, count, ok, c.unit, c.count, c.ok)
		}
	}
}
