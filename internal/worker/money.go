package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/tasks"
)

// registerMoney adds the refund, processor-event and evidence handlers.
// Each is safe to run twice for one row (at-least-once): it reloads the row
// and acts only if the row still needs it.
func (h *Handlers) registerMoney(mux *asynq.ServeMux) {
	mux.HandleFunc(tasks.TypeExecuteRefund, h.moneyTask(func(ctx context.Context, sc payments.Scope, id string) error {
		r, err := h.Service.ExecuteRefund(ctx, sc, id)
		if err == nil && r.Status != payments.RefundPending {
			h.Log.InfoContext(ctx, "refund finished", "refund", r.ID, "status", r.Status, "amount", r.Amount)
		}
		return err
	}))
	mux.HandleFunc(tasks.TypeProcessorEvent, h.moneyTask(h.Service.ApplyProcessorEvent))
	mux.HandleFunc(tasks.TypeSubmitEvidence, h.moneyTask(func(ctx context.Context, sc payments.Scope, id string) error {
		_, err := h.Service.SendEvidence(ctx, sc, id)
		return err
	}))
	mux.HandleFunc(tasks.TypeSubscriptionCharge, h.moneyTask(func(ctx context.Context, sc payments.Scope, id string) error {
		ch, err := h.Service.ChargeSubscription(ctx, sc, id)
		if payments.ErrorCode(err) == payments.SubscriptionNotFound {
			return fmt.Errorf("subscription charge %s: %w: %w", id, err, asynq.SkipRetry)
		}
		if err == nil && ch.Attempts > 0 {
			h.Log.InfoContext(ctx, "subscription charge attempted", "charge", ch.ID, "subscription", ch.SubscriptionID,
				"status", ch.Status, "attempts", ch.Attempts)
		}
		return err
	}))
}

// moneyTask decodes a tasks.Ref payload and runs fn on it. A row that does
// not exist (any more) will never be done: the task is not retried.
func (h *Handlers) moneyTask(fn func(ctx context.Context, sc payments.Scope, id string) error) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		var ref tasks.Ref
		if err := json.Unmarshal(t.Payload(), &ref); err != nil || ref.ID == "" || ref.MerchantID == "" {
			return fmt.Errorf("bad payload: %v: %w", err, asynq.SkipRetry)
		}
		err := fn(ctx, payments.Scope{MerchantID: ref.MerchantID, Live: ref.Live}, ref.ID)
		if payments.ErrorCode(err) == payments.PaymentNotFound {
			return fmt.Errorf("%s %s: %w: %w", t.Type(), ref.ID, err, asynq.SkipRetry)
		}
		return err
	}
}
