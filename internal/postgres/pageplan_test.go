package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestPageQueriesKeepGenericPlans: a list page's prepared statement is
// planned once and then runs on PostgreSQL's generic plan, not planned
// again on every call (as it was with its LIMIT a parameter, whose generic
// plan PostgreSQL costs at a tenth of the table and never keeps); and every
// limit still gets its page, no row more, with has_more right.
func TestPageQueriesKeepGenericPlans(t *testing.T) {
	t.Parallel()
	// A database of its own, whose statistics describe what the bench and a
	// large merchant see: one merchant's many products (the planner
	// estimates a page query's generic plan from them).
	db, store, sc := preparingMerchant(t)
	ctx := context.Background()
	const total = 30
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	for i := range total {
		p := payments.Product{ID: payments.NewID("prod_"), Name: fmt.Sprintf("P%d", i), Active: true,
			Images: []string{}, Metadata: map[string]string{}, Created: base.Add(time.Duration(i) * time.Second)}
		if err := store.CreateProduct(ctx, sc, p); err != nil {
			t.Fatal(err)
		}
	}
	// 20,000 older ones of another mode, which the pages below never reach.
	seedOlderLive(t, db, sc)

	for range 12 {
		if _, err := store.Products(ctx, sc, payments.ListParams{Limit: 10}); err != nil {
			t.Fatal(err)
		}
	}
	var generic, custom int
	err := db.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%FROM products p%ORDER BY p.created_at DESC, p.id DESC%' AND statement NOT LIKE '%<%'`).Scan(&generic, &custom)
	if err != nil {
		t.Fatalf("the first page's statement is not prepared on the connection: %v", err)
	}
	if generic < 12-5 {
		t.Errorf("first page of products: %d generic and %d custom plans in 12 calls; want the generic plan kept after 5 custom ones", generic, custom)
	}

	// Limits off and on pageRows' sizes: the page holds limit rows, newest
	// first, and the next page starts right after it.
	for _, limit := range []int{1, 9, 10, 11, 20, 29, 30, 50, 100} {
		first, err := store.Products(ctx, sc, payments.ListParams{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		want := min(limit, total)
		if len(first.Data) != want || first.HasMore != (limit < total) {
			t.Fatalf("limit %d: %d products, has_more %v; want %d, %v", limit, len(first.Data), first.HasMore, want, limit < total)
		}
		for i, p := range first.Data {
			if wantName := fmt.Sprintf("P%d", total-1-i); p.Name != wantName {
				t.Fatalf("limit %d: product %d is %s, want %s", limit, i, p.Name, wantName)
			}
		}
		if !first.HasMore {
			continue
		}
		next, err := store.Products(ctx, sc, payments.ListParams{Limit: limit, StartingAfter: first.Data[len(first.Data)-1].ID})
		if err != nil {
			t.Fatal(err)
		}
		wantNext := min(limit, total-limit)
		if len(next.Data) != wantNext || next.Data[0].Name != fmt.Sprintf("P%d", total-1-limit) || next.HasMore != (2*limit < total) {
			t.Fatalf("limit %d, second page: %d products from %s, has_more %v", limit, len(next.Data), next.Data[0].Name, next.HasMore)
		}
	}
}

// TestSharedStatementsKeepGenericPlans: the statements that read the
// products and pages of concurrent requests together are planned a few
// times and then run on their generic plans, also when they carry fewer
// keys than the 10 PostgreSQL plans an array for (each statement of pages
// was planned afresh then, at twice its running time).
func TestSharedStatementsKeepGenericPlans(t *testing.T) {
	t.Parallel()
	db, store, sc := preparingMerchant(t)
	ctx := context.Background()
	live := payments.Scope{MerchantID: sc.MerchantID, Live: true}
	var ids []string
	base := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	for i := range 40 {
		p := payments.Product{ID: payments.NewID("prod_"), Name: fmt.Sprintf("P%d", i), Active: true,
			Images: []string{}, Metadata: map[string]string{}, Created: base.Add(time.Duration(i) * time.Second)}
		for _, s := range []payments.Scope{sc, live} {
			p.ID = payments.NewID("prod_")
			if err := store.CreateProduct(ctx, s, p); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, p.ID) // live ones
	}
	seedOlderLive(t, db, sc)

	// Rounds of requests at once, each round a few distinct keys of each
	// statement (the store's one connection makes them queue together).
	for round := range 30 {
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := range 4 {
			wg.Add(4)
			go func() {
				defer wg.Done()
				_, err := store.Products(ctx, []payments.Scope{sc, live}[i%2], payments.ListParams{Limit: 10})
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := store.Products(ctx, live, payments.ListParams{Limit: 10, StartingAfter: ids[(round+i)%len(ids)]})
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := store.Product(ctx, live, ids[(round*4+i)%len(ids)])
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := store.Product(ctx, live, ids[(round*4+i+7)%len(ids)])
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, st := range []struct{ name, like string }{
		{"first pages", `%unnest($1::text[], $2::boolean[]) WITH ORDINALITY AS k (merchant_id, livemode, i)%`},
		{"pages after a cursor", `%unnest($1::text[], $2::boolean[], $3::text[]) WITH ORDINALITY AS k (merchant_id, livemode, after, i)%`},
		{"products by id", `%unnest($1::text[], $2::boolean[], $3::text[]) WITH ORDINALITY AS k (merchant_id, livemode, id, i)%`},
	} {
		var generic, custom int
		err := db.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE $1`, st.like).Scan(&generic, &custom)
		if err != nil {
			t.Fatalf("%s: the shared statement is not prepared on the connection (no calls went together?): %v", st.name, err)
		}
		if custom > 5 || generic == 0 {
			t.Errorf("%s: %d generic and %d custom plans; want the generic plan kept after 5 custom ones", st.name, generic, custom)
		}
	}
}

// seedOlderLive gives sc's merchant 20,000 live products a day old and
// analyzes products, so that the planner's statistics describe a large
// merchant, as the bench's.
func seedOlderLive(t *testing.T, db *sqlx.DB, sc payments.Scope) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO products (merchant_id, livemode, id, name, created_at, updated_at)
		SELECT $1, true, 'prod_seed' || g, 'Seed', now() - interval '1 day', now() - interval '1 day'
		FROM generate_series(1, 20000) g`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE products`); err != nil {
		t.Fatal(err)
	}
}

// preparingMerchant is soloMerchant for a test that reads what the store
// prepared on its connection: skipped behind a transaction-mode pooler,
// where nothing is prepared.
func preparingMerchant(t *testing.T) (*sqlx.DB, *postgres.Store, payments.Scope) {
	t.Helper()
	if testenv.PoolMode() == postgres.PoolTransaction {
		t.Skip("nothing is prepared behind a transaction-mode pooler")
	}
	return soloMerchant(t)
}

// soloMerchant returns a migrated database of the test's own, a store on
// it and the test scope of a merchant in it. The pool has one connection,
// so that what the test reads of the session (pg_prepared_statements, the
// statistics it flushes) is the store's.
func soloMerchant(t *testing.T) (*sqlx.DB, *postgres.Store, payments.Scope) {
	t.Helper()
	db := freshDB(t, 0)
	db.SetMaxOpenConns(1)
	store := postgres.New(db)
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return db, store, payments.Scope{MerchantID: m.ID}
}
