package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestRequestTransaction: within an idempotent request, the store's own
// transactions are savepoints of the request's: one that fails rolls back
// its writes alone and leaves the request able to store its answer; the
// jobs of those that succeeded are enqueued after the request commits,
// never before and never on a rollback; the key commits with the change or
// not at all.
func TestRequestTransaction(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	store := postgres.New(db)
	var mu sync.Mutex
	var enqueued [][]payments.Job
	store.OnCommit(func(_ context.Context, jobs []payments.Job) {
		mu.Lock()
		defer mu.Unlock()
		enqueued = append(enqueued, jobs)
	})
	bg := context.Background()
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: "Tx", Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(bg, m); err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	insert := func(tx *sqlx.Tx, id string) error {
		_, err := tx.Exec(`INSERT INTO customers (merchant_id, livemode, id, metadata, created_at, updated_at)
			VALUES ($1, false, $2, '{}', now(), now())`, m.ID, id)
		return err
	}
	exists := func(id string) bool {
		var ok bool
		if err := db.Get(&ok, `SELECT EXISTS (SELECT 1 FROM customers WHERE id = $1)`, id); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	begin := func(key string) (context.Context, *payments.StoredResponse) {
		t.Helper()
		ctx, rec, err := store.BeginIdempotent(bg, sc, key, []byte("hash"), time.Now(), time.Hour, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return ctx, rec
	}
	jobA := payments.Job{Kind: payments.JobExecuteRefund, ID: "re_a", MerchantID: m.ID}
	jobB := payments.Job{Kind: payments.JobExecuteRefund, ID: "re_b", MerchantID: m.ID}

	ctx, rec := begin("k1")
	if rec != nil {
		t.Fatalf("got stored response %+v for a new key, want the claim", rec)
	}
	if err := store.InTx(ctx, func(tx *sqlx.Tx, addJob func(payments.Job)) error {
		addJob(jobA)
		return insert(tx, "cus_kept")
	}); err != nil {
		t.Fatal(err)
	}
	refusal := payments.Errorf(payments.InsufficientBalance, "no")
	err := store.InTx(ctx, func(tx *sqlx.Tx, addJob func(payments.Job)) error {
		addJob(jobB)
		if err := insert(tx, "cus_undone"); err != nil {
			return err
		}
		_, err := tx.Exec(`SELECT 1/0`) // aborts the transaction…
		if err == nil {
			t.Error("SELECT 1/0 succeeded")
		}
		return refusal // …and the method refuses, a 4xx
	})
	if !errors.Is(err, refusal) {
		t.Fatalf("got %v, want the refusal itself", err)
	}
	// The savepoint's rollback left the request's transaction usable.
	if err := store.SaveIdempotent(ctx, sc, "k1", 400, []byte("sealed"), "req-1"); err != nil {
		t.Fatalf("store the answer after a refused step: %v", err)
	}
	if len(enqueued) != 0 || exists("cus_kept") {
		t.Errorf("before the request's commit: got jobs %v, customer visible %v; want neither", enqueued, exists("cus_kept"))
	}
	if err := store.EndRequest(ctx, true); err != nil {
		t.Fatal(err)
	}
	if len(enqueued) != 1 || len(enqueued[0]) != 1 || enqueued[0][0] != jobA {
		t.Errorf("after the commit: got jobs %v, want [[%v]] (the refused step's job dropped)", enqueued, jobA)
	}
	if !exists("cus_kept") || exists("cus_undone") {
		t.Errorf("got cus_kept %v, cus_undone %v; want true, false", exists("cus_kept"), exists("cus_undone"))
	}
	if err := store.EndRequest(ctx, true); err != nil {
		t.Errorf("ending the request twice: %v, want a no-op", err)
	}
	if _, rec := begin("k1"); rec == nil || rec.Status != 400 || string(rec.Body) != "sealed" || rec.RequestID != "req-1" {
		t.Errorf("got %+v, want the stored 400", rec)
	}

	// A rollback undoes the change and the claim, and enqueues nothing.
	ctx, _ = begin("k2")
	if err := store.InTx(ctx, func(tx *sqlx.Tx, addJob func(payments.Job)) error {
		addJob(jobB)
		return insert(tx, "cus_rolled_back")
	}); err != nil {
		t.Fatal(err)
	}
	if err := store.EndRequest(ctx, false); err != nil {
		t.Fatal(err)
	}
	if exists("cus_rolled_back") || len(enqueued) != 1 {
		t.Errorf("after a rollback: got customer %v, jobs %v; want none added", exists("cus_rolled_back"), enqueued)
	}
	ctx, rec = begin("k2")
	if rec != nil {
		t.Errorf("got %+v for a key whose request rolled back, want a new claim", rec)
	}
	store.EndRequest(ctx, false) //nolint:errcheck
}
