package worker_test

// Webhook operations (issue 13): re-enabling, the disabled-endpoint policy,
// the delivery log, resend, rotation and Standard Webhooks signatures,
// against real HTTPS receivers and a real asynq worker.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/webhook"
)

func ptr[T any](v T) *T { return &v }

func (s *deliveryStack) endpointObject(t *testing.T, sc payments.Scope, id string) payments.EndpointObject {
	t.Helper()
	e, err := s.svc.Endpoint(context.Background(), sc, id)
	if err != nil {
		t.Fatalf("get endpoint %s: %v", id, err)
	}
	return e
}

// TestReenableAfterAutoDisable: ten failures disable the endpoint
// (consecutive_failures); an event while it is disabled gets no delivery;
// re-enabling resets the count and deliveries flow again.
func TestReenableAfterAutoDisable(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Re-enable shop")}
	var failing atomic.Bool
	failing.Store(true)
	rc := newReceiver(t, func(int, *http.Request) int {
		if failing.Load() {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	ep := s.endpoint(t, sc, rc.URL)
	first := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	if row := s.settled(t, ep.ID, first, 60*time.Second); row.Status != "failed" || row.Attempts != 10 ||
		row.LastError.String != "receiver answered 500; endpoint disabled (consecutive_failures)" {
		t.Fatalf("first delivery: got %+v, want failed after 10 attempts, saying why", row)
	}
	e := s.endpointObject(t, sc, ep.ID)
	if e.Status != payments.EndpointDisabled || e.FailureCount != 10 || e.DisabledAt == nil ||
		e.DisabledReason == nil || *e.DisabledReason != payments.DisabledFailures || e.LastDeliveryAt != nil {
		t.Fatalf("endpoint after 10 failures: got %+v, want disabled for consecutive_failures, 10 failures, never delivered", e)
	}

	// The policy: an event while disabled gets no delivery row.
	missed := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	for _, r := range s.deliveries(t, ep.ID) {
		if r.EventID == missed {
			t.Fatalf("event while disabled: got delivery %+v, want none", r)
		}
	}

	failing.Store(false)
	e, err := s.svc.UpdateEndpoint(context.Background(), sc, ep.ID, payments.EndpointUpdate{Status: ptr(payments.EndpointEnabled)})
	if err != nil {
		t.Fatal(err)
	}
	if e.Status != payments.EndpointEnabled || e.FailureCount != 0 || e.DisabledReason != nil || e.DisabledAt != nil {
		t.Fatalf("re-enabled: got %+v, want enabled with the count reset", e)
	}
	before := time.Now().Unix()
	next := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	if row := s.settled(t, ep.ID, next, 30*time.Second); row.Status != "succeeded" || row.Attempts != 1 {
		t.Fatalf("delivery after re-enabling: got %+v, want succeeded at once", row)
	}
	e = s.endpointObject(t, sc, ep.ID)
	if e.LastDeliveryAt == nil || *e.LastDeliveryAt < before || *e.LastDeliveryAt > time.Now().Unix() || e.FailureCount != 0 {
		t.Errorf("endpoint after a success: got %+v, want last_delivery_at now and no failures", e)
	}
	if ids := rc.eventIDs(); ids[len(ids)-1] != next {
		t.Errorf("receiver: got events %v, want %s last", ids, next)
	}

	// Recovery of the event missed while disabled: a resend.
	if _, err := s.svc.ResendEvent(context.Background(), sc, missed, payments.ResendInput{Endpoint: &ep.ID}); err != nil {
		t.Fatal(err)
	}
	if row := s.settled(t, ep.ID, missed, 30*time.Second); row.Status != "succeeded" {
		t.Errorf("resent missed event: got %+v, want succeeded", row)
	}
	if ids := rc.eventIDs(); ids[len(ids)-1] != missed {
		t.Errorf("receiver: got events %v, want %s last", ids, missed)
	}

	// The failed delivery's log holds every attempt's reason.
	log, err := s.svc.EndpointDelivery(context.Background(), sc, ep.ID, s.delivery(t, ep.ID, first).ID)
	if err != nil || log.AttemptLog == nil || len(*log.AttemptLog) != 10 {
		t.Fatalf("attempt log of the failed delivery: got %+v, %v, want 10 attempts", log, err)
	}
	for i, a := range *log.AttemptLog {
		if a.HTTPStatus == nil || *a.HTTPStatus != 500 || a.Error == nil || *a.Error != "receiver answered 500" {
			t.Errorf("attempt %d: got %+v, want 500, receiver answered 500", i+1, a)
		}
	}
}

// TestDisablingFailsPendingDeliveries: deliveries pending when an endpoint
// is disabled fail with "endpoint disabled" and are never sent.
func TestDisablingFailsPendingDeliveries(t *testing.T) {
	s := newDeliveryStack(t) // no worker: the deliveries stay pending
	sc := payments.Scope{MerchantID: s.merchant(t, "Pending shop")}
	rc := newReceiver(t, nil)
	ep := s.endpoint(t, sc, rc.URL)
	evs := []string{s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil)), s.eventOf(t, s.pay(t, sc, sandbox.CardDeclined, nil))}
	if _, err := s.svc.UpdateEndpoint(context.Background(), sc, ep.ID, payments.EndpointUpdate{Status: ptr(payments.EndpointDisabled)}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if row := s.delivery(t, ep.ID, ev); row.Status != "failed" || row.LastError.String != "endpoint disabled" || row.Attempts != 0 {
			t.Errorf("pending delivery of %s: got %+v, want failed, endpoint disabled, no attempt", ev, row)
		}
	}
	s.startWorker(t) // the queued tasks find their rows failed
	rc.stays(t, 0, 500*time.Millisecond)
}

// TestDeliveryLogAndResend: the delivery log after a retry and a success
// shows each attempt's status, body and error; a resend delivers the same
// event (same id, same bytes) again, signed with the endpoint's secret.
func TestDeliveryLogAndResend(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Log shop")}
	var n atomic.Int32
	rc := newReceiver(t, func(int, *http.Request) int {
		if n.Add(1) == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ep := s.endpoint(t, sc, rc.URL)
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	row := s.settled(t, ep.ID, ev, 30*time.Second)

	page, err := s.svc.EndpointDeliveries(context.Background(), sc, ep.ID, payments.DeliveryFilter{ListParams: payments.ListParams{Limit: 10}})
	if err != nil || len(page.Data) != 1 {
		t.Fatalf("delivery log: got %+v, %v, want one delivery", page, err)
	}
	d := page.Data[0].Object()
	if d.ID != row.ID || d.Event != ev || d.EventType != payments.EventPaymentSucceeded || d.Status != payments.DeliverySucceeded ||
		d.Attempts != 2 || d.LastHTTPStatus == nil || *d.LastHTTPStatus != 200 || d.LastError != nil ||
		d.NextRetryAt != nil || d.DeliveredAt == nil || d.LastResponseBody == nil {
		t.Errorf("delivery log entry: got %+v, want succeeded after 2 attempts, last 200", d)
	}
	one, err := s.svc.EndpointDelivery(context.Background(), sc, ep.ID, row.ID)
	if err != nil {
		t.Fatal(err)
	}
	if one.AttemptLog == nil || len(*one.AttemptLog) != 2 {
		t.Fatalf("attempt log: got %+v, want 2 attempts", one.AttemptLog)
	}
	if a := (*one.AttemptLog)[0]; a.HTTPStatus == nil || *a.HTTPStatus != 503 || a.Error == nil || *a.Error != "receiver answered 503" {
		t.Errorf("attempt 1: got %+v, want 503 and its error", a)
	}
	if a := (*one.AttemptLog)[1]; a.HTTPStatus == nil || *a.HTTPStatus != 200 || a.Error != nil {
		t.Errorf("attempt 2: got %+v, want 200 without error", a)
	}

	re, err := s.svc.ResendEvent(context.Background(), sc, ev, payments.ResendInput{Endpoint: &ep.ID})
	if err != nil {
		t.Fatal(err)
	}
	if re.ID == row.ID || re.Event != ev || re.Status != payments.DeliveryPending {
		t.Fatalf("resend: got %+v, want a new pending delivery of %s", re, ev)
	}
	rc.waitCount(t, 3, 15*time.Second)
	got := rc.requests()
	first, again := got[1], got[2]
	if again.Header.Get(webhook.EventIDHeader) != ev || !bytes.Equal(again.Body, first.Body) {
		t.Errorf("resent request: got event %q, body %s, want %s with the first delivery's bytes %s",
			again.Header.Get(webhook.EventIDHeader), again.Body, ev, first.Body)
	}
	if err := webhook.Verify(ep.Secret, again.Body, again.Header.Get(webhook.SignatureHeader)); err != nil {
		t.Errorf("resent request signature: %v", err)
	}
	waitUntil(t, 10*time.Second, "resend succeeded", func() (bool, string) {
		d, err := s.svc.EndpointDelivery(context.Background(), sc, ep.ID, re.ID)
		return err == nil && d.Status == payments.DeliverySucceeded, fmt.Sprintf("%+v %v", d, err)
	})
}

// TestStandardWebhooksLibraryVerifiesDeliveries: the official Standard
// Webhooks Go library verifies real deliveries with the endpoint's secret
// exactly as the API returned it, for a new secret and for one of the form
// made before issue 13 (whsec_ and 32 base62 characters); the spec's
// X-Service-Signature verifies as before.
func TestStandardWebhooksLibraryVerifiesDeliveries(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Standard shop")}
	rcNew, rcOld := newReceiver(t, nil), newReceiver(t, nil)
	epNew := s.endpoint(t, sc, rcNew.URL)
	epOld := s.endpoint(t, sc, rcOld.URL)
	// A secret as CreateEndpoint made them before: whsec_ + 32 base62.
	oldSecret := "whsec_" + strings.Repeat("Ab3dEfGh", 4)
	if _, err := s.db.Exec(`UPDATE webhook_endpoints SET secret_sealed = $1 WHERE id = $2`,
		s.box.Seal([]byte(oldSecret), payments.EndpointAAD(epOld.ID)), epOld.ID); err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{"note": `café "quoted" <b>&</b> ✓`}
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, meta))
	for _, c := range []struct {
		name   string
		rc     *receiver
		secret string
	}{{"new secret", rcNew, epNew.Secret}, {"secret of the old form", rcOld, oldSecret}} {
		t.Run(c.name, func(t *testing.T) {
			c.rc.waitCount(t, 1, 15*time.Second)
			req := c.rc.requests()[0]
			wh, err := standardwebhooks.NewWebhook(c.secret)
			if err != nil {
				t.Fatalf("standardwebhooks.NewWebhook(secret as returned): %v", err)
			}
			if err := wh.Verify(req.Body, req.Header); err != nil {
				t.Errorf("standardwebhooks Verify: got %v, want nil (headers %v)", err, req.Header)
			}
			if got := req.Header.Get("webhook-id"); got != ev {
				t.Errorf("webhook-id: got %q, want the event id %s", got, ev)
			}
			ts, err := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
			if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute {
				t.Errorf("webhook-timestamp: got %q, want the attempt's Unix time", req.Header.Get("webhook-timestamp"))
			}
			if !regexp.MustCompile(`^v1,[A-Za-z0-9+/]{43}=$`).MatchString(req.Header.Get("webhook-signature")) {
				t.Errorf("webhook-signature: got %q, want one v1,<base64>", req.Header.Get("webhook-signature"))
			}
			if err := wh.Verify(append(bytes.Clone(req.Body), ' '), req.Header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("tampered body: got %v, want ErrNoMatchingSignature", err)
			}
			replayed := req.Header.Clone()
			replayed.Set("webhook-timestamp", strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10))
			if err := wh.Verify(req.Body, replayed); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
				t.Errorf("timestamp 6 minutes old: got %v, want ErrMessageTooOld", err)
			}
			if err := webhook.Verify(c.secret, req.Body, req.Header.Get(webhook.SignatureHeader)); err != nil {
				t.Errorf("X-Service-Signature: %v", err)
			}
		})
	}
}

// TestRotationGrace: after a rotation with a grace period, receivers holding
// the old secret and the new one both verify every delivery with the
// official library; after the grace only the new one does.
func TestRotationGrace(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Rotating shop")}
	rc := newReceiver(t, nil)
	ep := s.endpoint(t, sc, rc.URL)
	oldSecret := ep.Secret
	const grace = 3
	rot, err := s.svc.RotateEndpointSecret(context.Background(), sc, ep.ID, payments.RotateInput{GracePeriod: ptr(int64(grace))})
	if err != nil {
		t.Fatal(err)
	}
	newSecret := rot.Secret
	if newSecret == oldSecret || rot.PreviousSecretExpiresAt == nil {
		t.Fatalf("rotation: got %+v, want a new secret and previous_secret_expires_at", rot)
	}
	oldWH, _ := standardwebhooks.NewWebhook(oldSecret)
	newWH, _ := standardwebhooks.NewWebhook(newSecret)

	s.pay(t, sc, sandbox.CardSuccess, nil)
	rc.waitCount(t, 1, 15*time.Second)
	during := rc.requests()[0]
	if n := len(strings.Fields(during.Header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature during the grace: got %d signatures, want 2", n)
	}
	if err := oldWH.Verify(during.Body, during.Header); err != nil {
		t.Errorf("during the grace, receiver with the old secret: %v", err)
	}
	if err := newWH.Verify(during.Body, during.Header); err != nil {
		t.Errorf("during the grace, receiver with the new secret: %v", err)
	}
	if err := webhook.Verify(newSecret, during.Body, during.Header.Get(webhook.SignatureHeader)); err != nil {
		t.Errorf("X-Service-Signature with the new secret: %v", err)
	}

	waitUntil(t, grace*time.Second+5*time.Second, "grace over", func() (bool, string) {
		e := s.endpointObject(t, sc, ep.ID)
		return e.PreviousSecretExpiresAt == nil, fmt.Sprintf("previous_secret_expires_at %v", e.PreviousSecretExpiresAt)
	})
	s.pay(t, sc, sandbox.CardSuccess, nil)
	rc.waitCount(t, 2, 15*time.Second)
	after := rc.requests()[1]
	if n := len(strings.Fields(after.Header.Get("webhook-signature"))); n != 1 {
		t.Errorf("webhook-signature after the grace: got %d signatures, want 1", n)
	}
	if err := newWH.Verify(after.Body, after.Header); err != nil {
		t.Errorf("after the grace, receiver with the new secret: %v", err)
	}
	if err := oldWH.Verify(after.Body, after.Header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("after the grace, receiver with the old secret: got %v, want ErrNoMatchingSignature", err)
	}
	if err := webhook.Verify(oldSecret, after.Body, after.Header.Get(webhook.SignatureHeader)); err == nil {
		t.Errorf("after the grace, X-Service-Signature verifies with the old secret")
	}
}

// TestHonestDeliverySemantics against real HTTPS receivers: 410 Gone
// disables the endpoint at once; 429 and 503 with Retry-After (seconds or
// an HTTP date) are retried no sooner than it says; a redirect is not
// followed and fails; each attempt's reason is in the delivery log.
func TestHonestDeliverySemantics(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	ctx := context.Background()
	attemptLog := func(t *testing.T, sc payments.Scope, endpointID, eventID string) []payments.AttemptObject {
		t.Helper()
		d, err := s.svc.EndpointDelivery(ctx, sc, endpointID, s.delivery(t, endpointID, eventID).ID)
		if err != nil || d.AttemptLog == nil {
			t.Fatalf("delivery of %s: %+v, %v", eventID, d, err)
		}
		return *d.AttemptLog
	}

	t.Run("410 disables at once", func(t *testing.T) {
		t.Parallel()
		sc := payments.Scope{MerchantID: s.merchant(t, "Gone shop")}
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusGone })
		ep := s.endpoint(t, sc, rc.URL)
		ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
		row := s.settled(t, ep.ID, ev, 15*time.Second)
		if row.Status != "failed" || row.Attempts != 1 || row.LastError.String != "receiver answered 410 (gone); endpoint disabled (gone)" {
			t.Errorf("delivery: got %+v, want failed after one attempt, saying 410 disabled it", row)
		}
		e := s.endpointObject(t, sc, ep.ID)
		if e.Status != payments.EndpointDisabled || e.DisabledReason == nil || *e.DisabledReason != payments.DisabledGone || e.FailureCount != 1 {
			t.Errorf("endpoint: got %+v, want disabled (gone) after 1 failure", e)
		}
		rc.stays(t, 1, 300*time.Millisecond)
	})

	for _, c := range []struct {
		name   string
		status int
		header func() string
	}{
		{"429 Retry-After seconds", http.StatusTooManyRequests, func() string { return "2" }},
		{"503 Retry-After HTTP date", http.StatusServiceUnavailable, func() string {
			return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := payments.Scope{MerchantID: s.merchant(t, c.name)}
			var firstAt, notBefore, secondAt atomic.Int64
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if firstAt.Load() == 0 {
					now := time.Now()
					firstAt.Store(now.UnixNano())
					v := c.header()
					if ra, err := strconv.Atoi(v); err == nil {
						notBefore.Store(now.Add(time.Duration(ra) * time.Second).UnixNano())
					} else if at, err := http.ParseTime(v); err == nil {
						notBefore.Store(at.UnixNano())
					}
					w.Header().Set("Retry-After", v)
					w.WriteHeader(c.status)
					return
				}
				secondAt.CompareAndSwap(0, time.Now().UnixNano())
				w.WriteHeader(http.StatusOK)
			}))
			t.Cleanup(srv.Close)
			ep := s.endpoint(t, sc, srv.URL+"/hooks")
			ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
			// While it waits, the log says why and when the retry comes.
			waitUntil(t, 10*time.Second, "first attempt recorded", func() (bool, string) {
				row := s.delivery(t, ep.ID, ev)
				return row.Attempts == 1, fmt.Sprintf("%+v", row)
			})
			page, err := s.svc.EndpointDeliveries(ctx, sc, ep.ID, payments.DeliveryFilter{ListParams: payments.ListParams{Limit: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if d := page.Data[0].Object(); d.Status == payments.DeliveryPending &&
				(d.NextRetryAt == nil || *d.NextRetryAt < time.Unix(0, notBefore.Load()).Unix() || d.LastError == nil ||
					!strings.Contains(*d.LastError, "Retry-After")) {
				t.Errorf("pending delivery: got %+v, want next_retry_at no sooner than Retry-After and the reason", d)
			}
			row := s.settled(t, ep.ID, ev, 15*time.Second)
			if row.Status != "succeeded" || row.Attempts != 2 {
				t.Fatalf("delivery: got %+v, want succeeded at the second attempt", row)
			}
			if second, nb := time.Unix(0, secondAt.Load()), time.Unix(0, notBefore.Load()); second.Before(nb) {
				t.Errorf("second attempt at %v, %v before Retry-After allowed it (%v)", second, nb.Sub(second), nb)
			}
			if a := attemptLog(t, sc, ep.ID, ev)[0]; a.HTTPStatus == nil || *a.HTTPStatus != c.status || a.Error == nil ||
				!strings.Contains(*a.Error, fmt.Sprintf("receiver answered %d (Retry-After", c.status)) {
				t.Errorf("attempt 1 in the log: got %+v, want %d with Retry-After", a, c.status)
			}
		})
	}

	t.Run("redirect not followed", func(t *testing.T) {
		t.Parallel()
		sc := payments.Scope{MerchantID: s.merchant(t, "Redirect shop")}
		target := newReceiver(t, nil)
		var n atomic.Int32
		src := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				http.Redirect(w, r, target.URL, http.StatusFound)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(src.Close)
		ep := s.endpoint(t, sc, src.URL+"/hooks")
		ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
		if row := s.settled(t, ep.ID, ev, 15*time.Second); row.Status != "succeeded" || row.Attempts != 2 {
			t.Fatalf("delivery: got %+v, want the redirect to fail and the retry to succeed", row)
		}
		if a := attemptLog(t, sc, ep.ID, ev)[0]; a.HTTPStatus == nil || *a.HTTPStatus != http.StatusFound || a.Error == nil ||
			*a.Error != "receiver answered 302 (redirects are not followed)" {
			t.Errorf("attempt 1 in the log: got %+v, want 302, redirects are not followed", a)
		}
		if target.count() != 0 {
			t.Errorf("redirect target: got %d requests, want 0", target.count())
		}
	})
}
