package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// startGuard starts a pool guard in front of this process's database on the
// server itself and returns it and the database's URL through it; named lets
// named prepared statements pass (a pooler that tracks them).
func startGuard(t *testing.T, named bool) (*testenv.PoolGuard, string) {
	t.Helper()
	u, err := url.Parse(testenv.DirectDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	g, err := testenv.StartPoolGuard(u.Host, named)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	u.Host = g.Addr()
	return g, u.String()
}

// TestPoolGuard: the guard the pooled test runs go through (testenv) lets
// the store's transaction-mode queries pass and refuses what a
// transaction-mode pooler would mishandle — a named prepared statement (the
// store in session mode prepares its queries), a query in two round trips,
// SET, LISTEN, session advisory locks — with an error, leaving the
// connection usable.
func TestPoolGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, dsn := startGuard(t, false)
	pooled := openThrough(t, dsn, 4, false)
	store := postgres.New(pooled)
	id := merchantThrough(t, store, 1)

	session, err := postgres.Open(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	if _, err := postgres.New(session).Merchant(ctx, id); err == nil || !strings.Contains(err.Error(), "named prepared statement") {
		t.Errorf("session-mode store (prepared statements) through the guard: got %v, want the guard's refusal", err)
	}

	refusesTwoTrips(t, dsn)
	if _, err := postgres.OpenMode(ctx, dsn+"&binary_parameters=no", 1, postgres.PoolTransaction, false); err == nil {
		t.Error("OpenMode(transaction, binary_parameters=no): got nil error, want a refusal")
	}

	for _, q := range []string{
		`SET statement_timeout = '5s'`,
		`SET SESSION search_path = public`,
		`LISTEN paysvc_events`,
		`SELECT pg_advisory_lock(42)`,
		`SELECT pg_try_advisory_lock(42)`,
	} {
		if _, err := pooled.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "pooler guard") {
			t.Errorf("%s: got %v, want the guard's refusal", q, err)
		}
	}
	// Transaction-scoped state is fine: it ends with the transaction.
	tx, err := pooled.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SET LOCAL statement_timeout = '5s'`, `SELECT pg_advisory_xact_lock(42)`, `SELECT set_config('lock_timeout', '1s', true)`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Errorf("%s in a transaction: %v", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pooled.QueryRowContext(ctx, `SELECT $1::int`, 7).Scan(&n); err != nil || n != 7 {
		t.Errorf("after the refusals: got %d, %v; want 7", n, err)
	}
}

// TestPoolGuardNamed: the guard of a pooler that tracks named prepared
// statements (TEST_DATABASE_POOLER_PREPARED) lets the store prepare its
// queries, as DATABASE_POOLER_PREPARED_STATEMENTS=true has it do, and still
// refuses an unnamed statement bound in a second round trip, which no
// pooler can follow.
func TestPoolGuardNamed(t *testing.T) {
	t.Parallel()
	g, dsn := startGuard(t, true)
	merchantThrough(t, postgres.New(openThrough(t, dsn, 2, true)), 3) // prepared on the first read, bound by name after
	if g.NamedParses() == 0 {
		t.Error("the store prepared nothing through a guard that lets named statements pass")
	}
	refusesTwoTrips(t, dsn)
}

// openThrough opens a transaction-mode pool of conns connections at dsn,
// preparing statements with prepare, closed when the test ends.
func openThrough(t *testing.T, dsn string, conns int, prepare bool) *sqlx.DB {
	t.Helper()
	db, err := postgres.OpenMode(context.Background(), dsn, conns, postgres.PoolTransaction, prepare)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// merchantThrough creates a merchant through store and reads it reads
// times, failing the test on an error; it returns the merchant's id.
func merchantThrough(t *testing.T, store *postgres.Store, reads int) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("mch_guard%d", time.Now().UnixNano())
	if err := store.CreateMerchant(ctx, payments.Merchant{ID: id, Name: "Guard", Plan: payments.Plan("free"), Created: time.Now()}); err != nil {
		t.Fatalf("CreateMerchant in transaction mode through the guard: %v", err)
	}
	for i := range reads {
		if m, err := store.Merchant(ctx, id); err != nil || m.ID != id {
			t.Fatalf("Merchant in transaction mode through the guard, read %d: %+v, %v", i+1, m, err)
		}
	}
	return id
}

// refusesTwoTrips: through the guard at dsn, an unnamed statement bound in
// a second round trip (lib/pq without binary_parameters) is refused.
func refusesTwoTrips(t *testing.T, dsn string) {
	t.Helper()
	twoTrips, err := sql.Open("postgres", dsn+"&binary_parameters=no")
	if err != nil {
		t.Fatal(err)
	}
	defer twoTrips.Close()
	var n int
	if err := twoTrips.QueryRowContext(context.Background(), `SELECT $1::int`, 7).Scan(&n); err == nil || !strings.Contains(err.Error(), "round trip") {
		t.Errorf("parameterised query without binary_parameters: got %v, want the guard's refusal", err)
	}
}

// TestBinaryParameters pins how lib/pq's binary_parameters=yes (one round
// trip, see OpenMode) sends each kind of parameter: []byte goes as binary,
// right for bytea and wrong for jsonb (whose binary form starts with a
// version byte), so JSON parameters stay strings; arrays (pq.Array) and
// strings go as text.
func TestBinaryParameters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)

	raw := []byte{0, 1, 2, 0xfe, 0xff}
	var back []byte
	if err := db.QueryRowContext(ctx, `SELECT $1::bytea`, raw).Scan(&back); err != nil || !bytes.Equal(back, raw) {
		t.Errorf("bytea from []byte: got %x, %v; want %x", back, err, raw)
	}
	var js string
	if err := db.QueryRowContext(ctx, `SELECT ($1::jsonb)->>'a'`, `{"a":"b"}`).Scan(&js); err != nil || js != "b" {
		t.Errorf("jsonb from a string: got %q, %v; want b", js, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT ($1::jsonb)->>'a'`, []byte(`{"a":"b"}`)).Scan(&js); err == nil {
		t.Error("jsonb from []byte: got no error; binary jsonb needs a version byte, so JSON must be passed as a string")
	}
	var joined string
	if err := db.QueryRowContext(ctx, `SELECT array_to_string($1::text[], ',')`, pq.Array([]string{"a", "b,c", `"q"`})).Scan(&joined); err != nil || joined != `a,b,c,"q"` {
		t.Errorf("text[] from pq.Array: got %q, %v", joined, err)
	}
	var sum int64
	if err := db.QueryRowContext(ctx, `SELECT (SELECT sum(x) FROM unnest($1::bigint[]) x)`, pq.Array([]int64{1, 2, 1 << 40})).Scan(&sum); err != nil || sum != 3+1<<40 {
		t.Errorf("bigint[] from pq.Array: got %d, %v", sum, err)
	}
}

// TestPoolerCrossTalk runs through the real transaction-mode pooler
// (make test-pooled): many concurrent clients, more than the pool's server
// connections, each running one of two different queries and one of two
// different INSERTs, as the store does (one round trip each). Every row read
// must be its own query's and every row inserted must land in its own
// table: with two round trips, about half did not, silently.
func TestPoolerCrossTalk(t *testing.T) {
	dsn := testenv.PoolerDatabaseURL(t)
	ctx := context.Background()
	const clients, rounds = 40, 25
	db, err := postgres.OpenMode(ctx, dsn, clients, postgres.PoolTransaction, false)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	suffix := time.Now().UnixNano()
	ta, tb := fmt.Sprintf("crosstalk_a_%d", suffix), fmt.Sprintf("crosstalk_b_%d", suffix)
	for _, q := range []string{
		`CREATE TABLE ` + ta + ` (client int NOT NULL, n int NOT NULL)`,
		`CREATE TABLE ` + tb + ` (n int NOT NULL, client int NOT NULL, note text NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE `+ta+`, `+tb) })

	var wg sync.WaitGroup
	var mu sync.Mutex
	var wrong []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(wrong) < 20 {
			wrong = append(wrong, fmt.Sprintf(format, args...))
		}
	}
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				var q string
				var v int
				if c%2 == 0 {
					err := db.QueryRowContext(ctx, `SELECT 'a', $1::int`, c*1000+i).Scan(&q, &v)
					if err != nil || q != "a" || v != c*1000+i {
						fail("client %d query a: got (%q, %d), %v", c, q, v, err)
					}
					if _, err := db.ExecContext(ctx, `INSERT INTO `+ta+` (client, n) VALUES ($1, $2)`, c, i); err != nil {
						fail("client %d insert a: %v", c, err)
					}
				} else {
					err := db.QueryRowContext(ctx, `SELECT 'b', $1::int + 500000`, c*1000+i).Scan(&q, &v)
					if err != nil || q != "b" || v != c*1000+i+500000 {
						fail("client %d query b: got (%q, %d), %v", c, q, v, err)
					}
					if _, err := db.ExecContext(ctx, `INSERT INTO `+tb+` (n, client, note) VALUES ($1, $2, $3)`, i, c, "b"); err != nil {
						fail("client %d insert b: %v", c, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, w := range wrong {
		t.Error(w)
	}
	for _, tc := range []struct {
		table  string
		parity int
	}{{ta, 0}, {tb, 1}} {
		var total, foreign, distinct int
		err := db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE client % 2 <> $1), count(DISTINCT (client, n)) FROM `+tc.table, tc.parity).Scan(&total, &foreign, &distinct)
		want := clients / 2 * rounds
		if err != nil || total != want || foreign != 0 || distinct != want {
			t.Errorf("%s: %d rows (%d distinct), %d from the other table's clients, %v; want %d, %d, 0", tc.table, total, distinct, foreign, err, want, want)
		}
	}
}
