package tasks

import (
	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
)

// Task types of the money paths.
const (
	TypeExecuteRefund  = "refund:execute"
	TypeProcessorEvent = "processor:event"
	TypeSubmitEvidence = "dispute:submit_evidence"
	// TypeSubscriptionCharge charges a pending subscription charge once
	// (payments.Service.ChargeSubscription).
	TypeSubscriptionCharge = "subscription:charge"
)

// Ref names a row and its scope: what the money tasks carry. Handlers reload
// the row and act only if it still needs it.
type Ref struct {
	MerchantID string `json:"merchant_id"`
	Live       bool   `json:"livemode"`
	ID         string `json:"id"`
}

// MoneyMaxRetry with asynq's default backoff (n^4 s plus jitter) keeps a
// money task (a refund, a processor event, evidence to send) retrying for
// about five days: a processor outage is waited out.
// After that the task is archived, visible in the dashboard, and the refund
// stays pending with its reservation until an operator runs it again.
const MoneyMaxRetry = 25

// NewMoneyTask builds the task of typ for ref, as its registry entry says.
func NewMoneyTask(typ string, ref Ref) *asynq.Task {
	k, ok := byType[typ]
	if !ok {
		panic("tasks: no registry entry for task type " + typ)
	}
	return k.Task(payments.Job{Kind: k.Job, ID: ref.ID, MerchantID: ref.MerchantID, Live: ref.Live})
}
