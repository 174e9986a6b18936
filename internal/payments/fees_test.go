package payments

import "testing"

func TestFee(t *testing.T) {
	tests := []struct {
		name     string
		plan     Plan
		currency string
		amount   int64
		want     int64
	}{
		{"free $10", PlanFree, "usd", 1000, 49 + 40},
		{"brand $10", PlanBrand, "usd", 1000, 49 + 40},
		{"pro $10", PlanPro, "usd", 1000, 42 + 40},
		{"below half rounds down: 4.9% of 50 = 2.45 → 2", PlanFree, "usd", 50, 2 + 40},
		{"4.9% of 10 = 0.49 → 0", PlanFree, "usd", 10, 0 + 40},
		{"4.9% of 11 = 0.539 → 1", PlanFree, "usd", 11, 1 + 40},
		{"4.2% of 125 = 5.25 → 5", PlanPro, "usd", 125, 5 + 40},
		{"exact half rounds up: 4.2% of 1250 = 52.5 → 53", PlanPro, "usd", 1250, 53 + 40},
		{"4.9% of 102050 = 5000.45 → 5000", PlanFree, "usd", 102050, 5000 + 40},
		{"4.9% of 30 = 1.47 → 1", PlanFree, "usd", 30, 1 + 40},
		{"max amount", PlanFree, "usd", 99999999, 4900000 + 40},
		{"zero-decimal yen", PlanFree, "jpy", 1000, 49 + 60},
		{"unlisted two-decimal", PlanFree, "thb", 1000, 49 + 40},
		{"unlisted zero-decimal", PlanFree, "vnd", 100000, 4900 + 1},
		{"three-decimal", PlanPro, "kwd", 10000, 420 + 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fee(tt.plan, tt.currency, tt.amount); got != tt.want {
				t.Errorf("Fee(%s, %s, %d) = %d, want %d", tt.plan, tt.currency, tt.amount, got, tt.want)
			}
		})
	}
}

func TestGrossUp(t *testing.T) {
	for _, plan := range []Plan{PlanFree, PlanPro} {
		for _, cur := range []string{"usd", "jpy", "kwd"} {
			for amount := int64(1); amount < 20000; amount += 7 {
				total := GrossUp(plan, cur, amount)
				if net := total - Fee(plan, cur, total); net < amount {
					t.Fatalf("%s %s %d: total %d nets %d, want >= %d", plan, cur, amount, total, net, amount)
				}
				if prev := total - 1; prev >= amount && prev-Fee(plan, cur, prev) >= amount {
					t.Fatalf("%s %s %d: total %d is not the smallest; %d also nets enough", plan, cur, amount, total, prev)
				}
			}
		}
	}
	// A worked example: $10.00 on Free: 1094 − (54 + 40) = 1000.
	if got := GrossUp(PlanFree, "usd", 1000); got != 1094 {
		t.Errorf("GrossUp(free, usd, 1000) = %d, want 1094", got)
	}
}
