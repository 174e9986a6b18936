package payments

import "fmt"

// FeePercent is the percentage part of plan's fee (4.2 for 4.2%), for a
// processor that takes the platform fee as a percentage of each invoice
// (Stripe's application_fee_percent on a subscription): the fixed part per
// charge cannot be expressed there.
func FeePercent(plan Plan) float64 {
	return float64(rateBps(plan)) / 100
}

// rateBps is plan's fee rate in basis points.
func rateBps(plan Plan) int64 {
	bps, ok := feeRateBps[plan]
	if !ok {
		panic(fmt.Sprintf("fee: unknown plan %q", plan)) // plans are checked at merchant creation
	}
	return bps
}

// InvoiceFee is the percentage part of plan's fee on amount, rounded half
// up: Fee's first part, and alone the platform's fee on a processor's
// invoice, since that is all the processor takes by application_fee_percent.
func InvoiceFee(plan Plan, amount int64) int64 {
	return (amount*rateBps(plan) + 5000) / 10000
}
