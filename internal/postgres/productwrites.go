package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/groupcommit"
	"paysvc/internal/payments"
)

// Concurrent product creations share one statement and one commit, as the
// reads do (productreads.go). A POST /v1/products was one INSERT of the
// product and its price, committed alone: PostgreSQL's cost per statement
// and per commit (its WAL record and flush) was most of the request. The
// creations that arrive while one statement is in flight wait for it and
// then go together, as one multi-row INSERT, committed once; alone, a
// creation is the single-row statement it always was.
//
// What a caller sees is unchanged: its call returns after the commit that
// holds its product, so a product is durable before it is reported created.
// If the statement fails, which the domain's validation leaves to rare
// cases (a merchant deleted meanwhile, or a reply lost, see createAlone),
// each creation is tried again alone to get its own answer. A creation in a
// request's transaction (an idempotent POST's) runs there, alone.

// productCreate is a product creation's input.
type productCreate struct {
	sc payments.Scope
	p  payments.Product
}

// createAlone inserts one product by itself.
//
// A statement of creations together that committed and whose reply was
// lost is run again (rerun.go), fails on the primary keys, and each of its
// creations is tried again alone, here: each meets its own product, and
// writtenBefore reports it created. Without that each failed on the
// primary key, and its caller got an error for a product that was created.
func (s *Store) createAlone(ctx context.Context, c productCreate) (struct{}, error) {
	err := s.insertProduct(ctx, c.sc, c.p)
	// Either key may be the one reported: the statement writes both.
	if writtenBefore(err, "products_pkey", "prices_pkey") {
		return struct{}{}, nil
	}
	return struct{}{}, err
}

// createProductsTogether answers creations with one statement, or, if it
// fails, each alone.
func (s *Store) createProductsTogether(ctx context.Context, creates []*groupcommit.Call[productCreate, struct{}]) {
	err := s.insertProductsTogether(ctx, creates)
	for _, c := range creates {
		if err != nil {
			c.Answer(s.createAlone(c.Ctx(), c.In))
			continue
		}
		c.Answer(struct{}{}, nil)
	}
}

// insertProductsTogether inserts the products of cs, and their default
// prices, in one statement: all of them or none.
func (s *Store) insertProductsTogether(ctx context.Context, cs []*groupcommit.Call[productCreate, struct{}]) error {
	n := len(cs)
	var (
		merchants, ids, names, images, metadata, created      = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		descriptions, urls, unitLabels, descriptors, taxCodes = make([]sql.NullString, n), make([]sql.NullString, n), make([]sql.NullString, n), make([]sql.NullString, n), make([]sql.NullString, n)
		priceIDs, currencies, taxBehaviors                    = make([]sql.NullString, n), make([]sql.NullString, n), make([]sql.NullString, n)
		lives, actives                                        = make([]bool, n), make([]bool, n)
		shippables                                            = make([]sql.NullBool, n)
		amounts                                               = make([]sql.NullInt64, n)
	)
	for i, c := range cs {
		sc, p := c.In.sc, c.In.p
		merchants[i], lives[i], ids[i], names[i], actives[i] = sc.MerchantID, sc.Live, p.ID, p.Name, p.Active
		descriptions[i], urls[i], unitLabels[i] = nullString(p.Description), nullString(p.URL), nullString(p.UnitLabel)
		descriptors[i], taxCodes[i] = nullString(p.StatementDescriptor), nullString(p.TaxCode)
		images[i], metadata[i] = jsonb(p.Images), jsonb(p.Metadata)
		created[i] = p.Created.Format(time.RFC3339Nano)
		if p.Shippable != nil {
			shippables[i] = sql.NullBool{Bool: *p.Shippable, Valid: true}
		}
		if dp := p.DefaultPrice; dp != nil {
			priceIDs[i], currencies[i] = sql.NullString{String: dp.ID, Valid: true}, sql.NullString{String: dp.Currency, Valid: true}
			amounts[i], taxBehaviors[i] = sql.NullInt64{Int64: dp.Amount, Valid: true}, nullString(dp.TaxBehavior)
		}
	}
	const q = `WITH k AS (
		SELECT * FROM unnest($1::text[], $2::boolean[], $3::text[], $4::text[], $5::text[], $6::boolean[], $7::jsonb[],
			$8::text[], $9::jsonb[], $10::boolean[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[],
			$16::bigint[], $17::text[], $18::text[])
			AS k (merchant_id, livemode, id, name, description, active, images, url, metadata, shippable, unit_label,
				statement_descriptor, tax_code, price_id, created_at, amount, currency, tax_behavior)
	), prod AS (
		INSERT INTO products (merchant_id, livemode, id, name, description, active, images, url, metadata,
			shippable, unit_label, statement_descriptor, tax_code, default_price_id, created_at, updated_at)
		SELECT merchant_id, livemode, id, name, description, active, images, url, metadata,
			shippable, unit_label, statement_descriptor, tax_code, price_id, created_at, created_at FROM k
	)
	INSERT INTO prices (merchant_id, livemode, id, product_id, amount, currency, tax_behavior, created_at)
	SELECT merchant_id, livemode, price_id, id, amount, currency, tax_behavior, created_at FROM k WHERE price_id IS NOT NULL`
	_, err := s.q.ExecContext(ctx, q, pq.Array(merchants), pq.Array(lives), pq.Array(ids), pq.Array(names),
		pq.Array(descriptions), pq.Array(actives), pq.Array(images), pq.Array(urls), pq.Array(metadata),
		pq.Array(shippables), pq.Array(unitLabels), pq.Array(descriptors), pq.Array(taxCodes), pq.Array(priceIDs),
		pq.Array(created), pq.Array(amounts), pq.Array(currencies), pq.Array(taxBehaviors))
	if err != nil {
		return fmt.Errorf("insert products: %w", err)
	}
	return nil
}

// nullString is p's value, NULL when p is nil.
func nullString(p *string) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *p, Valid: true}
}
