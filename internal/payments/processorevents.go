package payments

import "time"

// ProcessorEvent is something the processor reported (a dispute opened),
// stored in the transaction that learned of it and applied by a worker.
type ProcessorEvent struct {
	ID              string
	Type            string
	PaymentIntentID string
	Data            map[string]string
	Created         time.Time
}

// Processor event types.
const (
	ProcessorDisputeCreated = "dispute.created"
)
