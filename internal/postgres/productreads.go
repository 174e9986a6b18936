package postgres

import (
	"context"
	"fmt"
	"strconv"

	"github.com/lib/pq"

	"paysvc/internal/groupcommit"
	"paysvc/internal/payments"
)

// Concurrent product reads share one statement. A GET of one product was
// one primary-key SELECT, and on a small machine PostgreSQL's cost per
// statement (its protocol round, the executor's start and end, the socket's
// system calls on both sides) was most of the request: a statement that
// reads eight products costs PostgreSQL about twice one that reads one.
// So the reads that arrive while one is in flight wait for it and then go
// together, as one statement (groupcommit.Queue); at low load a read goes
// alone, as the single-row statement it always was.
//
// What a caller sees is unchanged. The statement starts after every one of
// its callers asked, so a read sees every write committed before it was
// made: a product created by a request that has returned is found. Every
// key is matched with its own merchant and livemode: the statement is as
// scoped as the single-row one. A read in a request's transaction (an
// idempotent POST's) runs there, alone, to see that transaction's writes.

// maxProductReads bounds one statement's keys; a longer queue takes several.
const maxProductReads = 100

// productRead is one Store.Product call waiting for its statement.
type productRead struct {
	ctx  context.Context
	sc   payments.Scope
	id   string
	p    payments.Product
	err  error
	done chan struct{}
}

func (r *productRead) CallerCtx() context.Context { return r.ctx }

func (r *productRead) GiveUp(err error) {
	r.err = fmt.Errorf("select product: %w", err)
	close(r.done)
}

// readProduct queues the read and waits for its answer or ctx.
func (s *Store) readProduct(ctx context.Context, sc payments.Scope, id string) (payments.Product, error) {
	r := &productRead{ctx: ctx, sc: sc, id: id, done: make(chan struct{})}
	s.productReads.Add(r)
	select {
	case <-r.done:
		return r.p, r.err
	case <-ctx.Done():
		return payments.Product{}, fmt.Errorf("select product: %w", ctx.Err())
	}
}

// readProducts answers queued reads: one alone by the single-row statement,
// more by productsByKeys, which may take as long as the most patient caller.
func (s *Store) readProducts(rs []*productRead) {
	if len(rs) == 1 {
		r := rs[0]
		r.p, r.err = s.product(r.ctx, &s.q, r.sc, r.id, productByID)
		close(r.done)
		return
	}
	ctx, cancel := groupcommit.PatientContext(rs)
	defer cancel()
	for len(rs) > 0 {
		n := min(len(rs), maxProductReads)
		s.readProductsTogether(ctx, rs[:n])
		rs = rs[n:]
	}
}

// productsByKeys reads the products of (merchant, livemode, id) keys, each
// row with its key's ordinal. A key with no product has no row.
const productsByKeys = `SELECT k.i, ` + productCols + `
	FROM unnest($1::text[], $2::boolean[], $3::text[]) WITH ORDINALITY AS k (merchant_id, livemode, id, i)
	JOIN products p ON p.merchant_id = k.merchant_id AND p.livemode = k.livemode AND p.id = k.id
	LEFT JOIN prices dp ON dp.id = p.default_price_id`

// readProductsTogether answers rs with one statement. Reads of the same key
// share its row; each still gets a product of its own to change.
func (s *Store) readProductsTogether(ctx context.Context, rs []*productRead) {
	type key struct {
		merchant string
		live     bool
		id       string
	}
	var (
		merchants, ids []string
		lives          []bool
		byKey          = make(map[key]int, len(rs))
		waiting        = make([][]*productRead, 0, len(rs)) // by ordinal - 1
	)
	for _, r := range rs {
		k := key{r.sc.MerchantID, r.sc.Live, r.id}
		i, ok := byKey[k]
		if !ok {
			i = len(waiting)
			byKey[k] = i
			merchants, lives, ids = append(merchants, k.merchant), append(lives, k.live), append(ids, k.id)
			waiting = append(waiting, nil)
		}
		waiting[i] = append(waiting[i], r)
	}
	err := s.scanByOrdinal(ctx, productsByKeys, []any{pq.Array(merchants), pq.Array(lives), pq.Array(ids)}, len(ids), func(i int, row *productRow) {
		for _, r := range waiting[i] {
			r.p, r.err = row.product()
			close(r.done)
		}
		waiting[i] = nil
	})
	for i, w := range waiting {
		for _, r := range w {
			if err != nil {
				r.err = fmt.Errorf("select products: %w", err)
			} else {
				r.err = payments.NotFound(payments.ProductNotFound, ids[i])
			}
			close(r.done)
		}
	}
}

// scanByOrdinal runs query, whose rows are a key's ordinal and a product's
// columns, and hands each row to found with its key's index (of keys).
func (s *Store) scanByOrdinal(ctx context.Context, query string, args []any, keys int, found func(i int, row *productRow)) error {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		ord int64
		row productRow
	)
	dests := append([]any{&ord}, row.dests()...)
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return err
		}
		if ord < 1 || int(ord) > keys {
			return fmt.Errorf("ordinal %d of %d keys", ord, keys)
		}
		found(int(ord)-1, &row)
	}
	return rows.Err()
}

// Pages of products go together the same way: the pages queued together are
// read by one statement, each key's page by its own index scan under a
// LATERAL join, and requests for the same page share its rows. A page after
// a cursor finds the cursor's row in the same statement; a key whose page
// comes back empty (the list's end, or a cursor that is not the merchant's)
// is read again alone, so that it gets the answer it always got.

// pageRead is one Store.Products call waiting for its statement.
type pageRead struct {
	ctx  context.Context
	sc   payments.Scope
	lp   payments.ListParams
	page payments.Page[payments.Product]
	err  error
	done chan struct{}
}

func (r *pageRead) CallerCtx() context.Context { return r.ctx }

func (r *pageRead) GiveUp(err error) {
	r.err = fmt.Errorf("select products: %w", err)
	close(r.done)
}

// readProductsPage queues the page's read and waits for it or ctx.
func (s *Store) readProductsPage(ctx context.Context, sc payments.Scope, lp payments.ListParams) (payments.Page[payments.Product], error) {
	r := &pageRead{ctx: ctx, sc: sc, lp: lp, done: make(chan struct{})}
	s.productPages.Add(r)
	select {
	case <-r.done:
		return r.page, r.err
	case <-ctx.Done():
		return payments.Page[payments.Product]{}, fmt.Errorf("select products: %w", ctx.Err())
	}
}

// pagesStatement is one statement of pages: first pages or pages after a
// cursor, each of rows rows (a pageRows size).
type pagesStatement struct {
	after bool
	rows  int
}

// readProductPages answers queued page reads: one alone as productsPage
// does, more by one statement per pagesStatement.
func (s *Store) readProductPages(rs []*pageRead) {
	if len(rs) == 1 {
		r := rs[0]
		r.page, r.err = s.productsPage(r.ctx, r.sc, r.lp)
		close(r.done)
		return
	}
	ctx, cancel := groupcommit.PatientContext(rs)
	defer cancel()
	byStatement := make(map[pagesStatement][]*pageRead)
	for _, r := range rs {
		st := pagesStatement{after: r.lp.StartingAfter != "", rows: pageSize(r.lp.Limit)}
		byStatement[st] = append(byStatement[st], r)
	}
	for st, rs := range byStatement {
		for len(rs) > 0 {
			n := min(len(rs), maxProductReads)
			s.readProductPagesTogether(ctx, st, rs[:n])
			rs = rs[n:]
		}
	}
}

// productPagesText is st's statement: $1, $2 (and $3) are the keys'
// merchants, livemodes (and cursors); each row comes with its key's
// ordinal, in the page's order.
func productPagesText(st pagesStatement) string {
	return productPageTexts.get(st, func() string {
		keys := `unnest($1::text[], $2::boolean[]) WITH ORDINALITY AS k (merchant_id, livemode, i)`
		cursor, after := "", ""
		if st.after {
			keys = `unnest($1::text[], $2::boolean[], $3::text[]) WITH ORDINALITY AS k (merchant_id, livemode, after, i)`
			cursor = `
	CROSS JOIN LATERAL (SELECT c.created_at, c.id FROM products c
		WHERE c.merchant_id = k.merchant_id AND c.livemode = k.livemode AND c.id = k.after) c`
			after = ` AND (p.created_at, p.id) < (c.created_at, c.id)`
		}
		return `SELECT k.i, pg.* FROM ` + keys + cursor + `
	CROSS JOIN LATERAL (SELECT ` + productCols + productFrom + `
		WHERE p.merchant_id = k.merchant_id AND p.livemode = k.livemode` + after + `
		ORDER BY p.created_at DESC, p.id DESC LIMIT ` + strconv.Itoa(st.rows) + `) pg
	ORDER BY k.i, pg.created_at DESC, pg.id DESC`
	})
}

var productPageTexts statementTexts[pagesStatement]

// readProductPagesTogether answers rs, all of statement st, with it.
func (s *Store) readProductPagesTogether(ctx context.Context, st pagesStatement, rs []*pageRead) {
	type key struct {
		merchant string
		live     bool
		after    string
	}
	var (
		merchants, afters []string
		lives             []bool
		byKey             = make(map[key]int, len(rs))
		waiting           = make([][]*pageRead, 0, len(rs)) // by ordinal - 1
	)
	for _, r := range rs {
		k := key{r.sc.MerchantID, r.sc.Live, r.lp.StartingAfter}
		i, ok := byKey[k]
		if !ok {
			i = len(waiting)
			byKey[k] = i
			merchants, lives, afters = append(merchants, k.merchant), append(lives, k.live), append(afters, k.after)
			waiting = append(waiting, nil)
		}
		waiting[i] = append(waiting[i], r)
	}
	args := []any{pq.Array(merchants), pq.Array(lives)}
	if st.after {
		args = append(args, pq.Array(afters))
	}
	pages := make([][]productRow, len(waiting))
	err := s.scanByOrdinal(ctx, productPagesText(st), args, len(waiting), func(i int, row *productRow) {
		pages[i] = append(pages[i], *row)
	})
	for i, w := range waiting {
		for _, r := range w {
			switch {
			case err != nil:
				r.err = fmt.Errorf("select products: %w", err)
			case len(pages[i]) == 0: // the end, or not a cursor: as alone
				r.page, r.err = s.productsPage(ctx, r.sc, r.lp)
			default:
				r.page, r.err = productsOf(pages[i], r.lp.Limit)
			}
			close(r.done)
		}
	}
}

// productsOf is the page of limit products rows start with.
func productsOf(rows []productRow, limit int) (payments.Page[payments.Product], error) {
	rows = rows[:min(len(rows), limit+1)]
	out := make([]payments.Product, 0, len(rows))
	for _, row := range rows {
		p, err := row.product()
		if err != nil {
			return payments.Page[payments.Product]{}, err
		}
		out = append(out, p)
	}
	return page(out, limit), nil
}
