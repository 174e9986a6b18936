-- +goose Up
-- products_by_keys and product_pages are the shared product reads
-- (postgres productsByKeys and productPagesText) as PL/pgSQL functions, for
-- a pool that prepares nothing: behind a transaction-mode pooler without
-- prepared statements (PgBouncer before 1.21) PostgreSQL parses and plans
-- every statement afresh, and for these joins planning cost more than
-- running them (about 150 µs against 40 µs for one product, 176 µs against
-- 81 µs for a statement of first pages). A PL/pgSQL function's queries are
-- planned on a server connection's first calls and the plans kept, as a
-- prepared statement's are, so only the call is planned
-- (deploy/bench/results.md, "Back to back through PgBouncer, and product
-- reads planned on every statement there"). A database without them is
-- read with the plain statements (postgres scanThrough).
-- Their columns are productCols' in the same order; TestProductsByKeysFunction
-- and TestConcurrentProductPagesShareStatements check that they read the same.
-- product_read is a row of both: its key's ordinal, then productCols.
CREATE TYPE product_read AS (i bigint, id text, livemode boolean, name text, description text,
    active boolean, images jsonb, url text, metadata jsonb, shippable boolean, unit_label text,
    statement_descriptor text, tax_code text, created_at timestamptz,
    price_id text, price_amount bigint, price_currency text, price_tax_behavior text,
    price_created_at timestamptz);

-- +goose StatementBegin
CREATE FUNCTION products_by_keys(p_merchants text[], p_lives boolean[], p_ids text[])
RETURNS SETOF product_read
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

-- product_pages: the page of each (merchant, livemode) key, newest first,
-- after the key's cursor product when p_afters is not NULL, p_rows rows
-- each (a pageRows size: the page and the row after it). The plans are
-- generic: the direct statements carry their LIMIT as a constant, so their
-- generic plans fetch a page's rows; a parameter's LIMIT is estimated at a
-- tenth of the rows, which makes every generic plan look dearer than a
-- custom one and would plan each call again. The generic plan is the same
-- nested loop of index scans (EXPLAIN on 100,000 products of a merchant).
-- +goose StatementBegin
CREATE FUNCTION product_pages(p_merchants text[], p_lives boolean[], p_afters text[], p_rows integer)
RETURNS SETOF product_read
LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF p_afters IS NULL THEN
        RETURN QUERY SELECT k.i, pg.* FROM unnest(p_merchants, p_lives) WITH ORDINALITY AS k (merchant_id, livemode, i)
        CROSS JOIN LATERAL (SELECT p.id, p.livemode, p.name, p.description, p.active, p.images, p.url,
                p.metadata, p.shippable, p.unit_label, p.statement_descriptor, p.tax_code, p.created_at,
                dp.id AS price_id, dp.amount AS price_amount, dp.currency AS price_currency,
                dp.tax_behavior AS price_tax_behavior, dp.created_at AS price_created_at
            FROM products p LEFT JOIN prices dp ON dp.id = p.default_price_id
            WHERE p.merchant_id = k.merchant_id AND p.livemode = k.livemode
            ORDER BY p.created_at DESC, p.id DESC LIMIT p_rows) pg
        ORDER BY k.i, pg.created_at DESC, pg.id DESC;
    ELSE
        RETURN QUERY SELECT k.i, pg.* FROM unnest(p_merchants, p_lives, p_afters) WITH ORDINALITY AS k (merchant_id, livemode, after, i)
        CROSS JOIN LATERAL (SELECT c.created_at, c.id FROM products c
            WHERE c.merchant_id = k.merchant_id AND c.livemode = k.livemode AND c.id = k.after) c
        CROSS JOIN LATERAL (SELECT p.id, p.livemode, p.name, p.description, p.active, p.images, p.url,
                p.metadata, p.shippable, p.unit_label, p.statement_descriptor, p.tax_code, p.created_at,
                dp.id AS price_id, dp.amount AS price_amount, dp.currency AS price_currency,
                dp.tax_behavior AS price_tax_behavior, dp.created_at AS price_created_at
            FROM products p LEFT JOIN prices dp ON dp.id = p.default_price_id
            WHERE p.merchant_id = k.merchant_id AND p.livemode = k.livemode AND (p.created_at, p.id) < (c.created_at, c.id)
            ORDER BY p.created_at DESC, p.id DESC LIMIT p_rows) pg
        ORDER BY k.i, pg.created_at DESC, pg.id DESC;
    END IF;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION product_pages(text[], boolean[], text[], integer);
DROP FUNCTION products_by_keys(text[], boolean[], text[]);
DROP TYPE product_read;
