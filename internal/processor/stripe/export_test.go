package stripe

import (
	"context"

	"paysvc/internal/processor"
)

// Remember is remember, for tests that stand in for Stripe's webhooks.
func (p *Processor) Remember(ctx context.Context, acct processor.Account, ours, theirs string) error {
	return p.remember(ctx, acct, ours, theirs)
}

// DisputeKey is disputeKey.
var DisputeKey = disputeKey
