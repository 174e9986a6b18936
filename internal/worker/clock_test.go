package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

// Moving one merchant's sandbox clock (through the store, as the sandbox
// CLI will) expires that merchant's sessions in that mode on the next sweep,
// and nobody else's: not another merchant's, not its other mode's.
func TestSandboxClockExpiresOnlyItsScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	store := postgres.New(db)
	base := time.Now().Truncate(time.Second)
	svc := payments.NewService(store, nil, func() time.Time { return base },
		payments.WithProcessor(sandbox.New(db, "http://checkout.test")), payments.WithSessionTTL(time.Hour),
		payments.WithSandboxClocks())
	newMerchant := func(name string) string {
		t.Helper()
		m, err := svc.CreateMerchant(ctx, name, "", payments.PlanFree)
		if err != nil {
			t.Fatal(err)
		}
		return m.ID
	}
	a, b := newMerchant("Clock A"), newMerchant("Clock B")
	moved := payments.Scope{MerchantID: a}
	others := []payments.Scope{{MerchantID: a, Live: true}, {MerchantID: b}, {MerchantID: b, Live: true}}
	newSession := func(sc payments.Scope) string {
		t.Helper()
		amount, qty, cur, name := int64(1000), int64(1), "usd", "Thing"
		ok, cancel := "https://shop.example/ok", "https://shop.example/cancel"
		cs, err := svc.CreateSession(ctx, sc, payments.SessionInput{
			LineItems:  []payments.LineItemInput{{Amount: &amount, Currency: &cur, Name: &name, Quantity: &qty}},
			SuccessURL: &ok, CancelURL: &cancel,
		})
		if err != nil {
			t.Fatalf("create session in %+v: %v", sc, err)
		}
		return cs.ID
	}
	sessions := map[payments.Scope]string{moved: newSession(moved)}
	for _, sc := range others {
		sessions[sc] = newSession(sc)
	}
	status := func(sc payments.Scope) string {
		t.Helper()
		cs, err := svc.Session(ctx, sc, sessions[sc])
		if err != nil {
			t.Fatal(err)
		}
		return cs.Status
	}
	sweep := func() {
		t.Helper()
		if _, err := svc.ExpireSessions(ctx, 500); err != nil {
			t.Fatalf("ExpireSessions: %v", err)
		}
	}

	// This package's other tests share the database, so a sweep's count is
	// theirs too: what is asserted is this test's sessions.
	sweep()
	if got := status(moved); got != payments.SessionOpen {
		t.Fatalf("sweep before the clock moved: session %q, want %q", got, payments.SessionOpen)
	}
	// 59 minutes: not yet; the session's hour is up only at 60.
	if _, err := store.AdvanceClock(ctx, moved, 59*time.Minute); err != nil {
		t.Fatal(err)
	}
	sweep()
	if got := status(moved); got != payments.SessionOpen {
		t.Fatalf("sweep at 59 minutes: session %q, want %q", got, payments.SessionOpen)
	}
	off, err := store.AdvanceClock(ctx, moved, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if off != 61*time.Minute {
		t.Errorf("AdvanceClock: got offset %v, want 1h1m (moves add up)", off)
	}
	// Another test's sweep may hold the session (SKIP LOCKED) and not have
	// committed when this one returns: sweep until it reads expired, a while.
	waitUntil(t, 10*time.Second, "the moved clock's session "+payments.SessionExpired, func() (bool, string) {
		sweep()
		got := status(moved)
		return got == payments.SessionExpired, got
	})
	if got := status(moved); got != payments.SessionExpired {
		t.Errorf("session of the moved clock %+v: got %q, want %q", moved, got, payments.SessionExpired)
	}
	for _, sc := range others {
		if got := status(sc); got != payments.SessionOpen {
			t.Errorf("session of %+v (clock not moved): got %q, want %q", sc, got, payments.SessionOpen)
		}
	}

	// The event is dated on the merchant's clock, and so is what the
	// Service makes for that scope from now on (within the cache's TTL).
	events, err := store.Events(ctx, moved)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != payments.EventSessionExpired {
		t.Fatalf("got events %+v, want one %s", events, payments.EventSessionExpired)
	}
	var ev struct{ Created int64 }
	if err := json.Unmarshal(events[0].Payload, &ev); err != nil {
		t.Fatal(err)
	}
	// Dated on the moved clock: base time + the clock's offset. The sweep
	// that expired the session may be another test's (they share the
	// database), whose Service's fixed time is its own start, seconds off
	// this one's: what tells the merchant's clock from the real one is the
	// 61 minutes, so a few seconds either way are allowed.
	if want := base.Add(off).Unix(); ev.Created < want-30 || ev.Created > want+30 {
		t.Errorf("expired event created %d, want %d ± 30 s (base time + the clock's offset)", ev.Created, want)
	}
	deadline := time.Now().Add(3 * time.Second)
	for svc.Now(ctx, moved).Equal(base) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := svc.Now(ctx, moved), base.Add(off); !got.Equal(want) {
		t.Errorf("Now of the moved scope: got %v, want %v", got, want)
	}
	for _, sc := range others {
		if got := svc.Now(ctx, sc); !got.Equal(base) {
			t.Errorf("Now of %+v: got %v, want the base time %v", sc, got, base)
		}
	}
	if _, err := store.AdvanceClock(ctx, moved, -time.Minute); payments.ErrorCode(err) != payments.ValidationError {
		t.Errorf("moving a clock back: got %v, want %s", err, payments.ValidationError)
	}
}

// The overdue-dispute sweep, too, closes only the disputes overdue on their
// own scope's clock.
func TestSandboxClockClosesOnlyItsOverdueDisputes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now,
		payments.WithProcessor(sandbox.New(db, "http://checkout.test")), payments.WithSandboxClocks())
	m, err := svc.CreateMerchant(ctx, "Clock disputes", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	moved, other := payments.Scope{MerchantID: m.ID}, payments.Scope{MerchantID: m.ID, Live: true}
	// processorEvent pays with the dispute card and returns the processor
	// event (dispute created) left for the worker.
	processorEvent := func(sc payments.Scope) (pev, pi string) {
		t.Helper()
		amount, cur := int64(2000), "usd"
		created, err := svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.New(db, "http://checkout.test").Cards(svc).ConfirmPayment(ctx, created.PaymentIntentID, created.PublishableKey, created.ClientSecret, sandbox.CardDispute); err != nil {
			t.Fatal(err)
		}
		if err := db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, created.PaymentIntentID); err != nil {
			t.Fatal(err)
		}
		return pev, created.PaymentIntentID
	}
	dispute := func(sc payments.Scope) string {
		t.Helper()
		pev, pi := processorEvent(sc)
		if err := svc.ApplyProcessorEvent(ctx, sc, pev); err != nil {
			t.Fatal(err)
		}
		var id string
		if err := db.Get(&id, `SELECT id FROM disputes WHERE payment_intent_id = $1`, pi); err != nil {
			t.Fatal(err)
		}
		return id
	}
	disputes := map[payments.Scope]string{moved: dispute(moved), other: dispute(other)}
	waiting := map[payments.Scope]string{}
	for _, sc := range []payments.Scope{moved, other} {
		waiting[sc], _ = processorEvent(sc)
	}
	if _, err := store.AdvanceClock(ctx, moved, payments.DisputeResponseWindow+time.Hour); err != nil {
		t.Fatal(err)
	}

	// The relay, too, reads each row's age on its own clock: the moved
	// scope's unapplied event has waited a week there, the other's a moment.
	jobs, err := tasks.StrandedJobs(ctx, store, time.Now().Add(-time.Minute), 10000)
	if err != nil {
		t.Fatal(err)
	}
	stranded := map[string]bool{}
	for _, j := range jobs {
		stranded[j.ID] = true
	}
	if !stranded[waiting[moved]] || stranded[waiting[other]] {
		t.Errorf("stranded processor events: moved scope's %v, other's %v; want true, false", stranded[waiting[moved]], stranded[waiting[other]])
	}

	// This package's other tests sweep the same database, and a sweep skips
	// a dispute another holds (SKIP LOCKED), so the moved scope's dispute may
	// be closed by another's sweep that has not committed yet when this one
	// returns: sweep until it reads lost, for a while.
	status := func(sc payments.Scope) string {
		t.Helper()
		d, err := svc.Dispute(ctx, sc, disputes[sc])
		if err != nil {
			t.Fatal(err)
		}
		return d.Status
	}
	waitUntil(t, 10*time.Second, "the moved clock's dispute "+payments.DisputeLost, func() (bool, string) {
		if _, err := svc.CloseOverdueDisputes(ctx, 500); err != nil {
			t.Fatal(err)
		}
		got := status(moved)
		return got == payments.DisputeLost, got
	})
	for sc, want := range map[payments.Scope]string{moved: payments.DisputeLost, other: payments.DisputeNeedsResponse} {
		if got := status(sc); got != want {
			t.Errorf("dispute of %+v: got %q, want %q", sc, got, want)
		}
	}
}
