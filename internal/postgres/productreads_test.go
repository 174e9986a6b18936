package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// readsStore is a store on the test database with two merchants.
func readsStore(t *testing.T) (*postgres.Store, payments.Scope, payments.Scope) {
	t.Helper()
	return readsStoreOn(t, testenv.DB(t))
}

// readsStoreOn is readsStore on db.
func readsStoreOn(t *testing.T, db *sqlx.DB) (*postgres.Store, payments.Scope, payments.Scope) {
	t.Helper()
	store := postgres.New(db)
	var scs [2]payments.Scope
	for i := range scs {
		m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}
		if err := store.CreateMerchant(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		scs[i] = payments.Scope{MerchantID: m.ID}
	}
	return store, scs[0], scs[1]
}

func createProduct(t *testing.T, store *postgres.Store, sc payments.Scope, name string, amount int64) payments.Product {
	t.Helper()
	p := payments.Product{ID: payments.NewID("prod_"), Live: sc.Live, Name: name, Active: true,
		Images: []string{}, Metadata: map[string]string{"name": name}, Created: time.Now().Truncate(time.Microsecond)}
	if amount > 0 {
		p.DefaultPrice = &payments.Price{ID: payments.NewID("price_"), ProductID: p.ID, Amount: amount, Currency: "usd", Created: p.Created}
	}
	if err := store.CreateProduct(context.Background(), sc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConcurrentProductReadsShareStatements: reads made at once go to
// PostgreSQL together, far fewer statements than reads, and each still
// gets exactly its own answer: its product in its own scope, not found for
// another merchant's or the other mode's, and a product of its own to
// change even when others asked for the same one.
func TestConcurrentProductReadsShareStatements(t *testing.T) {
	t.Parallel()
	store, a, b := readsStore(t)
	aLive := payments.Scope{MerchantID: a.MerchantID, Live: true}
	withPrice := createProduct(t, store, a, "with price", 1500)
	noPrice := createProduct(t, store, a, "no price", 0)
	ofB := createProduct(t, store, b, "of b", 700)
	live := createProduct(t, store, aLive, "live", 900)
	cases := []struct {
		sc   payments.Scope
		id   string
		want *payments.Product // nil: not found
	}{
		{a, withPrice.ID, &withPrice},
		{a, noPrice.ID, &noPrice},
		{a, ofB.ID, nil},
		{b, ofB.ID, &ofB},
		{b, withPrice.ID, nil},
		{a, live.ID, nil},
		{aLive, live.ID, &live},
		{aLive, withPrice.ID, nil},
		{a, "prod_missing", nil},
	}
	runs, reads := store.CountProductReadRuns()

	const n = 450
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := cases[i%len(cases)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- checkRead(store, c.sc, c.id, c.want, strconv.Itoa(i))
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if reads.Load() != n {
		t.Errorf("%d reads queued, want %d", reads.Load(), n)
	}
	if runs.Load() > n/4 {
		t.Errorf("%d reads made at once took %d statements; want them shared", n, runs.Load())
	}
	t.Logf("%d reads in %d runs", n, runs.Load())
}

// checkRead reads id in sc and compares it with want, then marks the
// product it got as reader's: no other reader may see the mark.
func checkRead(store *postgres.Store, sc payments.Scope, id string, want *payments.Product, reader string) error {
	got, err := store.Product(context.Background(), sc, id)
	if want == nil {
		if payments.ErrorCode(err) != payments.ProductNotFound {
			return fmt.Errorf("%s in %+v: got %q, %v; want product_not_found", id, sc, got.ID, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s in %+v: %v", id, sc, err)
	}
	if got.ID != want.ID || got.Name != want.Name || got.Live != want.Live || got.Metadata["name"] != want.Name ||
		(want.DefaultPrice == nil) != (got.DefaultPrice == nil) ||
		(want.DefaultPrice != nil && (got.DefaultPrice.ID != want.DefaultPrice.ID || got.DefaultPrice.Amount != want.DefaultPrice.Amount)) {
		return fmt.Errorf("%s in %+v: got %+v, want %+v", id, sc, got, *want)
	}
	got.Metadata["reader"] = reader
	if got.Metadata["reader"] != reader {
		return fmt.Errorf("%s: reader %s's product was changed by another", id, reader)
	}
	return nil
}

// TestProductReadSeesEarlierWrites: while other reads keep the queue busy,
// a product created by a call that has returned is found by the next read:
// a read never rides a statement that started before it was made.
func TestProductReadSeesEarlierWrites(t *testing.T) {
	t.Parallel()
	store, a, _ := readsStore(t)
	busy := createProduct(t, store, a, "busy", 100)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := store.Product(ctx, a, busy.ID); err != nil && ctx.Err() == nil {
					t.Error(err)
				}
			}
		}()
	}
	defer wg.Wait()
	defer stop()
	for i := range 200 {
		p := createProduct(t, store, a, "new "+strconv.Itoa(i), 0)
		if _, err := store.Product(context.Background(), a, p.ID); err != nil {
			t.Fatalf("product %d, created before the read: %v", i, err)
		}
	}
}

// TestGivenUpProductReadsAnswerAnError: a read whose caller's context has
// ended comes back with the context's error, never an empty product without
// one, whichever of its answer and its context the caller sees first.
func TestGivenUpProductReadsAnswerAnError(t *testing.T) {
	t.Parallel()
	store, a, _ := readsStore(t)
	p := createProduct(t, store, a, "p", 100)
	if n := testenv.CallGivenUp(func(ctx context.Context) bool {
		_, err := store.Product(ctx, a, p.ID)
		return errors.Is(err, context.Canceled)
	}); n != 0 {
		t.Errorf("%d of 20,000 reads with an ended context came back without its error", n)
	}
}

// TestConcurrentProductPagesShareStatements: list pages asked for at once
// go to PostgreSQL together, and each is exactly the page it is alone:
// first pages and pages after a cursor, of several sizes, merchants and
// modes, the list's end, and a cursor of another merchant's (an error).
//
// On a pool that prepares nothing (transaction pooling) the pages read
// together go through product_pages (migration 0021) and those read alone
// through the plain statements, so there the two answers also check the
// function against the statements.
func TestConcurrentProductPagesShareStatements(t *testing.T) {
	t.Parallel()
	t.Run("tests' pool", func(t *testing.T) {
		t.Parallel()
		testProductPagesShared(t, testenv.DB(t))
	})
	t.Run("unprepared", func(t *testing.T) {
		t.Parallel()
		testProductPagesShared(t, testenv.DBOnMode(t, testenv.DirectDatabaseURL(t), postgres.PoolTransaction))
	})
}

func testProductPagesShared(t *testing.T, db *sqlx.DB) {
	store, a, b := readsStoreOn(t, db)
	aLive := payments.Scope{MerchantID: a.MerchantID, Live: true}
	var ofA, ofB []payments.Product
	for i := range 25 {
		ofA = append(ofA, createProduct(t, store, a, "a"+strconv.Itoa(i), int64(100+i)))
	}
	for i := range 3 {
		ofB = append(ofB, createProduct(t, store, b, "b"+strconv.Itoa(i), 0))
	}
	createProduct(t, store, aLive, "live", 900)
	// ofA is oldest first; a page is newest first.
	cases := []struct {
		sc payments.Scope
		lp payments.ListParams
	}{
		{a, payments.ListParams{Limit: 10}},
		{a, payments.ListParams{Limit: 3}},
		{a, payments.ListParams{Limit: 100}},
		{a, payments.ListParams{Limit: 10, StartingAfter: ofA[15].ID}},
		{a, payments.ListParams{Limit: 20, StartingAfter: ofA[24].ID}},
		{a, payments.ListParams{Limit: 10, StartingAfter: ofA[0].ID}}, // the end: empty
		{a, payments.ListParams{Limit: 10, StartingAfter: ofB[1].ID}}, // not a's: an error
		{b, payments.ListParams{Limit: 10}},
		{b, payments.ListParams{Limit: 2, StartingAfter: ofB[2].ID}},
		{aLive, payments.ListParams{Limit: 10}},
	}
	type answer struct {
		ids     []string
		objects []string
		more    bool
		err     string
	}
	answerOf := func(pg payments.Page[payments.Product], err error) answer {
		if err != nil {
			return answer{err: err.Error()}
		}
		an := answer{more: pg.HasMore, ids: []string{}}
		for _, p := range pg.Data {
			an.ids = append(an.ids, p.ID)
			b, _ := json.Marshal(p.Object()) // every column, to compare
			an.objects = append(an.objects, string(b))
		}
		return an
	}
	alone := make([]answer, len(cases)) // one at a time: each read goes alone
	for i, c := range cases {
		alone[i] = answerOf(store.Products(context.Background(), c.sc, c.lp))
	}
	if got := alone[0]; len(got.ids) != 10 || got.ids[0] != ofA[24].ID || !got.more {
		t.Fatalf("a's first page alone: %+v", got)
	}
	if got := alone[6]; got.err == "" {
		t.Fatalf("a page after another merchant's product: %+v, want an error", got)
	}
	runs, reads := store.CountProductPageRuns()

	const n = 400
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		c, want := cases[i%len(cases)], alone[i%len(cases)]
		wg.Go(func() {
			<-start
			pg, err := store.Products(context.Background(), c.sc, c.lp)
			if got := answerOf(pg, err); fmt.Sprint(got) != fmt.Sprint(want) {
				mu.Lock()
				t.Errorf("%+v %+v together: %+v; alone: %+v", c.sc, c.lp, got, want)
				mu.Unlock()
			}
			for _, p := range pg.Data { // each page's products are its own
				p.Metadata["reader"] = strconv.Itoa(i)
			}
		})
	}
	close(start)
	wg.Wait()
	if reads.Load() != n {
		t.Errorf("%d pages queued, want %d", reads.Load(), n)
	}
	if runs.Load() > n/4 {
		t.Errorf("%d pages asked for at once took %d runs; want them shared", n, runs.Load())
	}
	t.Logf("%d pages in %d runs", n, runs.Load())
}

// TestProductsByKeysFunction: on a pool that prepares nothing (transaction
// pooling), product reads go through products_by_keys (migration 0021),
// alone and together; they must answer exactly what a preparing pool's
// statements answer: every column, in its scope only, not found the same.
// The function repeats productCols' columns, so a column added to one and
// not the other fails here.
func TestProductsByKeysFunction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DirectDatabaseURL(t)
	prepared := postgres.New(testenv.DBOnMode(t, url, postgres.PoolSession))
	unprepared := postgres.New(testenv.DBOnMode(t, url, postgres.PoolTransaction))
	a := payments.Scope{MerchantID: payments.NewID("mch_")}
	b := payments.Scope{MerchantID: payments.NewID("mch_")}
	for _, sc := range []payments.Scope{a, b} {
		if err := prepared.CreateMerchant(ctx, payments.Merchant{ID: sc.MerchantID, Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	str := func(s string) *string { return &s }
	yes := true
	full := payments.Product{ID: payments.NewID("prod_"), Name: "Full", Description: str("Every column set"), Active: true,
		Images: []string{"https://img.example/a.png", "https://img.example/b.png"}, URL: str("https://shop.example/full"),
		Metadata: map[string]string{"sku": "f-1", "colour": "blue"}, Shippable: &yes, UnitLabel: str("seat"),
		StatementDescriptor: str("FULL PRODUCT"), TaxCode: str("txcd_99999999"), Created: time.Now().Truncate(time.Microsecond)}
	full.DefaultPrice = &payments.Price{ID: payments.NewID("price_"), ProductID: full.ID, Amount: 4200, Currency: "eur",
		TaxBehavior: str("inclusive"), Created: full.Created}
	if err := prepared.CreateProduct(ctx, a, full); err != nil {
		t.Fatal(err)
	}
	bare := createProduct(t, prepared, a, "bare", 0)
	ofB := createProduct(t, prepared, b, "of b", 700)
	aLive := payments.Scope{MerchantID: a.MerchantID, Live: true}
	cases := []struct {
		sc payments.Scope
		id string
	}{{a, full.ID}, {a, bare.ID}, {b, ofB.ID}, {a, ofB.ID}, {b, full.ID}, {aLive, full.ID}, {a, "prod_missing"}}

	type answer struct {
		p    payments.Product
		code payments.Code
	}
	read := func(read func(context.Context, payments.Scope, string) (payments.Product, error), sc payments.Scope, id string) answer {
		p, err := read(ctx, sc, id)
		if err != nil && payments.ErrorCode(err) != payments.ProductNotFound {
			t.Errorf("%s in %+v: %v", id, sc, err)
		}
		return answer{p, payments.ErrorCode(err)}
	}
	show := func(a answer) string {
		b, _ := json.Marshal(a.p.Object())
		return fmt.Sprintf("%s %q", b, a.code)
	}
	want := make([]answer, len(cases))
	for i, c := range cases {
		want[i] = read(prepared.ProductUnshared, c.sc, c.id)
	}
	if w := want[0]; w.code != "" || w.p.Description == nil || w.p.DefaultPrice == nil || w.p.DefaultPrice.TaxBehavior == nil {
		t.Fatalf("the prepared read of the full product: %s", show(w))
	}
	// Alone: one key a statement.
	for i, c := range cases {
		if got := read(unprepared.ProductUnshared, c.sc, c.id); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("alone, %s in %+v: got %s, want %s", c.id, c.sc, show(got), show(want[i]))
		}
	}
	// Together: many at once share statements.
	runs, reads := unprepared.CountProductReadRuns()
	const n = 200
	got := make([]answer, n)
	atOnce(n, func(i int) {
		c := cases[i%len(cases)]
		got[i] = read(unprepared.Product, c.sc, c.id)
	})
	for i := range n {
		if w := want[i%len(cases)]; !reflect.DeepEqual(got[i], w) {
			t.Errorf("together, %s in %+v: got %s, want %s", cases[i%len(cases)].id, cases[i%len(cases)].sc, show(got[i]), show(w))
		}
	}
	if runs.Load() >= reads.Load() {
		t.Errorf("%d reads took %d statements; want some shared", reads.Load(), runs.Load())
	}
}

// TestUnpreparedReadsCallTheFunctions: on a pool that prepares nothing the
// product reads call migration 0021's functions (alone and together, and
// pages together), and where the functions do not exist (a database the
// migration has not reached) they read with the plain statements instead
// of failing. Each pool sees the database through a search_path of its
// own: first a schema of stand-ins that refuse every call, then one with
// the tables as views and no functions.
func TestUnpreparedReadsCallTheFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, a, _ := readsStore(t)
	p := createProduct(t, store, a, "p", 500)
	createProduct(t, store, a, "q", 0)

	db := testenv.DBOnMode(t, testenv.DirectDatabaseURL(t), postgres.PoolSession)
	suffix := strings.ToLower(payments.NewID("s"))
	standIns, noFunctions := "standins_"+suffix, "nofunctions_"+suffix
	for _, q := range []string{
		`CREATE SCHEMA ` + standIns,
		`CREATE FUNCTION ` + standIns + `.products_by_keys(text[], boolean[], text[]) RETURNS TABLE (i bigint)
			LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stand-in products_by_keys called'; END $$`,
		`CREATE FUNCTION ` + standIns + `.product_pages(text[], boolean[], text[], integer) RETURNS TABLE (i bigint)
			LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'stand-in product_pages called'; END $$`,
		`CREATE SCHEMA ` + noFunctions,
		`CREATE VIEW ` + noFunctions + `.products AS SELECT * FROM public.products`,
		`CREATE VIEW ` + noFunctions + `.prices AS SELECT * FROM public.prices`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, sch := range []string{standIns, noFunctions} {
			if _, err := db.ExecContext(context.Background(), `DROP SCHEMA `+sch+` CASCADE`); err != nil {
				t.Error(err)
			}
		}
	})
	unprepared := func(searchPath string) *postgres.Store {
		return postgres.New(testenv.DBOnMode(t, testenv.DirectDatabaseURL(t)+"&search_path="+searchPath, postgres.PoolTransaction))
	}
	// pagesAtOnce asks for n first pages at once and returns their errors.
	pagesAtOnce := func(s *postgres.Store, n int) []error {
		errs := make([]error, n)
		atOnce(n, func(i int) {
			pg, err := s.Products(ctx, a, payments.ListParams{Limit: 10})
			if err == nil && len(pg.Data) != 2 {
				err = fmt.Errorf("a page of %d products, want 2", len(pg.Data))
			}
			errs[i] = err
		})
		return errs
	}

	called := unprepared(standIns + ",public")
	if _, err := called.ProductUnshared(ctx, a, p.ID); err == nil || !strings.Contains(err.Error(), "stand-in products_by_keys called") {
		t.Errorf("a read alone: %v, want the stand-in's refusal", err)
	}
	refused := 0
	for _, err := range pagesAtOnce(called, 50) {
		if err != nil && strings.Contains(err.Error(), "stand-in product_pages called") {
			refused++
		} else if err != nil {
			t.Error(err)
		}
	}
	if refused == 0 {
		t.Error("50 pages asked for at once: none called product_pages")
	}

	missing := unprepared(noFunctions)
	got, err := missing.ProductUnshared(ctx, a, p.ID)
	if err != nil || got.ID != p.ID || got.DefaultPrice == nil || got.DefaultPrice.Amount != 500 {
		t.Errorf("a read alone without the function: %+v, %v; want %s with its price", got, err, p.ID)
	}
	if _, err := missing.ProductUnshared(ctx, a, "prod_missing"); payments.ErrorCode(err) != payments.ProductNotFound {
		t.Errorf("a missing product without the function: %v, want product_not_found", err)
	}
	for _, err := range pagesAtOnce(missing, 50) {
		if err != nil {
			t.Errorf("a page without the function: %v", err)
		}
	}
}

// atOnce runs fn(0) … fn(n-1) in goroutines released together, and waits
// for them.
func atOnce(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}
