package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/worker"
)

// Not parallel: asynq servers of one test binary share the Redis DB.
func TestCloseOverdueDisputesTask(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	store := postgres.New(db)
	clk := &clock{t: time.Now()}
	svc := payments.NewService(store, nil, clk.now, payments.WithProcessor(sandbox.New(db, "http://checkout.test")))
	m, err := svc.CreateMerchant(ctx, "Overdue disputes", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}

	// dispute pays with the dispute card and applies the processor's event,
	// as the worker does, returning the dispute it opened.
	dispute := func() payments.Dispute {
		t.Helper()
		amount, cur := int64(2000), "usd"
		created, err := svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sandbox.New(db, "http://checkout.test").Cards(svc).ConfirmPayment(ctx, created.PaymentIntentID, created.PublishableKey, created.ClientSecret, sandbox.CardDispute); err != nil {
			t.Fatal(err)
		}
		var pev string
		if err := db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, created.PaymentIntentID); err != nil {
			t.Fatal(err)
		}
		if err := svc.ApplyProcessorEvent(ctx, sc, pev); err != nil {
			t.Fatal(err)
		}
		var id string
		if err := db.Get(&id, `SELECT id FROM disputes WHERE payment_intent_id = $1`, created.PaymentIntentID); err != nil {
			t.Fatal(err)
		}
		d, err := svc.Dispute(ctx, sc, id)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	unanswered := dispute()
	submit := true
	answered := dispute()
	if _, err := svc.UpdateEvidence(ctx, sc, answered.ID, payments.EvidenceInput{Evidence: map[string]string{"uncategorized_text": "receipt attached"}, Submit: &submit}); err != nil {
		t.Fatal(err)
	}
	clk.add(payments.DisputeResponseWindow - time.Hour)
	recent := dispute() // due a week from now
	clk.add(2 * time.Hour)

	// Past the due date, evidence can no longer be added.
	_, err = svc.UpdateEvidence(ctx, sc, unanswered.ID, payments.EvidenceInput{Evidence: map[string]string{"customer_name": "Ada"}})
	if payments.ErrorCode(err) != payments.ValidationError {
		t.Errorf("evidence after the due date: got %v, want validation_error", err)
	}
	balanceBefore := soleBalance(t, svc, sc)

	redisOpt := testenv.RedisOpt(t)
	srv := asynq.NewServer(redisOpt, asynq.Config{Concurrency: 1, Queues: tasks.Queues, LogLevel: asynq.WarnLevel})
	mux := asynq.NewServeMux()
	(&worker.Handlers{Service: svc, Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(mux)
	if err := srv.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	insp := asynq.NewInspector(redisOpt)
	defer insp.Close()
	run := func() { runTask(t, client, insp, tasks.NewCloseOverdueDisputes()) }
	run()
	run() // a second sweep finds nothing more: one closed event per dispute

	for _, c := range []struct {
		id, want string
	}{{unanswered.ID, payments.DisputeLost}, {answered.ID, payments.DisputeUnderReview}, {recent.ID, payments.DisputeNeedsResponse}} {
		got, err := svc.Dispute(ctx, sc, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != c.want {
			t.Errorf("dispute %s: got status %q, want %q", c.id, got.Status, c.want)
		}
	}
	var closed []string
	if err := db.Select(&closed, `SELECT data->>'id' FROM events WHERE merchant_id = $1 AND type = $2`, m.ID, payments.EventDisputeClosed); err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0] != unanswered.ID {
		t.Errorf("got charge.dispute.closed for %v, want exactly one, for %s", closed, unanswered.ID)
	}
	// A lost dispute keeps its amount withdrawn: the balance does not move.
	if after := soleBalance(t, svc, sc); after != balanceBefore {
		t.Errorf("balance changed from %+v to %+v when the dispute was lost", balanceBefore, after)
	}
}

func soleBalance(t *testing.T, svc *payments.Service, sc payments.Scope) payments.Balance {
	t.Helper()
	bs, err := svc.Balances(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 {
		t.Fatalf("got balances %+v, want one", bs)
	}
	return bs[0]
}

// runTask enqueues task and waits until the server has completed it.
func runTask(t *testing.T, client *asynq.Client, insp *asynq.Inspector, task *asynq.Task) {
	t.Helper()
	info, err := client.Enqueue(task, asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ti.State == asynq.TaskStateCompleted {
			return
		}
		if ti.State == asynq.TaskStateRetry || ti.State == asynq.TaskStateArchived || time.Now().After(deadline) {
			t.Fatalf("task %s: got state %v (%q), want completed", task.Type(), ti.State, ti.LastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
