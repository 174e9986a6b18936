package payments

// Fee rates of the spec in basis points: 4.9% on Free and Brand, 4.2% on Pro.
var feeRateBps = map[Plan]int64{PlanFree: 490, PlanBrand: 490, PlanPro: 420}

// fixedFee is the fixed part of the fee (US$0.40) in each currency's minor
// units; currencies not listed pay the fallback of fixedFeeMinor.
var fixedFee = map[string]int64{
	"usd": 40, "eur": 40, "gbp": 30, "cad": 55, "aud": 60, "nzd": 65, "chf": 35,
	"sek": 400, "nok": 400, "dkk": 280, "pln": 160, "czk": 900, "huf": 14000,
	"jpy": 60, "krw": 550, "sgd": 55, "hkd": 310, "mxn": 700, "brl": 200, "inr": 3300,
}

// fixedFeeMinor is the fallback fixed fee: 40 hundredths of the currency's
// main unit, written in its own minor units (0 decimals: 1; 3 decimals: 400).
func fixedFeeMinor(currency string) int64 {
	if f, ok := fixedFee[currency]; ok {
		return f
	}
	switch MinorUnits(currency) {
	case 0:
		return 1
	case 3:
		return 400
	}
	return 40
}

// Fee is the transaction fee on a charge of amount (minor units) in currency
// for a merchant on plan: round-half-up(amount × rate) + fixed.
func Fee(plan Plan, currency string, amount int64) int64 {
	return InvoiceFee(plan, amount) + fixedFeeMinor(currency)
}

// GrossUp returns the smallest total a customer pays so that the merchant
// nets at least amount after Fee on that total (pass_fees_to_customer).
func GrossUp(plan Plan, currency string, amount int64) int64 {
	bps := feeRateBps[plan]
	// Start from the exact solution of t - t·r - fixed = amount, then walk to
	// the smallest integer that satisfies it under rounding.
	t := ((amount+fixedFeeMinor(currency))*10000 + (10000 - bps) - 1) / (10000 - bps)
	for t > amount && t-1-Fee(plan, currency, t-1) >= amount {
		t--
	}
	for t-Fee(plan, currency, t) < amount {
		t++
	}
	return t
}
