package payments

// JobKind names work a transaction leaves for a worker.
type JobKind string

// The kinds of after-commit work. Each names a row that stays the truth:
// a lost job is found again by the scheduler's relay.
const (
	JobDeliverWebhook JobKind = "webhook_delivery" // a webhook_deliveries row
	// JobDeliverEvent is an event's first attempts at once: its deliveries
	// written with it, none attempted yet. Retries are JobDeliverWebhook.
	JobDeliverEvent   JobKind = "webhook_event"
	JobExecuteRefund  JobKind = "refund"           // a pending refund
	JobProcessorEvent JobKind = "processor_event"  // an unapplied processor event
	JobSubmitEvidence JobKind = "dispute_evidence" // submitted evidence not yet sent to the processor
	// JobSubscriptionCharge is a pending subscription charge (a renewal, a
	// dunning retry, an always_invoice proration) to charge.
	JobSubscriptionCharge JobKind = "subscription_charge"
)

// Job is work to enqueue once its transaction has committed.
type Job struct {
	Kind       JobKind
	ID         string
	MerchantID string
	Live       bool
}

// Effects are what a change writes besides its own rows, in its transaction:
// events for the merchant (the outbox), ledger entries (the balance follows),
// a change to what pending refunds reserve, processor events to apply and
// jobs to run after commit, and the processor event the change applies.
type Effects struct {
	Events          []Event
	Ledger          []LedgerEntry
	Reserve         int64 // added to the balance's reserved amount, in ReserveCurrency
	ReserveCurrency string
	ProcessorEvents []ProcessorEvent
	// Applied is the processor event this change applies: recorded as
	// applied in the change's transaction (inserted when new, marked when
	// stored). A store returns ErrEventApplied, and writes nothing, when it
	// was applied or received before.
	Applied *ProcessorEvent
	Jobs    []Job
}
