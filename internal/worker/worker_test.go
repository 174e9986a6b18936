package worker_test

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/worker"
)

func TestScheduleHasBothMaintenanceTasks(t *testing.T) {
	t.Parallel()
	var got []string
	for spec, task := range worker.Schedule() {
		if spec == "" {
			t.Errorf("got an empty cron spec for %s, want one", task().Type())
		}
		tk := task()
		got = append(got, tk.Type())
	}
	slices.Sort(got)
	want := []string{tasks.TypePartitions, tasks.TypePruneViolations, tasks.TypeExpireSessions, tasks.TypeCloseDisputes, tasks.TypeRenewSubscriptions}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Schedule() task types: got %v, want %v", got, want)
	}
}

// insertMerchant inserts a merchant row directly and returns its id.
func insertMerchant(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	id := payments.NewID("mch_")
	if _, err := db.Exec(`INSERT INTO merchants (id, name, plan) VALUES ($1, 'Worker test', 'free')`, id); err != nil {
		t.Fatalf("insert merchant: %v", err)
	}
	return id
}

// Not parallel: asynq servers of one test binary share the Redis DB and
// would take each other's tasks.
func TestMaintenanceTasksDropOnlyOldRows(t *testing.T) {
	db := testenv.DB(t)
	redisOpt := testenv.RedisOpt(t)
	mch := insertMerchant(t, db)
	now := time.Now()

	// Idempotency keys: the weeks whose keys have all expired go (a
	// partition a week, dropped a TTL after the week ends), the others stay.
	idem := []struct {
		key       string
		expiresAt time.Time
		status    any
		wantKept  bool
	}{
		{"expired-eight-days-ago", now.Add(-8 * 24 * time.Hour), 200, false},
		{"expired-long-ago", now.Add(-30 * 24 * time.Hour), 201, false},
		{"live-completed", now.Add(time.Hour), 200, true},
		{"live-in-flight", now.Add(23 * time.Hour), nil, true},
	}
	for _, k := range idem {
		hash := make([]byte, 32)
		_, _ = rand.Read(hash)
		created := k.expiresAt.Add(-payments.IdempotencyTTL)
		_, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, status, locked_at, expires_at, created_at)
			VALUES ($1, false, $2, $3, $4, $5, $6, $5)`, mch, k.key, hash, k.status, created, k.expiresAt)
		if err != nil {
			t.Fatalf("insert idempotency key %s: %v", k.key, err)
		}
	}

	// Content violations: only those past the retention window go.
	viol := []struct {
		field    string
		created  time.Time
		wantKept bool
	}{
		{"old-test", now.Add(-payments.ViolationRetention - time.Hour), false},
		{"very-old", now.Add(-payments.ViolationRetention - 30*24*time.Hour), false},
		{"recent", now.Add(-time.Hour), true},
		{"inside-window", now.Add(-payments.ViolationRetention + time.Hour), true},
	}
	for _, v := range viol {
		if _, err := db.Exec(`INSERT INTO content_violations (merchant_id, livemode, field, created_at) VALUES ($1, false, $2, $3)`,
			mch, v.field, v.created); err != nil {
			t.Fatalf("insert violation %s: %v", v.field, err)
		}
	}

	// Events: the weeks that ended EVENT_RETENTION ago (here 1000h, above
	// the 720h default, so a kept one shows the setting is used) go, with
	// their finished deliveries; a week holding a pending delivery stays.
	keep := 1000 * time.Hour
	old, older := now.Add(-keep-8*24*time.Hour), now.Add(-keep-16*24*time.Hour)
	evs := []struct {
		id       string
		created  time.Time
		delivery string // "" for none
		wantKept bool
	}{
		{payments.NewID("evt_"), old, "", false},
		{payments.NewTimedID("evt_", old), old, "succeeded", false},
		{payments.NewTimedID("evt_", older), older, "pending", true},
		{payments.NewID("evt_"), older, "", true}, // the pending delivery's week
		{payments.NewTimedID("evt_", now.Add(-keep+time.Hour)), now.Add(-keep + time.Hour), "", true},
	}
	endpoint := payments.NewID("we_")
	if _, err := db.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed)
		VALUES ($1, $2, false, 'https://hooks.example/in', '["*"]', 'enabled', '\x00')`, endpoint, mch); err != nil {
		t.Fatalf("insert endpoint: %v", err)
	}
	for _, e := range evs {
		if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, false, 'charge.refunded', '{"id": "re_1"}', $3)`,
			e.id, mch, e.created); err != nil {
			t.Fatalf("insert event: %v", err)
		}
		if e.delivery != "" {
			if _, err := db.Exec(`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, event_created_at)
				VALUES ($1, $2, false, $3, $4, $5, $6, $6)`, payments.NewTimedID("whd_", e.created), mch, e.id, endpoint, e.delivery, e.created); err != nil {
				t.Fatalf("insert delivery: %v", err)
			}
		}
	}

	srv := asynq.NewServer(redisOpt, asynq.Config{
		Concurrency:     2,
		Queues:          tasks.Queues,
		ShutdownTimeout: 5 * time.Second,
		LogLevel:        asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	store := postgres.New(db)
	(&worker.Handlers{
		Service: payments.NewService(store, nil, time.Now),
		Store:   store,
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),

		EventRetention: keep,
	}).Register(mux)
	if err := srv.Start(mux); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	defer srv.Shutdown()

	client := asynq.NewClient(redisOpt)
	defer client.Close()
	var ids []string
	for _, task := range []*asynq.Task{tasks.NewPruneViolations(), tasks.NewMaintainPartitions()} {
		// Retention keeps the completed task visible to the inspector.
		info, err := client.Enqueue(task, asynq.Retention(time.Hour))
		if err != nil {
			t.Fatalf("enqueue %s: %v", task.Type(), err)
		}
		if info.Queue != tasks.QueueLow {
			t.Errorf("%s: got queue %q, want %q", task.Type(), info.Queue, tasks.QueueLow)
		}
		ids = append(ids, info.ID)
	}

	insp := asynq.NewInspector(redisOpt)
	defer insp.Close()
	deadline := time.Now().Add(15 * time.Second)
	for _, id := range ids {
		for {
			info, err := insp.GetTaskInfo(tasks.QueueLow, id)
			if err != nil {
				t.Fatalf("task %s: %v", id, err)
			}
			if info.State == asynq.TaskStateCompleted {
				break
			}
			if info.State == asynq.TaskStateRetry || info.State == asynq.TaskStateArchived {
				t.Fatalf("task %s (%s): got state %v (last error %q), want completed", id, info.Type, info.State, info.LastErr)
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s (%s): got state %v after 15s, want completed", id, info.Type, info.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ctx := context.Background()
	for _, k := range idem {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM idempotency_keys WHERE merchant_id = $1 AND key = $2`, mch, k.key); err != nil {
			t.Fatal(err)
		}
		if kept := n == 1; kept != k.wantKept {
			t.Errorf("idempotency key %s (expires %s): got kept=%v, want %v", k.key, k.expiresAt.Format(time.RFC3339), kept, k.wantKept)
		}
	}
	for _, v := range viol {
		var n int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM content_violations WHERE merchant_id = $1 AND field = $2`, mch, v.field); err != nil {
			t.Fatal(err)
		}
		if kept := n == 1; kept != v.wantKept {
			t.Errorf("violation %s (created %s): got kept=%v, want %v", v.field, v.created.Format(time.RFC3339), kept, v.wantKept)
		}
	}
	for _, e := range evs {
		var n, d int
		if err := db.GetContext(ctx, &n, `SELECT count(*) FROM events WHERE id = $1`, e.id); err != nil {
			t.Fatal(err)
		}
		if err := db.GetContext(ctx, &d, `SELECT count(*) FROM webhook_deliveries WHERE event_id = $1`, e.id); err != nil {
			t.Fatal(err)
		}
		if kept := n == 1; kept != e.wantKept || (!kept && d != 0) {
			t.Errorf("event created %s with delivery %q: got kept=%v (%d deliveries left), want kept=%v", e.created.Format(time.RFC3339), e.delivery, kept, d, e.wantKept)
		}
	}
}
