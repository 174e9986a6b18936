package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/tasks"
	"paysvc/internal/webhook"
)

// DeliveryStore is what delivery needs from storage.
type DeliveryStore interface {
	// DeliveryForSend returns payments.ErrDeliveryNotFound for a row that
	// does not exist.
	DeliveryForSend(ctx context.Context, sc payments.Scope, id string) (payments.Delivery, error)
	// RecordAttempt keeps the attempt and returns whether the endpoint is
	// (now) disabled, as disable decides from the attempt and the run of
	// failures; disabling fails its pending deliveries, this one included.
	RecordAttempt(ctx context.Context, d payments.Delivery, a payments.DeliveryAttempt, disable func(a payments.DeliveryAttempt, consecutiveFailures int) string) (disabled bool, err error)
	FailDelivery(ctx context.Context, d payments.Delivery, reason string) error
	// FirstDeliveries returns an event's deliveries written with it and
	// not attempted yet.
	FirstDeliveries(ctx context.Context, sc payments.Scope, eventID string) ([]payments.Delivery, error)
}

// Deliverer sends webhook deliveries.
type Deliverer struct {
	Store     DeliveryStore
	Sealer    payments.Sealer
	Client    *http.Client
	RetryBase time.Duration
	Log       *slog.Logger
	// Now is wall time, not a merchant's clock: a signature's timestamp is
	// checked against the receiver's clock, and retries wait in real time.
	Now func() time.Time
	// Enqueuer queues the retry of a first attempt that failed (an event's
	// task makes the first attempts, each delivery's own task the rest).
	Enqueuer *tasks.Enqueuer

	keys keyCache
}

// Register adds the delivery handlers to mux.
func (d *Deliverer) Register(mux *asynq.ServeMux) {
	mux.HandleFunc(tasks.TypeDeliverWebhook, d.deliver)
	mux.HandleFunc(tasks.TypeDeliverEvent, d.deliverEvent)
}

// deliver makes one attempt. It is safe to run twice for one delivery
// (at-least-once): a delivery that is no longer pending is left alone.
func (d *Deliverer) deliver(ctx context.Context, t *asynq.Task) error {
	var p tasks.DeliverWebhook
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.DeliveryID == "" {
		return fmt.Errorf("bad payload: %v: %w", err, asynq.SkipRetry)
	}
	sc := payments.Scope{MerchantID: p.MerchantID, Live: p.Live}
	del, err := d.Store.DeliveryForSend(ctx, sc, p.DeliveryID)
	if errors.Is(err, payments.ErrDeliveryNotFound) {
		return fmt.Errorf("delivery %s: %w", p.DeliveryID, asynq.SkipRetry)
	}
	if err != nil {
		return err
	}
	if del.Status != payments.DeliveryPending {
		return nil // delivered, failed or cancelled already
	}
	// asynq archives the task after its last retry whatever the row says
	// (a run that recorded nothing, a database error or a lost lease, used
	// one up): that run's failure is then the delivery's last too, so that
	// it ends failed instead of pending with no task.
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, ok := asynq.GetMaxRetry(ctx)
	att, wait, err := d.attempt(ctx, del, ok && retried >= maxRetry)
	if err != nil {
		return err
	}
	if att.OK() {
		_, err := d.Store.RecordAttempt(ctx, del, att, payments.DisableReason)
		return err
	}
	return d.failed(ctx, del, att, wait)
}

// deliverEvent makes the first attempt of each of an event's deliveries
// written with it, all at once: one task and one read instead of one of
// each per endpoint. A failed attempt is
// recorded as deliver records it and its retries are the delivery's own
// task, queued to run when the attempt says; so are the deliveries this
// cannot attempt (a secret that does not open), to fail there as they
// would. Safe to run twice: what was attempted is no longer a first
// delivery (postgres FirstDeliveries).
func (d *Deliverer) deliverEvent(ctx context.Context, t *asynq.Task) error {
	var p tasks.DeliverEvent
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.EventID == "" {
		return fmt.Errorf("bad payload: %v: %w", err, asynq.SkipRetry)
	}
	sc := payments.Scope{MerchantID: p.MerchantID, Live: p.Live}
	dels, err := d.Store.FirstDeliveries(ctx, sc, p.EventID)
	if err != nil || len(dels) == 0 {
		return err
	}
	type result struct {
		att  payments.DeliveryAttempt
		wait time.Duration
		err  error
	}
	results := make([]result, len(dels))
	var wg sync.WaitGroup
	for i, del := range dels {
		wg.Go(func() {
			var r result
			defer func() {
				// asynq recovers a handler's panic, not one of these
				// goroutines': it would end the worker.
				if p := recover(); p != nil {
					r.err = fmt.Errorf("delivery %s: panic: %v", del.ID, p)
				}
				results[i] = r
			}()
			r.att, r.wait, r.err = d.attempt(ctx, del, false)
		})
	}
	wg.Wait()
	// Every outcome is recorded even when one write fails: the task is
	// then retried and sends again only what was not recorded (what was is
	// no longer a first delivery).
	var errs []error
	var later []*asynq.Task
	for i, r := range results {
		del := dels[i]
		switch {
		case r.err != nil && !errors.Is(r.err, asynq.SkipRetry): // failing it did not commit
			errs = append(errs, r.err)
		case r.err != nil && del.EndpointOK: // its secret does not open: its own task ends in the archive
			later = append(later, deliveryTask(del))
		case r.err != nil: // failed with its endpoint, disabled or deleted
		case r.att.OK():
			if _, err := d.Store.RecordAttempt(ctx, del, r.att, payments.DisableReason); err != nil {
				errs = append(errs, err)
			}
		default:
			var retry *tasks.RetryIn
			switch err := d.failed(ctx, del, r.att, r.wait); {
			case errors.As(err, &retry):
				d.Enqueuer.EnqueueIn(ctx, deliveryTask(del), retry.Delay)
			case !errors.Is(err, asynq.SkipRetry): // not recorded
				errs = append(errs, err)
			}
		}
	}
	d.Enqueuer.Enqueue(ctx, later)
	return errors.Join(errs...)
}

// deliveryTask is del's own task: its retries, a resend.
func deliveryTask(del payments.Delivery) *asynq.Task {
	return tasks.NewDeliverWebhook(tasks.DeliverWebhook{MerchantID: del.MerchantID, Live: del.Live, DeliveryID: del.ID})
}

// attempt makes one attempt at del, a pending delivery, and returns it, not
// yet recorded, with the wait before the next one should it have failed.
// A failure is final after the delivery's last retry, or when lastRun says
// its task will not run again. It returns an error, and attempts nothing,
// when del cannot be sent: its endpoint was disabled or deleted (del is
// failed then) or its secret does not open.
func (d *Deliverer) attempt(ctx context.Context, del payments.Delivery, lastRun bool) (payments.DeliveryAttempt, time.Duration, error) {
	if !del.EndpointOK {
		if err := d.Store.FailDelivery(ctx, del, "endpoint disabled"); err != nil {
			return payments.DeliveryAttempt{}, 0, err
		}
		return payments.DeliveryAttempt{}, 0, fmt.Errorf("endpoint %s is disabled: %w", del.EndpointID, asynq.SkipRetry)
	}
	keys, err := d.keys.get(del, d.Sealer, d.Now(), func(current bool) {
		if current {
			d.Log.ErrorContext(ctx, "webhook secret does not open: was SECRETS_KEY changed?", "endpoint", del.EndpointID)
		} else {
			d.Log.ErrorContext(ctx, "previous webhook secret does not open: was SECRETS_KEY changed?", "endpoint", del.EndpointID)
		}
	})
	if err != nil {
		return payments.DeliveryAttempt{}, 0, fmt.Errorf("endpoint %s secret: %w", del.EndpointID, asynq.SkipRetry)
	}

	res := d.send(ctx, del, keys)
	now := d.Now()
	// The attempts before this one are the delivery's own count, not its
	// task's: a retry's task is new after an event's first attempt, and
	// after the relay re-enqueued it. The wait before the next attempt is
	// decided once: recorded as next_attempt_at and handed to asynq
	// through the error (tasks.RetryIn) or the retry's task.
	retried := del.Attempts
	wait := tasks.DeliveryRetryIn(d.RetryBase, retried, res.retryAfter, now)
	att := payments.DeliveryAttempt{
		ID:           payments.NewID("wha_"),
		At:           now,
		HTTPStatus:   res.status,
		ResponseBody: res.body,
		NextAttempt:  now.Add(wait),
		Final:        res.err != nil && (retried >= tasks.DeliveryMaxRetry || lastRun),
	}
	if res.err != nil {
		att.Error = res.err.Error()
	}
	if att.OK() && d.Log.Enabled(ctx, slog.LevelDebug) { // the common case builds no attributes
		d.logFor(del).DebugContext(ctx, "webhook delivered", "status", res.status)
	}
	return att, wait, nil
}

// failed records att, a failed attempt at del, and returns what the task
// should tell asynq: a tasks.RetryIn to try again after wait, or a
// SkipRetry when this was the last attempt or the endpoint is now disabled.
func (d *Deliverer) failed(ctx context.Context, del payments.Delivery, att payments.DeliveryAttempt, wait time.Duration) error {
	disabled, err := d.Store.RecordAttempt(ctx, del, att, payments.DisableReason)
	if err != nil {
		return err
	}
	log := d.logFor(del)
	log.InfoContext(ctx, "webhook delivery failed", "status", att.HTTPStatus, "error", att.Error)
	switch {
	case disabled: // RecordAttempt failed this delivery with the rest
		log.WarnContext(ctx, "webhook endpoint disabled", "status", att.HTTPStatus)
		return fmt.Errorf("%s; endpoint disabled: %w", att.Error, asynq.SkipRetry)
	case att.Final:
		return fmt.Errorf("%s; no retries left: %w", att.Error, asynq.SkipRetry)
	}
	return &tasks.RetryIn{Delay: wait, Err: errors.New(att.Error)}
}

// logFor is the logger of one attempt at del.
func (d *Deliverer) logFor(del payments.Delivery) *slog.Logger {
	return d.Log.With("delivery", del.ID, "event", del.EventID, "endpoint", del.EndpointID, "merchant_id", del.MerchantID,
		"livemode", del.Live, "attempt", del.Attempts+1)
}

// keyCacheTTL bounds how long an endpoint's opened secrets stay in memory
// unused by a fresh check; keyCacheMax bounds how many endpoints' do.
const (
	keyCacheTTL = 5 * time.Minute
	keyCacheMax = 10000
)

// keyCache keeps endpoints' opened signing secrets (webhook.Keys) so that a
// delivery does not decrypt them and derive their keys again. An entry is
// used only while the sealed secrets it was opened from are exactly those
// the delivery's row carries: a rotation seals a new secret and the end of
// its grace drops the previous one from the row (DeliveryForSend), so
// either opens the secrets again at once; the TTL only bounds how long
// plaintext secrets stay in memory. The zero value is ready.
type keyCache struct {
	mu sync.Mutex
	m  map[string]cachedKeys // endpoint id →
}

type cachedKeys struct {
	sealed, previous string // the sealed secrets the keys were opened from
	keys             webhook.Keys
	opened           time.Time
}

// get returns del's endpoint's keys: the current secret, then the previous
// one during a rotation's grace. A current secret that does not open is an
// error; a previous one that does not open is left out (the current one
// still signs), and failed is told which it was. Nothing is cached then.
func (c *keyCache) get(del payments.Delivery, sealer payments.Sealer, now time.Time, failed func(current bool)) (webhook.Keys, error) {
	c.mu.Lock()
	e, ok := c.m[del.EndpointID]
	c.mu.Unlock()
	if ok && e.sealed == string(del.SecretSealed) && e.previous == string(del.PreviousSecretSealed) && now.Sub(e.opened) < keyCacheTTL {
		return e.keys, nil
	}
	aad := payments.EndpointAAD(del.EndpointID)
	secret, err := sealer.Open(del.SecretSealed, aad)
	if err != nil {
		failed(true)
		return webhook.Keys{}, err
	}
	secrets := []string{string(secret)}
	cache := true
	if del.PreviousSecretSealed != nil { // a rotation's grace period: both sign
		if prev, err := sealer.Open(del.PreviousSecretSealed, aad); err != nil {
			failed(false)
			cache = false
		} else {
			secrets = append(secrets, string(prev))
		}
	}
	keys := webhook.NewKeys(secrets...)
	if cache {
		c.mu.Lock()
		if c.m == nil || len(c.m) >= keyCacheMax {
			c.m = make(map[string]cachedKeys) // start over rather than track ages
		}
		c.m[del.EndpointID] = cachedKeys{sealed: string(del.SecretSealed), previous: string(del.PreviousSecretSealed), keys: keys, opened: now}
		c.mu.Unlock()
	}
	return keys, nil
}

// sent is what came of one POST.
type sent struct {
	status     int    // 0 when no response came
	body       string // the start of the response body (payments.AttemptResponse)
	retryAfter time.Duration
	err        error // nil for a 2xx
}

// send POSTs the exact bytes it signs and reports the receiver's answer. A
// 2xx within the timeout is success. A 429 or 503 may carry Retry-After,
// the least wait before the next attempt; a redirect is not followed and
// fails, as does any other status.
func (d *Deliverer) send(ctx context.Context, del payments.Delivery, keys webhook.Keys) sent {
	ctx, cancel := context.WithTimeout(ctx, webhook.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Payload))
	if err != nil {
		return sent{err: fmt.Errorf("build request: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysvc-webhooks/1")
	keys.SignHeaders(req.Header, del.EventID, del.EventType, d.Now(), del.Payload)
	resp, err := d.Client.Do(req)
	if err != nil {
		return sent{err: fmt.Errorf("send: %v", err)}
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, payments.MaxAttemptResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drain so the connection is reused
	out := sent{status: resp.StatusCode, body: payments.AttemptResponse(head)}
	switch code := resp.StatusCode; {
	case code >= 200 && code <= 299:
	case code >= 300 && code <= 399:
		out.err = fmt.Errorf("receiver answered %d (redirects are not followed)", code)
	case code == http.StatusGone:
		out.err = fmt.Errorf("receiver answered 410 (gone)")
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		out.err = fmt.Errorf("receiver answered %d", code)
		if ra, ok := retryAfter(resp.Header.Get("Retry-After"), d.Now()); ok {
			out.retryAfter = ra
			out.err = fmt.Errorf("receiver answered %d (Retry-After %s)", code, ra.Round(time.Second))
		}
	default:
		out.err = fmt.Errorf("receiver answered %d", code)
	}
	return out
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3), relative to now.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(1<<62)/int64(time.Second))) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
