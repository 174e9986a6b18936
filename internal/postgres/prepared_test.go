package postgres_test

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestTransactionStatementsPrepared: a statement of a store transaction
// runs unprepared the first time and, once the pool has prepared it in the
// background, as a prepared statement of the transaction's connection,
// with the same effect; behind a transaction-mode pooler never, unless the
// pooler tracks named statements (TEST_DATABASE_POOLER_PREPARED).
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
	if testenv.PoolMode() == postgres.PoolTransaction && !testenv.PoolerPrepared() {
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

// TestPooledRequestWaitsForNoSecondConnection: behind a transaction-mode
// pooler, an idempotent request holding the last server connection of its
// database's pool still runs its statements. With the pooler tracking named
// statements (TEST_DATABASE_POOLER_PREPARED), a request used to prepare a
// statement it had not prepared yet on a second connection of the API's
// pool, which waited for a second server connection: with every one held by
// such requests (the pooled tests' first idempotent requests, at once), none
// came until the pooler's query_wait_timeout. Here other clients hold all
// but one.
func TestPooledRequestWaitsForNoSecondConnection(t *testing.T) {
	if !testenv.Pooled() {
		t.Skip("no pooler: set TEST_DATABASE_POOLER_URL (make test-pooled starts one)")
	}
	t.Parallel()
	ctx := context.Background()
	n := poolerServerConns(t)
	dbURL := testenv.OwnDatabaseURL(t) // a database of its own: a pool of n of its own
	store := postgres.New(testenv.DBOn(t, dbURL))
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: "Last connection", Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}

	others := testenv.DBOn(t, dbURL)
	for range n - 1 {
		tx, err := others.BeginTxx(ctx, nil) // BEGIN takes a server connection
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck // released at the end
		if _, err := tx.ExecContext(ctx, `SELECT 1`); err != nil {
			t.Fatal(err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sc := payments.Scope{MerchantID: m.ID}
	reqCtx, rec, err := store.BeginIdempotent(rctx, sc, "last-connection", []byte("hash"), time.Now(), time.Hour, time.Second)
	if err != nil || rec != nil {
		t.Fatalf("idempotent request on the last of %d server connections: %v, %v; want its claim (it waited for a second connection?)", n, rec, err)
	}
	if err := store.SaveIdempotent(reqCtx, sc, "last-connection", 200, []byte(`{}`), "req_last"); err != nil {
		t.Fatalf("SaveIdempotent on the last server connection: %v", err)
	}
	if err := store.EndRequest(reqCtx, true); err != nil {
		t.Fatal(err)
	}
}

// poolerServerConns is the pooler's server connections per database and
// user (PgBouncer's default_pool_size), from its admin console.
func poolerServerConns(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(testenv.PoolerDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/pgbouncer"
	admin, err := sqlx.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	rows, err := admin.Query(`SHOW CONFIG`) // no parameters: the simple protocol, which the console speaks
	if err != nil {
		t.Fatalf("pooler's SHOW CONFIG: %v", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if vals[0].String == "default_pool_size" {
			n, err := strconv.Atoi(vals[1].String)
			if err != nil || n < 1 {
				t.Fatalf("pooler's default_pool_size %q", vals[1].String)
			}
			return n
		}
	}
	t.Fatalf("no default_pool_size in the pooler's SHOW CONFIG (%v)", rows.Err())
	return 0
}

// TestConcurrentFirstCallsPrepareOnce: callers of a text not prepared yet,
// at once, share one prepare. Each used to prepare it and close the
// statements that lost the race, and database/sql holds its pool's lock
// while such a Close round trip runs: behind a transaction-mode pooler that
// round trip waited for a server connection, held by transactions waiting
// for the lock to commit (see prepared.preparing).
func TestConcurrentFirstCallsPrepareOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, dsn := startGuard(t, true) // it counts the named prepares
	const n = 16
	db, err := postgres.OpenMode(ctx, dsn, n, postgres.PoolSession, true)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := postgres.New(db)
	const q = `SELECT $1::int -- TestConcurrentFirstCallsPrepareOnce`
	errs := make([]error, n)
	atOnce(n, func(i int) { errs[i] = store.Prepare(ctx, q) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if got := g.NamedParses(); got != 1 {
		t.Errorf("%d callers at once prepared the text %d times, want once", n, got)
	}
}
