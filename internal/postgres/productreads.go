package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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

// maxTogether bounds the calls of one statement; a longer queue takes
// several.
const maxTogether = 100

// A shared statement takes well under a millisecond, but several when
// PostgreSQL is saturated (a renewal sweep): the calls queued behind one
// would wait for it to end and then for their own. So once the newest
// statement in flight is overlapAfter old, the next one starts beside it
// (groupcommit.Queue.Overlap), up to maxRunsTogether of a kind at once.
const (
	overlapAfter    = 2 * time.Millisecond
	maxRunsTogether = 4
)

// productKey is a product read's input.
type productKey struct {
	sc payments.Scope
	id string
}

// productAlone reads one product by itself. On a pool that prepares
// nothing it goes through products_by_keys (see productsByKeysCall).
func (s *Store) productAlone(ctx context.Context, k productKey) (payments.Product, error) {
	if !s.q.unprepared {
		return s.product(ctx, &s.q, k.sc, k.id, productByID)
	}
	var p payments.Product
	var err error = payments.NotFound(payments.ProductNotFound, k.id) // till a row comes
	args := productKeyArgs([]productKey{k})
	if serr := s.scanThrough(ctx, productsByKeysCall, args, productsByKeys, args, 1, func(_ int, row *productRow) {
		p, err = row.product()
	}); serr != nil {
		return payments.Product{}, fmt.Errorf("select product: %w", serr)
	}
	return p, err
}

// scanThrough runs fn, a call of one of migration 0021's functions, with
// fnArgs on a pool that prepares nothing, else plain with plainArgs, as
// scanByOrdinal. A database without the function (this version started
// before `api migrate` applied 0021, or after its Down) is read with plain,
// as before 0021, instead of failing every read.
func (s *Store) scanThrough(ctx context.Context, fn string, fnArgs []any, plain string, plainArgs []any, keys int, found func(i int, row *productRow)) error {
	if s.q.unprepared {
		if err := s.scanByOrdinal(ctx, fn, fnArgs, keys, found); !undefinedFunction(err) {
			return err
		}
	}
	return s.scanByOrdinal(ctx, plain, plainArgs, keys, found)
}

// undefinedFunction reports whether err is PostgreSQL's undefined_function:
// the call failed before it read anything.
func undefinedFunction(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == "42883"
}

// ProductUnshared reads one product with a statement of its own, however
// many reads run beside it: what Product did before reads were shared. The
// bench's floor (internal/tools/barehandler) measures a handler with it.
func (s *Store) ProductUnshared(ctx context.Context, sc payments.Scope, id string) (payments.Product, error) {
	return s.productAlone(ctx, productKey{sc, id})
}

// productsByKeys reads the products of (merchant, livemode, id) keys, each
// row with its key's ordinal. A key with no product has no row.
const productsByKeys = `SELECT k.i, ` + productCols + `
	FROM unnest($1::text[], $2::boolean[], $3::text[]) WITH ORDINALITY AS k (merchant_id, livemode, id, i)
	JOIN products p ON p.merchant_id = k.merchant_id AND p.livemode = k.livemode AND p.id = k.id
	LEFT JOIN prices dp ON dp.id = p.default_price_id`

// productsByKeysCall is productsByKeys as the PL/pgSQL function of migration
// 0021 (which says why), for a pool that prepares nothing (a transaction-mode pooler without
// prepared statements). PostgreSQL then parses and plans each statement
// afresh, and this join took longer to plan than to run (about 150 µs
// against 40 µs for one product); the function's query is planned on a
// server connection's first calls and kept, so only the call is planned.
// A pool that prepares its statements keeps their plans already and reads
// with productsByKeys itself. The kept plan is the generic one only because
// the keys are padded to planKeys (productKeyArgs), as for the prepared
// statement: with fewer, PostgreSQL found a custom plan cheaper and planned
// every call again (one key: every call), and the function would gain
// nothing.
const productsByKeysCall = `SELECT * FROM products_by_keys($1::text[], $2::boolean[], $3::text[])`

// productKeyArgs are the arguments of productsByKeys for keys, padded to
// planKeys.
func productKeyArgs(keys []productKey) []any {
	n := max(len(keys), planKeys) // past len(keys), ("", false, ""): no row
	merchants, lives, ids := make([]string, n), make([]bool, n), make([]string, n)
	for i, k := range keys {
		merchants[i], lives[i], ids[i] = k.sc.MerchantID, k.sc.Live, k.id
	}
	return []any{pq.Array(merchants), pq.Array(lives), pq.Array(ids)}
}

// readProductsTogether answers reads with one statement. Reads of the same
// key share its row; each still gets a product of its own to change.
func (s *Store) readProductsTogether(ctx context.Context, reads []*groupcommit.Call[productKey, payments.Product]) {
	keys, byKey := groupcommit.Distinct(reads, func(k productKey) productKey { return k })
	args := productKeyArgs(keys)
	err := s.scanThrough(ctx, productsByKeysCall, args, productsByKeys, args, len(keys), func(i int, row *productRow) {
		for _, r := range byKey[i] {
			r.Answer(row.product())
		}
		byKey[i] = nil
	})
	for i, rs := range byKey {
		for _, r := range rs {
			if err != nil {
				r.Answer(payments.Product{}, fmt.Errorf("select products: %w", err))
			} else {
				r.Answer(payments.Product{}, payments.NotFound(payments.ProductNotFound, keys[i].id))
			}
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

// pageKey is a products page read's input.
type pageKey struct {
	sc payments.Scope
	lp payments.ListParams
}

// pagesStatement is one statement of pages: first pages or pages after a
// cursor, each of rows rows (a pageRows size).
type pagesStatement struct {
	after bool
	rows  int
}

type pageCall = groupcommit.Call[pageKey, payments.Page[payments.Product]]

// readProductPagesTogether answers page reads with one statement per
// pagesStatement among them.
func (s *Store) readProductPagesTogether(ctx context.Context, reads []*pageCall) {
	statements, byStatement := groupcommit.Distinct(reads, func(k pageKey) pagesStatement {
		return pagesStatement{after: k.lp.StartingAfter != "", rows: pageSize(k.lp.Limit)}
	})
	for i, st := range statements {
		s.readProductPagesOf(ctx, st, byStatement[i])
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

// productPagesCall is productPagesText as the PL/pgSQL function of migration
// 0021, for a pool that prepares nothing, as productsByKeysCall: $3 is NULL
// for first pages, $4 the statement's rows.
const productPagesCall = `SELECT * FROM product_pages($1::text[], $2::boolean[], $3::text[], $4::integer)`

// planKeys is the fewest keys a shared statement is given. PostgreSQL
// plans a prepared statement for an array of 10 elements until it knows
// better, and for the array it is given each time it weighs a custom plan:
// with fewer keys the custom plan looked cheaper than the generic one, so
// the statement was planned afresh every time; a statement of pages took
// twice as long to plan as to run (pg_stat_statements: 320 µs of planning
// and 115 µs of execution a call, 6,724 plans in 6,710 calls). Padded to
// 10 keys, the generic plan is kept after the first five; a key that
// matches no row costs an index probe that finds nothing.
const planKeys = 10

// readProductPagesOf answers reads, all of statement st, with it.
func (s *Store) readProductPagesOf(ctx context.Context, st pagesStatement, reads []*pageCall) {
	type key struct {
		sc    payments.Scope
		after string
	}
	keys, byKey := groupcommit.Distinct(reads, func(k pageKey) key { return key{k.sc, k.lp.StartingAfter} })
	n := max(len(keys), planKeys) // past len(keys), ("", false, ""): no row
	merchants, lives, afters := make([]string, n), make([]bool, n), make([]string, n)
	for i, k := range keys {
		merchants[i], lives[i], afters[i] = k.sc.MerchantID, k.sc.Live, k.after
	}
	args := []any{pq.Array(merchants), pq.Array(lives)}
	if st.after {
		args = append(args, pq.Array(afters))
	}
	fnArgs := []any{args[0], args[1], nil, st.rows} // see productPagesCall
	if st.after {
		fnArgs[2] = args[2]
	}
	pages := make([][]productRow, len(keys))
	err := s.scanThrough(ctx, productPagesCall, fnArgs, productPagesText(st), args, len(keys), func(i int, row *productRow) {
		pages[i] = append(pages[i], *row)
	})
	for i, rs := range byKey {
		for _, r := range rs {
			switch {
			case err != nil:
				r.Answer(payments.Page[payments.Product]{}, fmt.Errorf("select products: %w", err))
			case len(pages[i]) == 0: // the end, or not a cursor: as alone
				r.Answer(s.productsPage(ctx, r.In))
			default:
				r.Answer(pageOf(pages[i], r.In.lp.Limit, productRow.product))
			}
		}
	}
}
