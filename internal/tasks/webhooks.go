package tasks

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/breaker"
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

// TypeDeliverEvent makes the first attempt of each of an event's
// deliveries.
const TypeDeliverEvent = "webhook:deliver_event"

// DeliverEvent is the payload of an event's task.
type DeliverEvent struct {
	MerchantID string `json:"merchant_id"`
	Live       bool   `json:"livemode"`
	EventID    string `json:"event_id"`
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

// DeliveryRetryIn is the wait after a failed attempt made at now, when the
// task has been retried `retried` times so far and the receiver asked, with
// Retry-After, for at least retryAfter (0: it did not): the larger of
// DeliveryDelay and retryAfter, retryAfter capped at 12 h like the backoff.
// When Retry-After decides, the wait is rounded up so that now plus it is a
// whole second: asynq keeps a retry's time in whole seconds, rounded down,
// and runs it from that second on, which would otherwise be up to a second
// early.
func DeliveryRetryIn(base time.Duration, retried int, retryAfter time.Duration, now time.Time) time.Duration {
	d := DeliveryDelay(base, retried)
	if retryAfter <= d {
		return d
	}
	at := now.Add(min(retryAfter, deliveryMaxDelay))
	if t := at.Truncate(time.Second); t.Before(at) {
		at = t.Add(time.Second)
	}
	return at.Sub(now)
}

// RetryIn is a failed task's error that says how long to wait before the
// next attempt; RetryDelay uses it instead of the kind's backoff, so that
// what the handler recorded (a delivery's next_retry_at) is what happens.
type RetryIn struct {
	Delay time.Duration
	Err   error
}

func (e *RetryIn) Error() string { return e.Err.Error() }
func (e *RetryIn) Unwrap() error { return e.Err }

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
	names := make([]any, 0, len(Queues))
	for q := range Queues {
		names = append(names, q)
	}
	return e.Redis.SAdd(ctx, allQueuesKey, names...).Err()
}

// Enqueue enqueues tasks after their transaction committed and returns how
// many it queued. A task already queued (ErrTaskIDConflict: its TaskID is
// its row's id) is fine; any other failure is only logged, once for the
// call: the rows stay and the relay enqueues them.
//
// Many tasks (a sweep's batch writes hundreds) are enqueued enqueueWidth
// at a time, each an asynq script call and a Redis round trip of its own:
// one after another, a batch of 500 outlasted the after-commit budget
// (app.EnqueueBudget) under load, and the relay picked the rest up a
// relay period later.
func (e *Enqueuer) Enqueue(ctx context.Context, ts []*asynq.Task) int {
	var (
		mu       sync.Mutex
		queued   int
		failed   int
		firstErr error
		errType  string
	)
	one := func(t *asynq.Task) {
		_, err := e.Client.EnqueueContext(ctx, t)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			queued++
		case errors.Is(err, asynq.ErrTaskIDConflict):
		default:
			if failed++; firstErr == nil {
				firstErr, errType = err, t.Type()
			}
		}
	}
	if len(ts) <= 2 {
		for _, t := range ts {
			one(t)
		}
	} else {
		var wg sync.WaitGroup
		next := make(chan *asynq.Task)
		for range min(enqueueWidth, len(ts)) {
			wg.Go(func() {
				for t := range next {
					one(t)
				}
			})
		}
		for _, t := range ts {
			next <- t
		}
		close(next)
		wg.Wait()
	}
	if failed > 0 {
		level := slog.LevelWarn
		if breaker.Refused(firstErr) { // the API's open breaker, which logged it once
			level = slog.LevelDebug
		}
		e.Log.Log(ctx, level, "enqueue tasks; the relay will retry", "failed", failed, "of", len(ts),
			"type", errType, "error", firstErr)
	}
	return queued
}

// enqueueWidth is how many of one call's tasks Enqueue has in flight.
const enqueueWidth = 8

// EnqueueIn enqueues t to run after delay, as Enqueue does.
func (e *Enqueuer) EnqueueIn(ctx context.Context, t *asynq.Task, delay time.Duration) bool {
	return e.enqueue(ctx, t, asynq.ProcessIn(delay))
}

func (e *Enqueuer) enqueue(ctx context.Context, t *asynq.Task, opts ...asynq.Option) bool {
	_, err := e.Client.EnqueueContext(ctx, t, opts...)
	switch {
	case err == nil:
		return true
	case errors.Is(err, asynq.ErrTaskIDConflict):
	case breaker.Refused(err):
		e.Log.DebugContext(ctx, "enqueue task; the relay will retry", "type", t.Type(), "error", err)
	default:
		e.Log.WarnContext(ctx, "enqueue task; the relay will retry", "type", t.Type(), "error", err)
	}
	return false
}
