package postgres

import (
	"context"
	"fmt"

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
	err := s.scanProductsByKeys(ctx, merchants, lives, ids, func(i int, row *productRow) {
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

// scanProductsByKeys runs productsByKeys and hands each row to found with
// its key's index.
func (s *Store) scanProductsByKeys(ctx context.Context, merchants []string, lives []bool, ids []string, found func(i int, row *productRow)) error {
	rows, err := s.q.QueryContext(ctx, productsByKeys, pq.Array(merchants), pq.Array(lives), pq.Array(ids))
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
		if ord < 1 || int(ord) > len(ids) {
			return fmt.Errorf("ordinal %d of %d keys", ord, len(ids))
		}
		found(int(ord)-1, &row)
	}
	return rows.Err()
}
