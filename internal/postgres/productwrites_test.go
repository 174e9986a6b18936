package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// variedProduct is the i-th of a set of products that between them fill
// or leave out every optional field, with text that needs quoting.
func variedProduct(live bool, i int) payments.Product {
	s := func(v string) *string { return &v }
	p := payments.Product{ID: payments.NewID("prod_"), Live: live, Name: fmt.Sprintf(`P "%d" \ ü`, i), Active: i%5 != 0,
		Images: []string{}, Metadata: map[string]string{}, Created: time.Now().Add(time.Duration(i) * time.Microsecond).Truncate(time.Microsecond)}
	if i%2 == 0 {
		p.Description, p.URL, p.UnitLabel = s(`d,{"}`+strconv.Itoa(i)), s("https://example.com/"+strconv.Itoa(i)), s("seat")
		p.StatementDescriptor, p.TaxCode = s("DESC "+strconv.Itoa(i)), s("txcd_10000000")
		p.Images = []string{"https://example.com/a.png", `https://example.com/"b".png`}
		p.Metadata = map[string]string{"order": strconv.Itoa(i), `k"ey`: `v\al{}`}
		ship := i%4 == 0
		p.Shippable = &ship
	}
	if i%3 != 0 {
		p.DefaultPrice = &payments.Price{ID: payments.NewID("price_"), ProductID: p.ID, Amount: int64(100 + i), Currency: "eur", Created: p.Created}
		if i%2 == 1 {
			p.DefaultPrice.TaxBehavior = s("inclusive")
		}
	}
	return p
}

// sameProduct reports how got, read back, differs from want, as created.
func sameProduct(got, want payments.Product) error {
	if !got.Created.Equal(want.Created) {
		return fmt.Errorf("created %v, want %v", got.Created, want.Created)
	}
	got.Created, want.Created = time.Time{}, time.Time{}
	if got.DefaultPrice != nil && want.DefaultPrice != nil {
		if !got.DefaultPrice.Created.Equal(want.DefaultPrice.Created) {
			return fmt.Errorf("price created %v, want %v", got.DefaultPrice.Created, want.DefaultPrice.Created)
		}
		g, w := *got.DefaultPrice, *want.DefaultPrice
		g.Created, w.Created = time.Time{}, time.Time{}
		got.DefaultPrice, want.DefaultPrice = &g, &w
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("got %+v, want %+v", got, want)
	}
	return nil
}

// TestConcurrentProductCreatesShareStatements: creations made at once are
// written together, far fewer statements than products, and each product
// reads back exactly as created, in its own merchant and mode.
func TestConcurrentProductCreatesShareStatements(t *testing.T) {
	t.Parallel()
	store, a, b := readsStore(t)
	scopes := []payments.Scope{a, b, {MerchantID: a.MerchantID, Live: true}}
	runs, creates := store.CountProductCreateRuns()
	const n = 300
	made := make([]payments.Product, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		sc := scopes[i%len(scopes)]
		made[i] = variedProduct(sc.Live, i)
		wg.Go(func() {
			<-start
			if err := store.CreateProduct(context.Background(), sc, made[i]); err != nil {
				t.Errorf("product %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if creates.Load() != n {
		t.Errorf("%d creations queued, want %d", creates.Load(), n)
	}
	if runs.Load() > n/4 {
		t.Errorf("%d creations made at once took %d runs; want them shared", n, runs.Load())
	}
	t.Logf("%d creations in %d runs", n, runs.Load())
	for i, want := range made {
		sc := scopes[i%len(scopes)]
		got, err := store.Product(context.Background(), sc, want.ID)
		if err != nil {
			t.Fatalf("product %d: %v", i, err)
		}
		if err := sameProduct(got, want); err != nil {
			t.Errorf("product %d: %v", i, err)
		}
		other := scopes[(i+1)%len(scopes)]
		if _, err := store.Product(context.Background(), other, want.ID); payments.ErrorCode(err) != payments.ProductNotFound {
			t.Errorf("product %d of %+v found in %+v: %v", i, sc, other, err)
		}
	}
}

// TestFailedCreationFailsAlone: when one creation of those written
// together cannot be written (its merchant does not exist), it alone gets
// the error; the others are written.
func TestFailedCreationFailsAlone(t *testing.T) {
	t.Parallel()
	store, a, _ := readsStore(t)
	nobody := payments.Scope{MerchantID: "mch_nobody"}
	const n = 200
	errs := make([]error, n)
	made := make([]payments.Product, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		sc := a
		if i%50 == 7 {
			sc = nobody
		}
		made[i] = variedProduct(false, i)
		wg.Go(func() {
			<-start
			errs[i] = store.CreateProduct(context.Background(), sc, made[i])
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		_, rerr := store.Product(context.Background(), a, made[i].ID)
		if i%50 == 7 {
			if err == nil {
				t.Errorf("product %d of no merchant: created", i)
			}
			continue
		}
		if err != nil || rerr != nil {
			t.Errorf("product %d: created: %v; read: %v", i, err, rerr)
		}
	}
}

// TestGivenUpCreationsWriteNothing: a creation whose caller's context has
// ended comes back with the context's error and writes nothing.
func TestGivenUpCreationsWriteNothing(t *testing.T) {
	t.Parallel()
	store, a, _ := readsStore(t)
	var mu sync.Mutex
	var ids []string
	if n := testenv.CallGivenUp(func(ctx context.Context) bool {
		p := variedProduct(false, 1)
		mu.Lock()
		ids = append(ids, p.ID)
		mu.Unlock()
		return errors.Is(store.CreateProduct(ctx, a, p), context.Canceled)
	}); n != 0 {
		t.Errorf("%d of 20,000 creations with an ended context came back without its error", n)
	}
	page, err := store.Products(context.Background(), a, payments.ListParams{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 0 {
		t.Errorf("creations given up before they ran wrote %s", page.Data[0].ID)
	}
}

// TestCreationsWhoseReplyIsLost: when the connection breaks after
// PostgreSQL committed creations written together, before their reply
// reached the API, each caller gets its product, created once, not an
// error (the statement is run again on another connection, then each
// creation alone, and both find the products written).
func TestCreationsWhoseReplyIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lost := loseReplies(t, testenv.DatabaseURL(t))
	lost.arm(insertOf(2)) // each with a price: the statement's tag counts them
	db, err := postgres.OpenMode(ctx, lost.url, 8, testenv.PoolMode(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := postgres.New(db)
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	for round := 0; lost.dropped.Load() == 0; round++ {
		if round == 20 {
			t.Fatal("20 rounds of 50 creations at once, and none was written together")
		}
		const n = 50
		made := make([]payments.Product, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			made[i] = variedProduct(false, 3*i+1) // each with a price
			wg.Go(func() {
				<-start
				errs[i] = store.CreateProduct(ctx, sc, made[i])
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, product %d: %v", round, i, err)
				continue
			}
			got, err := store.Product(ctx, sc, made[i].ID)
			if err != nil {
				t.Errorf("round %d, product %d: read: %v", round, i, err)
			} else if err := sameProduct(got, made[i]); err != nil {
				t.Errorf("round %d, product %d: %v", round, i, err)
			}
		}
	}
	var count int
	if err := db.GetContext(ctx, &count, `SELECT count(*) FROM products WHERE merchant_id = $1`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	if count%50 != 0 {
		t.Errorf("%d products for rounds of 50", count)
	}
}
