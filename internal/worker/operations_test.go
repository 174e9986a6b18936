package worker_test

// Webhook operations (issue 13): re-enabling, the disabled-endpoint policy,
// the delivery log, resend, rotation and Standard Webhooks signatures,
// against real HTTPS receivers and a real asynq worker.

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
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
