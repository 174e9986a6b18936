package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
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

// clock is a settable time for the service under test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Not parallel: asynq servers of one test binary share the Redis DB.
func TestExpireSessionsTask(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	store := postgres.New(db)
	clk := &clock{t: time.Now()}
	svc := payments.NewService(store, nil, clk.now,
		payments.WithProcessor(sandbox.New(db, "http://checkout.test")), payments.WithSessionTTL(time.Hour))
	m, err := svc.CreateMerchant(ctx, "Expiry test", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	newSession := func() payments.CheckoutSession {
		t.Helper()
		amount, qty, cur, name := int64(1000), int64(1), "usd", "Thing"
		ok, cancel := "https://shop.example/ok", "https://shop.example/cancel"
		cs, err := svc.CreateSession(ctx, sc, payments.SessionInput{
			LineItems:  []payments.LineItemInput{{Amount: &amount, Currency: &cur, Name: &name, Quantity: &qty}},
			SuccessURL: &ok, CancelURL: &cancel, Metadata: payments.MetadataInput{"order": "7"},
		})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	old := newSession()
	clk.add(50 * time.Minute)
	fresh := newSession() // expires 50 minutes after old
	clk.add(20 * time.Minute)

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

	run := func() { runTask(t, client, insp, tasks.NewExpireSessions()) }
	run()
	run() // a second sweep finds nothing more: one event per session

	for _, c := range []struct {
		id, want string
	}{{old.ID, payments.SessionExpired}, {fresh.ID, payments.SessionOpen}} {
		got, err := svc.Session(ctx, sc, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != c.want {
			t.Errorf("session %s: got status %q, want %q", c.id, got.Status, c.want)
		}
	}
	events, err := store.Events(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Type != payments.EventSessionExpired {
		t.Fatalf("got events %+v, want one %s", events, payments.EventSessionExpired)
	}
	var ev struct {
		ID   string
		Type string
		Data struct {
			ID       string
			Status   string
			URL      *string
			Metadata map[string]string
		}
	}
	if err := json.Unmarshal(events[0].Payload, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Data.ID != old.ID || ev.Data.Status != payments.SessionExpired || ev.Data.URL != nil || ev.Data.Metadata["order"] != "7" {
		t.Errorf("got event data %+v, want the expired session %s with its metadata and no url", ev.Data, old.ID)
	}

	// An expired session cannot be paid.
	_, err = sandbox.New(db, "http://checkout.test").Cards(svc).PayCheckout(ctx, old.ID, payments.CheckoutPayment{Email: "a@b.co"}, sandbox.CardSuccess)
	if _, ok := err.(payments.ErrSessionClosed); !ok {
		t.Errorf("paying an expired session: got %v, want ErrSessionClosed", err)
	}
}
