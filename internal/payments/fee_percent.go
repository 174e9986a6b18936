package payments

import "fmt"

// FeePercent is the percentage part of plan's fee (4.2 for 4.2%), for a
// processor that takes the platform fee as a percentage of each invoice
// (Stripe's application_fee_percent on a subscription): the fixed part per
// charge cannot be expressed there.
func FeePercent(plan Plan) float64 {
	bps, ok := feeRateBps[plan]
	if !ok {
		panic(fmt.Sprintf("fee: unknown plan %q", plan)) // plans are checked at merchant creation
	}
	return float64(bps) / 100
}

// InvoiceFee is the platform's fee on a processor's invoice of amount: the
// plan's percentage only (FeePercent, rounded to the nearest minor unit,
// halves up, as Fee rounds its percentage part), since that is all the
// processor takes by application_fee_percent.
func InvoiceFee(plan Plan, amount int64) int64 {
	return (amount*feeRateBps[plan] + 5000) / 10000
}
