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
}

// Register adds the delivery handler to mux.
func (d *Deliverer) Register(mux *asynq.ServeMux) {
	mux.HandleFunc(tasks.TypeDeliverWebhook, d.deliver)
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
	if !del.EndpointOK {
		if err := d.Store.FailDelivery(ctx, del, "endpoint disabled"); err != nil {
			return err
		}
		return fmt.Errorf("endpoint %s is disabled: %w", del.EndpointID, asynq.SkipRetry)
	}
	secret, err := d.Sealer.Open(del.SecretSealed, payments.EndpointAAD(del.EndpointID))
	if err != nil {
		d.Log.ErrorContext(ctx, "webhook secret does not open: was SECRETS_KEY changed?", "endpoint", del.EndpointID)
		return fmt.Errorf("endpoint %s secret: %w", del.EndpointID, asynq.SkipRetry)
	}

	secrets := []string{string(secret)}
	if del.PreviousSecretSealed != nil { // a rotation's grace period: both sign
		prev, err := d.Sealer.Open(del.PreviousSecretSealed, payments.EndpointAAD(del.EndpointID))
		if err != nil {
			d.Log.ErrorContext(ctx, "previous webhook secret does not open: was SECRETS_KEY changed?", "endpoint", del.EndpointID)
		} else {
			secrets = append(secrets, string(prev))
		}
	}

	res := d.send(ctx, del, secrets)
	retry, _ := asynq.GetRetryCount(ctx)
	maxRetry, ok := asynq.GetMaxRetry(ctx)
	if !ok {
		maxRetry = tasks.DeliveryMaxRetry
	}
	now := d.Now()
	// The wait before the next attempt, decided once: recorded as
	// next_attempt_at and handed to asynq through the error (tasks.RetryIn).
	wait := tasks.DeliveryRetryIn(d.RetryBase, retry, res.retryAfter, now)
	sendErr, status := res.err, res.status
	att := payments.DeliveryAttempt{
		ID:           payments.NewID("wha_"),
		At:           now,
		HTTPStatus:   status,
		ResponseBody: res.body,
		NextAttempt:  now.Add(wait),
		Final:        sendErr != nil && retry >= maxRetry,
	}
	if sendErr != nil {
		att.Error = sendErr.Error()
	}
	disabled, err := d.Store.RecordAttempt(ctx, del, att, payments.DisableReason)
	if err != nil {
		return err
	}
	log := d.Log.With("delivery", del.ID, "event", del.EventID, "endpoint", del.EndpointID, "merchant_id", del.MerchantID,
		"livemode", del.Live, "attempt", retry+1)
	if att.OK() {
		log.DebugContext(ctx, "webhook delivered", "status", status)
		return nil
	}
	log.InfoContext(ctx, "webhook delivery failed", "status", status, "error", att.Error)
	if disabled { // RecordAttempt failed this delivery with the rest
		log.WarnContext(ctx, "webhook endpoint disabled", "status", status)
		return fmt.Errorf("%s; endpoint disabled: %w", att.Error, asynq.SkipRetry)
	}
	return &tasks.RetryIn{Delay: wait, Err: errors.New(att.Error)}
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
func (d *Deliverer) send(ctx context.Context, del payments.Delivery, secrets []string) sent {
	ctx, cancel := context.WithTimeout(ctx, webhook.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, del.URL, bytes.NewReader(del.Payload))
	if err != nil {
		return sent{err: fmt.Errorf("build request: %v", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysvc-webhooks/1")
	webhook.SignHeaders(req.Header, secrets, del.EventID, del.EventType, d.Now(), del.Payload)
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
