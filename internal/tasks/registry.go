package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
)

// Kind is everything about one kind of after-commit work (a payments.JobKind):
// its task type, queue and retry policy, the payload its task carries, and
// the store query that finds its rows whose task may have vanished. The
// API (enqueueing after commit), the relay and the worker all read it, so
// they cannot disagree; TestKindsComplete checks that every JobKind has one.
type Kind struct {
	Job      payments.JobKind
	Type     string // the asynq task type
	Queue    string
	MaxRetry int
	Timeout  time.Duration
	// Kept: a completed task stays in Redis for CompletedRetention, visible
	// in the dashboard; otherwise asynq deletes it when it succeeds.
	Kept bool
	// Backoff is the wait before retry n (0 after the first attempt) given
	// the configured base; nil is asynq's default (n^4 s plus jitter).
	Backoff func(base time.Duration, n int) time.Duration
	// Payload is what the task carries for a job: ids only; the handler
	// reloads the rows.
	Payload func(payments.Job) any
	// Stranded is the store method that finds this kind's waiting rows (see
	// StrandedStore).
	Stranded func(s StrandedStore, ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
}

// StrandedStore finds work whose task may have vanished (Redis lost its
// data, or a process died between commit and enqueue): per kind, rows still
// waiting since before, oldest first, at most limit. The jobs it returns
// need not carry their Kind; StrandedJobs sets it.
type StrandedStore interface {
	StrandedDeliveries(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
	StrandedEvents(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
	StrandedRefunds(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
	StrandedProcessorEvents(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
	StrandedEvidence(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
	StrandedSubscriptionCharges(ctx context.Context, before time.Time, limit int) ([]payments.Job, error)
}

func refPayload(j payments.Job) any {
	return Ref{MerchantID: j.MerchantID, Live: j.Live, ID: j.ID}
}

// Kinds is the registry: one entry per payments.JobKind.
var Kinds = []Kind{
	{
		Job: payments.JobDeliverWebhook, Type: TypeDeliverWebhook, Queue: QueueDefault,
		MaxRetry: DeliveryMaxRetry, Timeout: 30 * time.Second,
		Kept:    true, // completed deliveries stay visible in the dashboard
		Backoff: DeliveryDelay,
		Payload: func(j payments.Job) any {
			return DeliverWebhook{MerchantID: j.MerchantID, Live: j.Live, DeliveryID: j.ID}
		},
		Stranded: StrandedStore.StrandedDeliveries,
	},
	{
		// An event's first attempts, one task for all its endpoints: one
		// dequeue and one read instead of one per endpoint. A failed
		// attempt's retries are JobDeliverWebhook tasks; the task itself
		// is retried only when its attempts could not be recorded.
		Job: payments.JobDeliverEvent, Type: TypeDeliverEvent, Queue: QueueDefault,
		MaxRetry: DeliveryMaxRetry, Timeout: 2 * time.Minute,
		Kept:    true, // as deliveries'
		Backoff: DeliveryDelay,
		Payload: func(j payments.Job) any {
			return DeliverEvent{MerchantID: j.MerchantID, Live: j.Live, EventID: j.ID}
		},
		Stranded: StrandedStore.StrandedEvents,
	},
	{
		Job: payments.JobExecuteRefund, Type: TypeExecuteRefund, Queue: QueueCritical,
		MaxRetry: MoneyMaxRetry, Timeout: time.Minute, Payload: refPayload,
		Stranded: StrandedStore.StrandedRefunds,
	},
	{
		Job: payments.JobProcessorEvent, Type: TypeProcessorEvent, Queue: QueueCritical,
		MaxRetry: MoneyMaxRetry, Timeout: time.Minute, Payload: refPayload,
		Stranded: StrandedStore.StrandedProcessorEvents,
	},
	{
		Job: payments.JobSubmitEvidence, Type: TypeSubmitEvidence, Queue: QueueCritical,
		MaxRetry: MoneyMaxRetry, Timeout: time.Minute, Payload: refPayload,
		Stranded: StrandedStore.StrandedEvidence,
	},
	{
		// A pending subscription charge: a renewal, a dunning retry whose
		// time came (the relay finds those), an always_invoice proration.
		Job: payments.JobSubscriptionCharge, Type: TypeSubscriptionCharge, Queue: QueueBilling,
		MaxRetry: MoneyMaxRetry, Timeout: time.Minute, Payload: refPayload,
		Stranded: StrandedStore.StrandedSubscriptionCharges,
	},
}

var (
	byJob  = map[payments.JobKind]Kind{}
	byType = map[string]Kind{}
)

// completedRetention is CompletedRetention's value, in nanoseconds; the
// package's init sets it to an hour.
var completedRetention atomic.Int64

// CompletedRetention is how long a completed task of a Kept kind stays in
// Redis (QUEUE_COMPLETED_RETENTION, 1h by default; 0 keeps none). Each
// costs Redis about 0.7 KB (README, "Queues"), so at a sustained rate of
// tasks it is what sizes Redis' memory.
func CompletedRetention() time.Duration { return time.Duration(completedRetention.Load()) }

// SetCompletedRetention sets CompletedRetention for the process, once at
// its start (app.Setup), before any task is built.
func SetCompletedRetention(d time.Duration) { completedRetention.Store(int64(d)) }

func init() {
	completedRetention.Store(int64(time.Hour)) // QUEUE_COMPLETED_RETENTION's default
	for _, k := range Kinds {
		byJob[k.Job] = k
		byType[k.Type] = k
	}
}

// KindOf returns the registry entry of a job kind.
func KindOf(j payments.JobKind) (Kind, bool) {
	k, ok := byJob[j]
	return k, ok
}

// Task builds the task that does j. Its TaskID is the row's id, so the API
// and the relay can both enqueue it and it is queued at most once.
func (k Kind) Task(j payments.Job) *asynq.Task {
	b, _ := json.Marshal(k.Payload(j))
	opts := []asynq.Option{asynq.TaskID(j.ID), asynq.Queue(k.Queue), asynq.MaxRetry(k.MaxRetry), asynq.Timeout(k.Timeout)}
	if r := CompletedRetention(); k.Kept && r > 0 {
		opts = append(opts, asynq.Retention(r))
	}
	return asynq.NewTask(k.Type, b, opts...)
}

// ForJobs converts the jobs transactions leave to the tasks that do them.
func ForJobs(jobs []payments.Job) []*asynq.Task {
	out := make([]*asynq.Task, 0, len(jobs))
	for _, j := range jobs {
		k, ok := byJob[j.Kind]
		if !ok {
			panic("tasks: no registry entry for job kind " + string(j.Kind)) // caught by TestKindsComplete
		}
		out = append(out, k.Task(j))
	}
	return out
}

// StrandedJobs runs every kind's stranded query: at most limit of each kind,
// oldest first. Enqueueing one whose task still exists is a no-op.
func StrandedJobs(ctx context.Context, s StrandedStore, before time.Time, limit int) ([]payments.Job, error) {
	var out []payments.Job
	for _, k := range Kinds {
		jobs, err := k.Stranded(s, ctx, before, limit)
		if err != nil {
			return nil, fmt.Errorf("stranded %s jobs: %w", k.Job, err)
		}
		for _, j := range jobs {
			j.Kind = k.Job
			out = append(out, j)
		}
	}
	return out, nil
}

// RetryDelay is the worker's asynq.RetryDelayFunc: each kind's Backoff from
// base; other tasks (and kinds without one) use asynq's default.
func RetryDelay(base time.Duration) asynq.RetryDelayFunc {
	return func(n int, err error, t *asynq.Task) time.Duration {
		if ri := (*RetryIn)(nil); errors.As(err, &ri) {
			return ri.Delay
		}
		if k, ok := byType[t.Type()]; ok && k.Backoff != nil {
			return k.Backoff(base, n)
		}
		return asynq.DefaultRetryDelayFunc(n, err, t)
	}
}
