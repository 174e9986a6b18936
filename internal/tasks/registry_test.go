package tasks_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
)

// jobKinds reads every constant of type JobKind declared in package
// payments, so that a kind added there without a registry entry fails
// TestKindsComplete.
func jobKinds(t *testing.T) map[payments.JobKind]bool {
	t.Helper()
	files, err := filepath.Glob("../payments/*.go")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[payments.JobKind]bool{}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "JobKind" {
				return true
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("a JobKind constant that is not a string literal: %#v", v)
				}
				s, _ := strconv.Unquote(lit.Value)
				kinds[payments.JobKind(s)] = true
			}
			return true
		})
	}
	if len(kinds) == 0 {
		t.Fatal("found no JobKind constants in package payments")
	}
	return kinds
}

// TestKindsComplete checks that every job kind the domain can leave has one
// registry entry with everything the API, the relay and the worker need.
func TestKindsComplete(t *testing.T) {
	declared := jobKinds(t)
	seenJob, seenType := map[payments.JobKind]bool{}, map[string]bool{}
	for _, k := range tasks.Kinds {
		if !declared[k.Job] {
			t.Errorf("registry entry %q: not a JobKind of package payments", k.Job)
		}
		if seenJob[k.Job] || seenType[k.Type] {
			t.Errorf("registry entry %q (%s): kind or task type registered twice", k.Job, k.Type)
		}
		seenJob[k.Job], seenType[k.Type] = true, true
		if k.Type == "" || k.MaxRetry <= 0 || k.Timeout <= 0 || k.Payload == nil || k.Stranded == nil {
			t.Errorf("registry entry %q: got type %q, max retry %d, timeout %v, payload set %v, stranded query set %v; want all set",
				k.Job, k.Type, k.MaxRetry, k.Timeout, k.Payload != nil, k.Stranded != nil)
		}
		if _, ok := tasks.Queues[k.Queue]; !ok {
			t.Errorf("registry entry %q: queue %q is not one the worker serves", k.Job, k.Queue)
		}
		// The task carries the row's id and scope and is keyed by the id.
		j := payments.Job{Kind: k.Job, ID: "row_1", MerchantID: "mch_1", Live: true}
		ts := tasks.ForJobs([]payments.Job{j})
		var p map[string]any
		if err := json.Unmarshal(ts[0].Payload(), &p); err != nil {
			t.Fatalf("registry entry %q: payload: %v", k.Job, err)
		}
		if ts[0].Type() != k.Type || p["merchant_id"] != "mch_1" || p["livemode"] != true {
			t.Errorf("registry entry %q: got task %s with payload %v, want %s with merchant_id and livemode", k.Job, ts[0].Type(), p, k.Type)
		}
	}
	for kind := range declared {
		if _, ok := tasks.KindOf(kind); !ok {
			t.Errorf("job kind %q of package payments has no registry entry in tasks.Kinds", kind)
		}
	}
}

// TestStrandedQueriesRun runs every kind's stranded query on PostgreSQL.
func TestStrandedQueriesRun(t *testing.T) {
	store := postgres.New(testenv.DB(t))
	for _, k := range tasks.Kinds {
		if _, err := k.Stranded(store, context.Background(), time.Now(), 10); err != nil {
			t.Errorf("stranded query of %q: %v", k.Job, err)
		}
	}
}

// TestCompletedRetention: a delivery's task is kept once completed for
// CompletedRetention (QUEUE_COMPLETED_RETENTION: 1h unless set; 0 keeps
// none), a refund's never: the retention asynq records for each task
// enqueued.
func TestCompletedRetention(t *testing.T) {
	client := asynq.NewClientFromRedisClient(testenv.Redis(t))
	insp := asynq.NewInspectorFromRedisClient(testenv.Redis(t))
	t.Cleanup(func() { tasks.SetCompletedRetention(time.Hour) })
	retention := func(kind payments.JobKind) time.Duration {
		t.Helper()
		k, _ := tasks.KindOf(kind)
		task := k.Task(payments.Job{Kind: kind, ID: payments.NewID("row_"), MerchantID: payments.NewID("mch_")})
		info, err := client.Enqueue(task)
		if err != nil {
			t.Fatal(err)
		}
		if info, err = insp.GetTaskInfo(info.Queue, info.ID); err != nil {
			t.Fatal(err)
		}
		return info.Retention
	}
	for _, tc := range []struct {
		set        time.Duration
		kind       payments.JobKind
		want       time.Duration
		what, kept string
	}{
		{time.Hour, payments.JobDeliverEvent, time.Hour, "the default", "an event's first attempts"},
		{time.Hour, payments.JobDeliverWebhook, time.Hour, "the default", "a delivery's retry"},
		{time.Hour, payments.JobExecuteRefund, 0, "the default", "a refund"},
		{10 * time.Minute, payments.JobDeliverWebhook, 10 * time.Minute, "10m", "a delivery's retry"},
		{0, payments.JobDeliverEvent, 0, "0s", "an event's first attempts"},
	} {
		tasks.SetCompletedRetention(tc.set)
		if got := retention(tc.kind); got != tc.want {
			t.Errorf("with %s, %s: retention %v, want %v", tc.what, tc.kept, got, tc.want)
		}
	}
}
