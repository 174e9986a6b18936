-- +goose Up
-- products_by_keys is the shared product read (postgres productsByKeys:
-- the products of (merchant, livemode, id) keys, each row with its key's
-- ordinal, the default price joined) as a PL/pgSQL function, for a pool
-- that prepares nothing: behind a transaction-mode pooler without
-- prepared statements (PgBouncer before 1.21) PostgreSQL parses and plans
-- every statement afresh, and for this join planning cost more than
-- running it (about 150 µs against 40 µs for one product). A PL/pgSQL
-- function's query is planned on a server connection's first calls and
-- the plan kept, as a prepared statement's is, so only the call is
-- planned (deploy/bench/results.md, "GET by id through PgBouncer").
-- The columns are productCols' in the same order; TestProductsByKeysFunction
-- checks that both read the same.
-- +goose StatementBegin
CREATE FUNCTION products_by_keys(p_merchants text[], p_lives boolean[], p_ids text[])
RETURNS TABLE (i bigint, id text, livemode boolean, name text, description text, active boolean,
    images jsonb, url text, metadata jsonb, shippable boolean, unit_label text,
    statement_descriptor text, tax_code text, created_at timestamptz,
    price_id text, price_amount bigint, price_currency text, price_tax_behavior text,
    price_created_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY SELECT k.i, p.id, p.livemode, p.name, p.description, p.active, p.images, p.url,
        p.metadata, p.shippable, p.unit_label, p.statement_descriptor, p.tax_code, p.created_at,
        dp.id, dp.amount, dp.currency, dp.tax_behavior, dp.created_at
    FROM unnest(p_merchants, p_lives, p_ids) WITH ORDINALITY AS k (merchant_id, livemode, id, i)
    JOIN products p ON p.merchant_id = k.merchant_id AND p.livemode = k.livemode AND p.id = k.id
    LEFT JOIN prices dp ON dp.id = p.default_price_id;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION products_by_keys(text[], boolean[], text[]);
