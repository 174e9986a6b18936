package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
)

// listItem is what the list tests read of a listed product or customer.
type listItem struct {
	ID       string `json:"id"`
	Active   bool   `json:"active"` // products only
	Livemode bool   `json:"livemode"`
	Created  int64  `json:"created"`
}

// listPage GETs one page of path with the raw query and returns its items and has_more.
func listPage(t *testing.T, h *harness, key, path, query string) ([]listItem, bool) {
	t.Helper()
	if query != "" {
		path += "?" + query
	}
	r := h.do("GET", path, key, nil)
	wantOK(t, r)
	var page struct {
		Data    []listItem `json:"data"`
		HasMore *bool      `json:"has_more"`
	}
	r.data(t, &page)
	if page.Data == nil || page.HasMore == nil {
		t.Fatalf("GET %s: got %s, want data (array) and has_more", path, r.Body.Data)
	}
	return page.Data, *page.HasMore
}

func itemIDs(items []listItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return ids
}

// walkPages follows starting_after from the first page to the last with the
// given limit ("" for the default) and returns every id in order. It checks
// that every page but the last is full with has_more true and the last has
// has_more false.
func walkPages(t *testing.T, h *harness, key, path, limit string, pageSize int) []string {
	t.Helper()
	var all []string
	after := ""
	for range 1000 {
		q := url.Values{}
		if limit != "" {
			q.Set("limit", limit)
		}
		if after != "" {
			q.Set("starting_after", after)
		}
		items, hasMore := listPage(t, h, key, path, q.Encode())
		if len(items) > pageSize {
			t.Fatalf("page after %q: got %d items, want at most %d", after, len(items), pageSize)
		}
		all = append(all, itemIDs(items)...)
		if !hasMore {
			return all
		}
		if len(items) != pageSize {
			t.Fatalf("page after %q: got %d items with has_more true, want %d", after, len(items), pageSize)
		}
		after = items[len(items)-1].ID
	}
	t.Fatalf("no last page after 1000 pages")
	return nil
}

// wantKeysetOrder asserts that ids are strictly decreasing in (created_at, id)
// as PostgreSQL orders them, reading the stored timestamps: the API shows
// created in whole seconds, which cannot tell items of one second apart.
func wantKeysetOrder(t *testing.T, h *harness, table string, ids []string) {
	t.Helper()
	var n int
	if err := h.db.Get(&n, `SELECT count(*) FROM `+table+` WHERE id = ANY($1)`, pq.Array(ids)); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Fatalf("got %d of %d listed ids in %s, want all (duplicates or unknown ids)", n, len(ids), table)
	}
	q := `WITH l AS (SELECT id, ord FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord))
	SELECT l1.id || ' then ' || l2.id FROM l l1 JOIN l l2 ON l2.ord = l1.ord + 1
	JOIN ` + table + ` a ON a.id = l1.id JOIN ` + table + ` b ON b.id = l2.id
	WHERE NOT ((a.created_at, a.id) > (b.created_at, b.id))`
	var bad []string
	if err := h.db.Select(&bad, q, pq.Array(ids)); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("got %v out of (created_at desc, id desc) order, want strictly decreasing", bad)
	}
}

// listedResource is a paged resource and how to make one of its items.
type listedResource struct {
	name, path, table string
	create            func(t *testing.T, h *harness, key string, i int) string
}

var listedResources = []listedResource{
	{"products", "/v1/products", "products", func(t *testing.T, h *harness, key string, i int) string {
		return createProductOK(t, h, key, map[string]any{"name": fmt.Sprintf("Product %02d", i)}).ID
	}},
	{"customers", "/v1/customers", "customers", func(t *testing.T, h *harness, key string, i int) string {
		return createCustomerOK(t, h, key, map[string]any{"email": fmt.Sprintf("c%02d@example.com", i)}).ID
	}},
	{"subscription products", "/v1/subscription-products", "products", func(t *testing.T, h *harness, key string, i int) string {
		return createSubProductOK(t, h, key, subProductBody("name", fmt.Sprintf("Plan %02d", i))).ID
	}},
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	for _, res := range listedResources {
		t.Run(res.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, harnessOpts{})
			mA := h.merchant(payments.PlanFree)
			key := h.key(mA, false)
			var created []string
			for i := range 25 {
				created = append(created, res.create(t, h, key, i))
			}
			newest := reversed(created)
			otherMerchantID := res.create(t, h, h.testKey(), 0)
			otherModeID := res.create(t, h, h.key(mA, true), 0)

			t.Run("default page", func(t *testing.T) {
				items, hasMore := listPage(t, h, key, res.path, "")
				if got := itemIDs(items); !slices.Equal(got, newest[:10]) || !hasMore {
					t.Errorf("got %v (has_more %v), want the 10 newest %v and has_more true", got, hasMore, newest[:10])
				}
				for i := 1; i < len(items); i++ {
					if items[i].Created > items[i-1].Created {
						t.Errorf("item %d created %d after item %d created %d, want newest first", i, items[i].Created, i-1, items[i-1].Created)
					}
				}
				wantKeysetOrder(t, h, res.table, itemIDs(items))
			})

			for _, c := range []struct {
				name, limit string
				size        int
			}{
				{"walk default limit", "", 10},
				{"walk limit 5, last page exactly full", "5", 5},
				{"walk limit 7", "7", 7},
				{"walk limit 1", "1", 1},
			} {
				t.Run(c.name, func(t *testing.T) {
					got := walkPages(t, h, key, res.path, c.limit, c.size)
					if !slices.Equal(got, newest) {
						t.Errorf("got %v, want all 25 newest first, each once: %v", got, newest)
					}
					wantKeysetOrder(t, h, res.table, got)
				})
			}

			for _, c := range []struct {
				query   string
				want    []string
				hasMore bool
			}{
				{"limit=1", newest[:1], true},
				{"limit=24", newest[:24], true},
				{"limit=25", newest, false},
				{"limit=100", newest, false},
				{"limit=3&starting_after=" + newest[0], newest[1:4], true},
				{"limit=100&starting_after=" + newest[20], newest[21:], false},
				{"starting_after=" + newest[24], []string{}, false},
			} {
				t.Run(c.query, func(t *testing.T) {
					items, hasMore := listPage(t, h, key, res.path, c.query)
					if got := itemIDs(items); !slices.Equal(got, c.want) || hasMore != c.hasMore {
						t.Errorf("got %v (has_more %v), want %v (has_more %v)", got, hasMore, c.want, c.hasMore)
					}
				})
			}

			for _, c := range []struct {
				name, query, field string
			}{
				{"limit 0", "limit=0", "limit"},
				{"limit 101", "limit=101", "limit"},
				{"limit -1", "limit=-1", "limit"},
				{"limit abc", "limit=abc", "limit"},
				{"limit empty", "limit=", "limit"},
				{"limit 1.5", "limit=1.5", "limit"},
				{"limit huge", "limit=99999999999999999999", "limit"},
				{"starting_after empty", "starting_after=", "starting_after"},
				{"starting_after unknown", "starting_after=" + res.name[:4] + "_doesnotexist000000000", "starting_after"},
				{"starting_after of another merchant", "starting_after=" + otherMerchantID, "starting_after"},
				{"starting_after of the other mode", "starting_after=" + otherModeID, "starting_after"},
			} {
				t.Run(c.name, func(t *testing.T) {
					wantValidation(t, h.do("GET", res.path+"?"+c.query, key, nil), c.field)
				})
			}

			t.Run("equal created: ties broken by id desc across pages", func(t *testing.T) {
				mT := h.merchant(payments.PlanFree)
				tkey := h.key(mT, false)
				var tied []string
				for i := range 12 {
					tied = append(tied, res.create(t, h, tkey, i))
				}
				// The API cannot make equal timestamps on demand: set them.
				if _, err := h.db.Exec(`UPDATE `+res.table+` SET created_at = '2025-01-01T00:00:00.123456Z' WHERE merchant_id = $1`, mT); err != nil {
					t.Fatal(err)
				}
				got := walkPages(t, h, tkey, res.path, "5", 5)
				if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(tied))) {
					t.Errorf("got %v, want each of %v once", got, tied)
				}
				wantKeysetOrder(t, h, res.table, got)
			})
		})
	}
}

// TestListAfterDeletedCustomer: a deleted customer is gone from the list but
// still marks its place, so a client holding it as a cursor can continue.
func TestListAfterDeletedCustomer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	var created []string
	for i := range 25 {
		created = append(created, createCustomerOK(t, h, key, map[string]any{"email": fmt.Sprintf("d%02d@example.com", i)}).ID)
	}
	newest := reversed(created)
	first, _ := listPage(t, h, key, "/v1/customers", "")
	cursor := first[len(first)-1].ID
	if cursor != newest[9] {
		t.Fatalf("got last item %s of the first page, want %s", cursor, newest[9])
	}
	// Delete the cursor and the first item of the next page.
	for _, id := range []string{cursor, newest[10]} {
		wantOK(t, h.do("DELETE", "/v1/customers/"+id, key, nil))
	}
	items, hasMore := listPage(t, h, key, "/v1/customers", "starting_after="+cursor)
	if got, want := itemIDs(items), newest[11:21]; !slices.Equal(got, want) || !hasMore {
		t.Errorf("got %v (has_more %v), want %v (has_more true)", got, hasMore, want)
	}
	items, hasMore = listPage(t, h, key, "/v1/customers", "limit=100&starting_after="+newest[10])
	if got, want := itemIDs(items), newest[11:]; !slices.Equal(got, want) || hasMore {
		t.Errorf("after the deleted %s: got %v (has_more %v), want %v", newest[10], got, hasMore, want)
	}
	all := walkPages(t, h, key, "/v1/customers", "", 10)
	want := slices.Concat(newest[:9], newest[11:])
	if !slices.Equal(all, want) {
		t.Errorf("walk: got %v, want the 23 customers left %v", all, want)
	}
}

// The statements of postgres.Store.Products for a page of products, copied
// from internal/postgres/products.go (productCols, productFrom and the two
// queries). TestProductListUsesKeysetIndex checks that the source still
// contains them, so the copy cannot drift silently.
const (
	productColsSQL = `p.id, p.livemode, p.name, p.description, p.active, p.images, p.url, p.metadata,
	p.shippable, p.unit_label, p.statement_descriptor, p.tax_code, p.created_at,
	dp.id AS price_id, dp.amount AS price_amount, dp.currency AS price_currency,
	dp.tax_behavior AS price_tax_behavior, dp.created_at AS price_created_at`
	productFromSQL       = ` FROM products p LEFT JOIN prices dp ON dp.id = p.default_price_id `
	productFirstPageTail = `WHERE p.merchant_id = $1 AND p.livemode = $2
		ORDER BY p.created_at DESC, p.id DESC`
	productNextPageTail = `WHERE p.merchant_id = $1 AND p.livemode = $2
		AND (p.created_at, p.id) < ($3, $4) ORDER BY p.created_at DESC, p.id DESC`
	// The store appends the page's LIMIT as a constant (selectPage): 11
	// rows for the default limit.
	productFirstPageSQL = `SELECT ` + productColsSQL + productFromSQL + productFirstPageTail + ` LIMIT 11`
	productNextPageSQL  = `SELECT ` + productColsSQL + productFromSQL + productNextPageTail + ` LIMIT 11`
)

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	Filter       string     `json:"Filter"`
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

func TestProductListUsesKeysetIndex(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../postgres/products.go")
	if err != nil {
		t.Fatal(err)
	}
	squash := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for name, frag := range map[string]string{
		"productCols": productColsSQL, "productFrom": productFromSQL,
		"first page": productFirstPageTail, "next page": productNextPageTail,
	} {
		if !strings.Contains(squash(string(src)), squash(frag)) {
			t.Fatalf("internal/postgres/products.go no longer contains the %s SQL copied here; update the copy:\n%s", name, frag)
		}
	}

	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanFree)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	tx, err := h.db.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// ~2000 products of merchant A in test mode, each with a default price,
	// beside rows of A's live mode and of merchant B that a page must skip.
	for _, s := range []struct {
		merchant string
		live     bool
		n        int
	}{{mA, false, 2000}, {mA, true, 300}, {mB, false, 300}} {
		prefix := fmt.Sprintf("%s_%v_", s.merchant, s.live)
		const insProducts = `INSERT INTO products (id, merchant_id, livemode, name, default_price_id, created_at, updated_at)
		SELECT 'prod_' || $1 || g, $2, $3, 'Product ' || g, 'price_' || $1 || g, $4::timestamptz - g * interval '1 second', now()
		FROM generate_series(1, $5::int) g`
		if _, err := tx.ExecContext(ctx, insProducts, prefix, s.merchant, s.live, base, s.n); err != nil {
			t.Fatal(err)
		}
		const insPrices = `INSERT INTO prices (id, merchant_id, livemode, product_id, amount, currency, created_at)
		SELECT 'price_' || $1 || g, $2, $3, 'prod_' || $1 || g, 100 + g, 'usd', $4::timestamptz - g * interval '1 second'
		FROM generate_series(1, $5::int) g`
		if _, err := tx.ExecContext(ctx, insPrices, prefix, s.merchant, s.live, base, s.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.ExecContext(ctx, `ANALYZE products, prices`); err != nil {
		t.Fatal(err)
	}
	var cur struct {
		CreatedAt time.Time `db:"created_at"`
		ID        string    `db:"id"`
	}
	if err := h.db.GetContext(ctx, &cur, `SELECT created_at, id FROM products WHERE id = $1`, fmt.Sprintf("prod_%s_false_1000", mA)); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"first page", productFirstPageSQL, []any{mA, false}},
		{"page after a cursor", productNextPageSQL, []any{mA, false, cur.CreatedAt, cur.ID}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The planner picks the index on this table without help; no
			// enable_seqscan = off is needed (if a future planner change makes
			// it prefer a seq scan on this small table, set it here with SET
			// LOCAL in a transaction and say so).
			var raw string
			if err := h.db.GetContext(ctx, &raw, `EXPLAIN (FORMAT JSON) `+c.sql, c.args...); err != nil {
				t.Fatal(err)
			}
			var plans []struct {
				Plan planNode `json:"Plan"`
			}
			if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("EXPLAIN output %s: %v", raw, err)
			}
			var pageScan *planNode
			plans[0].Plan.walk(func(n planNode) {
				switch {
				case n.NodeType == "Sort" || n.NodeType == "Incremental Sort":
					t.Errorf("plan has a %s node, want the index order used", n.NodeType)
				case n.NodeType == "Seq Scan" && n.RelationName == "products":
					t.Errorf("plan has a Seq Scan on products, want an Index Scan on products_page")
				case n.NodeType == "Index Scan" && n.IndexName == "products_page":
					pageScan = &n
				}
			})
			if pageScan == nil {
				t.Fatalf("got no Index Scan on products_page in the plan, want one:\n%s", raw)
			}
			// The keyset is a seek in the index, not a filter over every row
			// from the newest one down.
			wantCond := []string{"merchant_id", "livemode"}
			if len(c.args) == 4 {
				wantCond = append(wantCond, "created_at")
			}
			for _, col := range wantCond {
				if !strings.Contains(pageScan.IndexCond, col) {
					t.Errorf("got Index Cond %q, want it to use %s", pageScan.IndexCond, col)
				}
			}
			if pageScan.Filter != "" {
				t.Errorf("got Filter %q on the products_page scan, want none", pageScan.Filter)
			}
			if t.Failed() {
				t.Logf("plan:\n%s", raw)
			}
		})
	}

	// The API answers the same page: the cursor's successors, newest first.
	key := h.key(mA, false)
	items, hasMore := listPage(t, h, key, "/v1/products", url.Values{"starting_after": {cur.ID}, "limit": {"3"}}.Encode())
	want := []string{fmt.Sprintf("prod_%s_false_1001", mA), fmt.Sprintf("prod_%s_false_1002", mA), fmt.Sprintf("prod_%s_false_1003", mA)}
	if got := itemIDs(items); !slices.Equal(got, want) || !hasMore {
		t.Errorf("got %v (has_more %v), want %v (has_more true)", got, hasMore, want)
	}
	if r := h.do("GET", "/v1/products/"+want[0], key, nil); r.Status != http.StatusOK {
		t.Errorf("GET %s: got %d, want 200", want[0], r.Status)
	}
}
