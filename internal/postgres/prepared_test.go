package postgres_test

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestTransactionStatementsPrepared: a statement of a store transaction
// runs unprepared the first time and, once the pool has prepared it in the
// background, as a prepared statement of the transaction's connection,
// with the same effect; behind a transaction-mode pooler never.
func TestTransactionStatementsPrepared(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	store := postgres.New(db)
	ctx := context.Background()
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: "Prepared", Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	// A text no other statement of the store has.
	const q = `INSERT INTO customers (merchant_id, livemode, id, metadata, created_at, updated_at)
		VALUES ($1, false, $2, '{}', now(), now()) -- TestTransactionStatementsPrepared`
	run := func() bool {
		t.Helper()
		id := payments.NewID("cus_")
		prepared, err := store.InTxPrepared(ctx, q, m.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM customers WHERE merchant_id = $1 AND id = $2`, m.ID, id); err != nil || n != 1 {
			t.Fatalf("customer %s written %d times (%v)", id, n, err)
		}
		return prepared
	}
	if run() {
		t.Fatal("prepared on its first run: the transaction waited for a second connection")
	}
	if testenv.PoolMode() == postgres.PoolTransaction {
		time.Sleep(200 * time.Millisecond)
		if run() {
			t.Fatal("a named prepared statement behind a transaction-mode pooler")
		}
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for !run() {
		if time.Now().After(deadline) {
			t.Fatal("a transaction's statement is still unprepared after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 { // and stays so on whichever connection the next ones get
		if !run() {
			t.Fatal("a prepared transaction statement ran unprepared again")
		}
	}
}
