package tasks

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
)

// TypeDeliverWebhook sends one webhook delivery.
const TypeDeliverWebhook = "webhook:deliver"

// DeliverWebhook is the payload of a delivery task.
type DeliverWebhook struct {
	MerchantID string `json:"merchant_id"`
	Live       bool   `json:"livemode"`
	DeliveryID string `json:"delivery_id"`
}

// DeliveryMaxRetry with a 30 s base doubling to a 12 h cap spreads retries
// over about three days (decisions.md §4).
const (
	DeliveryMaxRetry = 16
	deliveryMaxDelay = 12 * time.Hour
)

// NewDeliverWebhook builds the task, as its registry entry says.
func NewDeliverWebhook(p DeliverWebhook) *asynq.Task {
	return byJob[payments.JobDeliverWebhook].Task(payments.Job{Kind: payments.JobDeliverWebhook, ID: p.DeliveryID, MerchantID: p.MerchantID, Live: p.Live})
}

// DeliveryDelay is the wait after a failed attempt when the task has been
// retried `retried` times so far (0 after the first attempt, as asynq counts):
// base·2^retried, capped at 12 h, with ±10 % jitter so that a receiver coming
// back up is not hit by every retry at once.
func DeliveryDelay(base time.Duration, retried int) time.Duration {
	d := base
	for i := 0; i < retried && d < deliveryMaxDelay; i++ {
		d *= 2
	}
	d = min(d, deliveryMaxDelay)
	jitter := time.Duration(float64(d) * (rand.Float64()*0.2 - 0.1))
	return d + jitter
}

// Enqueuer puts tasks on the queues.
type Enqueuer struct {
	Client *asynq.Client
	Log    *slog.Logger
	// Redis, when set, lets PublishQueues repair the dashboard's list of
	// queues after Redis lost its data.
	Redis redis.UniversalClient
}

// allQueuesKey is asynq's set of queue names, which its dashboard and
// inspector read. A client adds a queue there only on its first enqueue, so
// after Redis loses its data queues stay invisible until the process restarts.
const allQueuesKey = "asynq:queues"

// PublishQueues (re)adds the service's queues to that set; the relay calls it
// before re-enqueueing stranded work.
func (e *Enqueuer) PublishQueues(ctx context.Context) error {
	if e.Redis == nil {
		return nil
	}
	return e.Redis.SAdd(ctx, allQueuesKey, QueueCritical, QueueDefault, QueueLow).Err()
}

// Enqueue enqueues tasks after their transaction committed and returns how
// many it queued. A task already queued (ErrTaskIDConflict: its TaskID is
// its row's id) is fine; any other failure is only logged: the row stays
// and the relay enqueues it.
func (e *Enqueuer) Enqueue(ctx context.Context, ts []*asynq.Task) int {
	n := 0
	for _, t := range ts {
		_, err := e.Client.EnqueueContext(ctx, t)
		switch {
		case err == nil:
			n++
		case errors.Is(err, asynq.ErrTaskIDConflict):
		default:
			e.Log.WarnContext(ctx, "enqueue task; the relay will retry", "type", t.Type(), "error", err)
		}
	}
	return n
}
