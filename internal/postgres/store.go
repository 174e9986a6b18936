// Package postgres implements payments.Store on PostgreSQL with sqlx and
// explicit SQL. Every query on merchant data filters on merchant_id and
// livemode first.
package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the driver

	"paysvc/internal/groupcommit"
	"paysvc/internal/payments"
)

// Store is the PostgreSQL store.
type Store struct {
	db *sqlx.DB
	q  prepared // s.db's queries, prepared once per connection
	// onCommit is told the jobs a transaction created (webhook deliveries,
	// refunds to execute …), after it commits; it enqueues them. Losing the
	// call loses nothing: each job is a row the scheduler's relay finds.
	onCommit func(ctx context.Context, jobs []payments.Job)
	// requestSlots bounds the open request transactions (BeginIdempotent)
	// below the pool's size. A request holds its transaction's connection
	// to the end and may need one more meanwhile (the sandbox's account
	// upsert uses the pool): were every connection held by a request
	// waiting for another, none would ever come back.
	requestSlots chan struct{}
	// productReads, productPages: the product reads and product list pages
	// of concurrent requests, read together (productreads.go).
	productReads groupcommit.Queue[productKey, payments.Product]
	productPages groupcommit.Queue[pageKey, payments.Page[payments.Product]]
	// productCreates: the product creations of concurrent requests, written
	// together (productwrites.go).
	productCreates groupcommit.Queue[productCreate, struct{}]
}

// OnCommit sets the hook told of new jobs after their transaction commits.
func (s *Store) OnCommit(fn func(ctx context.Context, jobs []payments.Job)) { s.onCommit = fn }

// txn is a transaction and the jobs it created, to enqueue after commit.
// Its queries run as the pool's prepared statements once those exist (see
// prepared.inTx); without prep (maintenance's DDL, a request's savepoint)
// they run as sqlx.Tx's.
type txn struct {
	*sqlx.Tx
	jobs []payments.Job
	prep *prepared
}

// New returns a Store on db.
func New(db *sqlx.DB) *Store {
	s := &Store{db: db}
	s.q.db = db
	s.q.unprepared = db.DriverName() == driverUnprepared
	n := db.Stats().MaxOpenConnections
	if n > 0 {
		s.requestSlots = make(chan struct{}, max(1, n-max(1, n/4)))
	}
	// Behind a transaction-mode pooler a free connection of the pool is
	// not a free server connection: those may all be held by transactions,
	// this process's or another replica's, each waiting for one more to
	// prepare a statement on, until the pooler's query_wait_timeout.
	s.q.spare = (n == 0 || n >= 2) && db.DriverName() == driverSession
	s.productReads = groupcommit.Queue[productKey, payments.Product]{
		Run:     groupcommit.AloneOrTogether(maxTogether, s.productAlone, s.readProductsTogether),
		Overlap: overlapAfter, MaxRuns: maxRunsTogether,
	}
	s.productPages = groupcommit.Queue[pageKey, payments.Page[payments.Product]]{
		Run:     groupcommit.AloneOrTogether(maxTogether, s.productsPage, s.readProductPagesTogether),
		Overlap: overlapAfter, MaxRuns: maxRunsTogether,
	}
	s.productCreates = groupcommit.Queue[productCreate, struct{}]{
		Run:     groupcommit.AloneOrTogether(maxTogether, s.createAlone, s.createProductsTogether),
		Overlap: overlapAfter, MaxRuns: maxRunsTogether,
	}
	return s
}

// Pool modes: how DATABASE_URL reaches PostgreSQL (DATABASE_POOL_MODE).
const (
	// PoolSession: each connection is a server session of its own
	// (PostgreSQL directly, or a pooler in session mode).
	PoolSession = "session"
	// PoolTransaction: a pooler in transaction mode (PgBouncer's
	// pool_mode=transaction) hands each transaction, and each statement
	// outside one, to whichever server connection is free. Nothing may
	// rely on session state between them: no named prepared statements,
	// no SET, session advisory lock or LISTEN outside a transaction, and a
	// parameterised query must travel in one round trip.
	PoolTransaction = "transaction"
)

// The sqlx driver names of the pool modes: the pool carries its mode, so
// every Store built on it, a test's included, follows it. driverUnprepared
// is transaction pooling where the Store must not prepare named statements;
// driverPooled is transaction pooling with a pooler that tracks them.
const (
	driverSession    = "postgres"
	driverPooled     = "postgres-pooled"
	driverUnprepared = "postgres-unprepared"
)

func init() {
	sqlx.BindDriver(driverPooled, sqlx.DOLLAR)
	sqlx.BindDriver(driverUnprepared, sqlx.DOLLAR)
}

// Open connects to url in session mode and checks the connection; see OpenMode.
func Open(ctx context.Context, dsn string, maxConns int) (*sqlx.DB, error) {
	return OpenMode(ctx, dsn, maxConns, PoolSession, true)
}

// OpenMode connects to url and checks the connection. It turns on lib/pq's
// binary_parameters, which sends a parameterized query in one round trip
// (parse, bind and execute) instead of two (parse, then bind): round trips
// are what the API's latency is made of, and through a transaction-mode
// pooler the second trip may reach another server connection, which then
// runs another client's statement with these parameters, silently. In that
// mode []byte parameters are sent as binary, so only bytea columns take
// []byte; JSON is passed as a string. Under PoolTransaction the pool never
// prepares named statements unless prepare says the pooler tracks them
// (PgBouncer 1.21 or later with max_prepared_statements > 0), and
// binary_parameters=no is refused.
func OpenMode(ctx context.Context, dsn string, maxConns int, mode string, prepare bool) (*sqlx.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	q := u.Query()
	switch bp := q.Get("binary_parameters"); {
	case bp == "":
		q.Set("binary_parameters", "yes")
		u.RawQuery = q.Encode()
	case bp != "yes" && mode == PoolTransaction:
		return nil, errors.New("database url: binary_parameters must be yes in transaction pool mode (one round trip per query)")
	}
	driver := driverSession
	switch {
	case mode == PoolTransaction && prepare:
		driver = driverPooled
	case mode == PoolTransaction:
		driver = driverUnprepared
	}
	sqldb, err := sql.Open("postgres", u.String())
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db := sqlx.NewDb(sqldb, driver)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return db, nil
}

// DB returns the underlying handle, for health checks.
func (s *Store) DB() *sqlx.DB { return s.db }

// inTx runs fn in a transaction, committing when it returns nil. Within an
// idempotent request (ctx from BeginIdempotent) it joins the request's
// transaction instead (requestTx.savepoint).
func (s *Store) inTx(ctx context.Context, fn func(tx *txn) error) error {
	if rt := requestTxOf(ctx); rt != nil {
		return rt.savepoint(ctx, fn)
	}
	sqltx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &txn{Tx: sqltx, prep: &s.q}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if len(tx.jobs) > 0 && s.onCommit != nil {
		s.onCommit(ctx, tx.jobs)
	}
	return nil
}

// InRequest runs fn for code outside the store that keeps tables of its
// own (the sandbox processor's): under a savepoint of the idempotent
// request's transaction when ctx carries one (BeginIdempotent), reporting
// true, and on the pool otherwise. A request holding a connection must
// not wait for a second: behind a transaction-mode pooler every server
// connection may be held by requests waiting the same way. What fn
// writes in a request commits or rolls back with it.
func (s *Store) InRequest(ctx context.Context, fn func(q sqlx.ExtContext) error) (inRequest bool, err error) {
	rt := requestTxOf(ctx)
	if rt == nil {
		return false, fn(s.db)
	}
	return true, rt.savepoint(ctx, func(tx *txn) error { return fn(tx.Tx) })
}

// requestTx is the one transaction of an idempotent request, from
// BeginIdempotent to EndRequest, carried in its context. Every query the
// store runs with that context runs in it, on its connection: the change,
// the reads around it and the stored response commit together, and a
// request never waits for a second connection while holding one.
type requestTx struct {
	tx   *sqlx.Tx
	jobs []payments.Job // of the savepoints that succeeded, enqueued after the commit
	done bool
	// keyCreated is the claimed Idempotency-Key's created_at (its partition).
	keyCreated time.Time
}

type requestTxKey struct{}

// requestTxOf returns ctx's open request transaction, or nil.
func requestTxOf(ctx context.Context) *requestTx {
	rt, _ := ctx.Value(requestTxKey{}).(*requestTx)
	if rt == nil || rt.done {
		return nil
	}
	return rt
}

// savepoint runs fn under a savepoint of the request's transaction. An
// error of fn rolls back fn's writes alone, as its own transaction would:
// the request still answers (a 4xx such as insufficient_balance), and that
// answer is stored under the key in the same transaction. The savepoint is
// not released on success — the commit releases it, and RELEASE would cost
// a round trip; a later savepoint of the same name hides it, and ROLLBACK
// TO goes back to the latest one. fn's jobs wait for the request's commit.
func (rt *requestTx) savepoint(ctx context.Context, fn func(tx *txn) error) error {
	if _, err := rt.tx.ExecContext(ctx, `SAVEPOINT store`); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	tx := &txn{Tx: rt.tx}
	if err := fn(tx); err != nil {
		if _, rerr := rt.tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT store`); rerr != nil {
			// The request's transaction is unusable now: its response
			// cannot be stored, so the request fails as a whole.
			return fmt.Errorf("rollback to savepoint after %v: %w", err, rerr)
		}
		return err
	}
	rt.jobs = append(rt.jobs, tx.jobs...)
	return nil
}

// EndRequest ends the request transaction of ctx (from BeginIdempotent):
// it commits it, then enqueues the jobs its change created, or rolls it
// back (commit false), which also undoes the key's claim so a retry runs
// again. Ending it twice, or a ctx without one, is a no-op.
func (s *Store) EndRequest(ctx context.Context, commit bool) error {
	rt := requestTxOf(ctx)
	if rt == nil {
		return nil
	}
	rt.done = true
	defer s.releaseRequestSlot()
	if !commit {
		if err := rt.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			return fmt.Errorf("rollback: %w", err)
		}
		return nil
	}
	if err := rt.tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if len(rt.jobs) > 0 && s.onCommit != nil {
		s.onCommit(ctx, rt.jobs) // rt is done: nothing with ctx runs in it any more
	}
	return nil
}

func (s *Store) acquireRequestSlot(ctx context.Context) error {
	if s.requestSlots == nil {
		return nil
	}
	select {
	case s.requestSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) releaseRequestSlot() {
	if s.requestSlots != nil {
		<-s.requestSlots
	}
}

// jsonb is a JSON column value, as text (see Open).
func jsonb(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal jsonb: %v", err)) // only maps and slices of strings reach here
	}
	return string(b)
}

// unmarshalJSONB decodes a jsonb column into a slice or map, the columns'
// defaults ([] and {}, as PostgreSQL prints them) without the decoder: most
// products and objects have no images or metadata, and decoding nothing
// was a visible part of reading a list page.
func unmarshalJSONB[T any](b []byte, v *T) error {
	switch p := any(v).(type) {
	case *[]string:
		if string(b) == "[]" {
			*p = []string{}
			return nil
		}
	case *map[string]string:
		if string(b) == "{}" {
			*p = map[string]string{}
			return nil
		}
	}
	return json.Unmarshal(b, v)
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func strPtr(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

func boolPtr(b sql.NullBool) *bool {
	if !b.Valid {
		return nil
	}
	return &b.Bool
}

// cursor is the position of a starting_after id: lists continue strictly
// after it in (created_at DESC, id DESC) order.
type cursor struct {
	CreatedAt time.Time `db:"created_at"`
	ID        string    `db:"id"`
}

// loadCursor finds the starting_after row in the caller's scope (q's $1
// to $3, then more); an unknown id is a validation_error, not an empty page.
func (s *Store) loadCursor(ctx context.Context, q string, sc payments.Scope, id string, more ...any) (cursor, error) {
	var c cursor
	err := s.q.GetContext(ctx, &c, q, append([]any{sc.MerchantID, sc.Live, id}, more...)...)
	if errors.Is(err, sql.ErrNoRows) {
		return c, payments.Invalid("starting_after", "is not a known id: '%s'", id)
	}
	if err != nil {
		return c, fmt.Errorf("select cursor: %w", err)
	}
	return c, nil
}

// keysetPage runs one page of a list, newest first: the query first when
// there is no cursor, else after, which continues strictly after the
// starting_after row's ($3, $4) = (created_at, id). Both are written
// without their LIMIT (selectPage adds it) and fetch limit+1 rows to tell
// whether more exist; conv turns a row into the item.
func keysetPage[R, T any](ctx context.Context, s *Store, sc payments.Scope, lp payments.ListParams, table, first, after string, conv func(R) (T, error)) (payments.Page[T], error) {
	var rows []R
	var err error
	if lp.StartingAfter == "" {
		err = selectPage(ctx, &s.q, &rows, first, lp.Limit, sc.MerchantID, sc.Live)
	} else {
		c, cerr := s.loadCursor(ctx, `SELECT created_at, id FROM `+table+` WHERE merchant_id = $1 AND livemode = $2 AND id = $3`, sc, lp.StartingAfter)
		if cerr != nil {
			return payments.Page[T]{}, cerr
		}
		err = selectPage(ctx, &s.q, &rows, after, lp.Limit, sc.MerchantID, sc.Live, c.CreatedAt, c.ID)
	}
	if err != nil {
		return payments.Page[T]{}, fmt.Errorf("select %s: %w", table, err)
	}
	return pageOf(rows, lp.Limit, conv)
}

// pageOf is the page of limit items that rows, a limit+1 result or longer,
// start with: the rows past limit+1 are not converted.
func pageOf[R, T any](rows []R, limit int, conv func(R) (T, error)) (payments.Page[T], error) {
	rows = rows[:min(len(rows), limit+1)]
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		item, err := conv(r)
		if err != nil {
			return payments.Page[T]{}, err
		}
		out = append(out, item)
	}
	return page(out, limit), nil
}

// scanner is a row type that lists its fields in its query's column order.
type scanner interface{ dests() []any }

// pageRows are the LIMITs a page query runs with: the smallest that holds
// the page and the one row after it (the defaults and the usual choices,
// 10, 20, 25, 50 and 100, fetch no row more than they need).
var pageRows = [...]int{11, 21, 26, 51, 101}

// statementTexts holds statement texts built from a key, each built once:
// the variants of a query (a LIMIT, a filter, a cursor) are few, and
// building one per request was garbage and a fresh prepared-statement
// cache key each time.
type statementTexts[K comparable] struct{ m sync.Map }

// get returns k's text, built by build the first time.
func (c *statementTexts[K]) get(k K, build func() string) string {
	if q, ok := c.m.Load(k); ok {
		return q.(string)
	}
	q, _ := c.m.LoadOrStore(k, build())
	return q.(string)
}

// pageTexts holds each page query's texts, one per query and pageRows.
var pageTexts statementTexts[pageText]

type pageText struct {
	query string // without its LIMIT
	rows  int
}

// selectPage selects the first limit+1 rows of query, a page query
// written without its LIMIT, into rows: page trims them to limit.
//
// The LIMIT is a constant of the statement's text, not a parameter. With
// LIMIT $n, the generic plan of a prepared statement is costed as if it
// returned a tenth of the merchant's rows, far above any custom plan for
// one page, so PostgreSQL never keeps it and plans the query again on every
// call: for a page of products that planning cost the database more CPU
// (0.3 ms) than running the query. With a constant the generic plan costs
// what a custom one does and the statement is planned once per connection.
// The limit is rounded up to one of pageRows so that a query stays a few
// statements, not a hundred; the rows past limit+1 are not scanned.
func selectPage[R any](ctx context.Context, q *prepared, rows *[]R, query string, limit int, args ...any) error {
	n := pageSize(limit)
	text := func() string { return query + " LIMIT " + strconv.Itoa(n) }
	if !slices.Contains(pageRows[:], n) { // beyond any page the API serves: not kept
		return scanRows(ctx, q, rows, limit+1, text(), args...)
	}
	return scanRows(ctx, q, rows, limit+1, pageTexts.get(pageText{query, n}, text), args...)
}

// pageSize is the LIMIT of a page of limit rows: the smallest of pageRows that holds the page and the row after it, or
// limit+1 beyond any page the API serves.
func pageSize(limit int) int {
	for _, n := range pageRows {
		if n >= limit+1 {
			return n
		}
	}
	return limit + 1
}

// scanRows selects query's rows into rows, at most max of them, through
// R's dests when *R has them instead of sqlx's reflection.
func scanRows[R any](ctx context.Context, q *prepared, rows *[]R, max int, query string, args ...any) error {
	var probe R
	if _, ok := any(&probe).(scanner); !ok {
		if err := q.SelectContext(ctx, rows, query, args...); err != nil {
			return err
		}
		if len(*rows) > max {
			*rows = (*rows)[:max]
		}
		return nil
	}
	rs, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	// One row's dests for them all: Scan sets every field of r on each row
	// (NULL included), and []byte columns come as copies.
	var r R
	dests := any(&r).(scanner).dests()
	for len(*rows) < max && rs.Next() {
		if err := rs.Scan(dests...); err != nil {
			return err
		}
		*rows = append(*rows, r)
	}
	return rs.Err()
}

// page trims a limit+1 result to limit and reports whether more exist.
func page[T any](items []T, limit int) payments.Page[T] {
	if len(items) > limit {
		return payments.Page[T]{Data: items[:limit], HasMore: true}
	}
	if items == nil {
		items = []T{}
	}
	return payments.Page[T]{Data: items}
}
