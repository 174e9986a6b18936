package tasks

import (
	"encoding/json"
	"time"

	"github.com/hibiken/asynq"
)

// Task types of the money paths.
const (
	TypeExecuteRefund  = "refund:execute"
	TypeProcessorEvent = "processor:event"
	TypeSubmitEvidence = "dispute:submit_evidence"
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

// NewMoneyTask builds the task of typ for ref; its TaskID is the row id, so
// the API and the relay can both enqueue it and it is queued at most once.
func NewMoneyTask(typ string, ref Ref) *asynq.Task {
	b, _ := json.Marshal(ref)
	return asynq.NewTask(typ, b, asynq.TaskID(ref.ID), asynq.Queue(QueueCritical),
		asynq.MaxRetry(MoneyMaxRetry), asynq.Timeout(time.Minute))
}
