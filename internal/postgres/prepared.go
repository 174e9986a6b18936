package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"golang.org/x/sync/singleflight"
)

// prepared runs queries outside transactions as prepared statements, each
// prepared once per connection and cached by its text. A prepared statement
// skips PostgreSQL's parse and plan on every call: on a small machine where
// the database's CPU is the limit, that is most of a simple query's cost.
// It offers sqlx.DB's query methods, so call sites read the same.
//
// With the context of an idempotent request (requestTx) the query runs in
// the request's transaction instead, on its connection, on the pool's
// statement (see inRequest).
//
// Behind a transaction-mode pooler (unprepared) nothing is prepared: a named
// statement lives on one server connection, and the pooler sends the next
// query to any. Queries then run as sqlx.DB's, each in one round trip
// (binary_parameters, see OpenMode).
type prepared struct {
	db         *sqlx.DB
	unprepared bool
	// spare: the pool keeps a connection free of request transactions
	// (Store.requestSlots), on which a request may prepare a statement;
	// never behind a transaction-mode pooler, whose server connections
	// may all be held though the pool's are free (see New).
	spare bool
	stmts sync.Map // query text → *sqlx.Stmt
	// preparing: one prepare per text at a time. Callers of a text not
	// prepared yet share it instead of each preparing it and closing the
	// statements that lost the race: database/sql holds the pool's lock
	// while a closed statement's Close round trip runs, and behind a
	// transaction-mode pooler that round trip waits for a server
	// connection, which transactions hold while they wait for that lock
	// to commit (the pooled tests with prepared statements hung there).
	preparing singleflight.Group
	// warming: query texts a transaction asked for, prepared (or failed
	// to) in the background; see inTx.
	warming sync.Map
}

// stmt returns query's statement, or nil when the pool must not prepare.
func (p *prepared) stmt(ctx context.Context, query string) (*sqlx.Stmt, error) {
	if p.unprepared {
		return nil, nil
	}
	if st, ok := p.stmts.Load(query); ok {
		return st.(*sqlx.Stmt), nil
	}
	done := p.preparing.DoChan(query, func() (any, error) {
		if st, ok := p.stmts.Load(query); ok { // stored since the caller looked
			return st, nil
		}
		// Not the first caller's deadline: the others wait for it too.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), prepareTimeout)
		defer cancel()
		st, err := p.db.PreparexContext(ctx, query)
		if err != nil {
			return nil, err
		}
		p.stmts.Store(query, st)
		return st, nil
	})
	select {
	case r := <-done:
		if r.Err != nil {
			return nil, fmt.Errorf("prepare: %w", r.Err)
		}
		return r.Val.(*sqlx.Stmt), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prepareTimeout bounds a shared prepare (stmt), whose callers may each
// give up sooner on their own contexts.
const prepareTimeout = 10 * time.Second

// inRequest returns the statement to run query with in the request's
// transaction, or nil to run it there unprepared (transaction pooling).
// A query not prepared yet is prepared on the pool first (once per
// process, on a connection the request slots leave free, see
// Store.requestSlots); database/sql then prepares it once on each
// connection it runs on. Most of an idempotent request's cost in
// PostgreSQL was parsing and planning its statements again every time.
// Without a spare connection (a pool of one, or behind a transaction-mode
// pooler) a request does not wait for one: as in a store transaction
// (inTx), a query not prepared yet runs unprepared and is prepared in the
// background.
func (p *prepared) inRequest(ctx context.Context, rt *requestTx, query string) (*sqlx.Stmt, error) {
	if !p.spare { // a pool that prepares nothing has none either: inTx says nil
		return p.inTx(ctx, rt.tx, query), nil
	}
	st, err := p.stmt(ctx, query)
	if err != nil || st == nil {
		return nil, err
	}
	return rt.tx.StmtxContext(ctx, st), nil
}

// queryer runs a query by its text: the pool, or a transaction.
type queryer interface {
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error)
	QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row
}

// routed is where one query runs: as st when there is one, else by its
// text on q.
type routed struct {
	st    *sqlx.Stmt
	q     queryer
	query string
}

func (r routed) GetContext(ctx context.Context, dest any, args ...any) error {
	if r.st != nil {
		return r.st.GetContext(ctx, dest, args...)
	}
	return r.q.GetContext(ctx, dest, r.query, args...)
}

func (r routed) SelectContext(ctx context.Context, dest any, args ...any) error {
	if r.st != nil {
		return r.st.SelectContext(ctx, dest, args...)
	}
	return r.q.SelectContext(ctx, dest, r.query, args...)
}

func (r routed) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	if r.st != nil {
		return r.st.ExecContext(ctx, args...)
	}
	return r.q.ExecContext(ctx, r.query, args...)
}

func (r routed) QueryContext(ctx context.Context, args ...any) (*sql.Rows, error) {
	if r.st != nil {
		return r.st.QueryContext(ctx, args...)
	}
	return r.q.QueryContext(ctx, r.query, args...)
}

func (r routed) QueryxContext(ctx context.Context, args ...any) (*sqlx.Rows, error) {
	if r.st != nil {
		return r.st.QueryxContext(ctx, args...)
	}
	return r.q.QueryxContext(ctx, r.query, args...)
}

func (r routed) QueryRowxContext(ctx context.Context, args ...any) *sqlx.Row {
	if r.st != nil {
		return r.st.QueryRowxContext(ctx, args...)
	}
	return r.q.QueryRowxContext(ctx, r.query, args...)
}

// route returns where query runs: in ctx's request transaction (see
// inRequest) or on the pool, prepared unless the pool must not prepare.
// On an error the route is still usable, unprepared.
func (p *prepared) route(ctx context.Context, query string) (routed, error) {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		return routed{st: st, q: rt.tx, query: query}, err
	}
	st, err := p.stmt(ctx, query)
	return routed{st: st, q: p.db, query: query}, err
}

func (p *prepared) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	r, err := p.route(ctx, query)
	if err != nil {
		return err
	}
	return r.GetContext(ctx, dest, args...)
}

func (p *prepared) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	r, err := p.route(ctx, query)
	if err != nil {
		return err
	}
	return r.SelectContext(ctx, dest, args...)
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := p.route(ctx, query)
	if err != nil {
		return nil, err
	}
	return r.ExecContext(ctx, args...)
}

// The sqlx.QueryerContext methods, for helpers shared with transactions.

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r, err := p.route(ctx, query)
	if err != nil {
		return nil, err
	}
	return r.QueryContext(ctx, args...)
}

func (p *prepared) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	r, err := p.route(ctx, query)
	if err != nil {
		return nil, err
	}
	return r.QueryxContext(ctx, args...)
}

func (p *prepared) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	// A failed prepare's error could only reach sqlx.Row from a query
	// failing the same way, seen on Scan: this one runs unprepared.
	r, _ := p.route(ctx, query)
	return r.QueryRowxContext(ctx, args...)
}

// inTx returns the statement to run query with in tx, a store transaction
// (Store.inTx), or nil to run it there unprepared. A query the pool has
// prepared runs as that statement, which database/sql prepares once on
// each connection: the transaction's statements skip PostgreSQL's parse
// and plan as the ones outside transactions do (a confirm's eight
// statements spent about 0.4 ms of the database's CPU planning each time).
// A query not prepared yet runs unprepared this time and is prepared on the
// pool in the background: the transaction holds its connection and must
// not wait for a second one, which every other transaction may be holding.
func (p *prepared) inTx(ctx context.Context, tx *sqlx.Tx, query string) *sqlx.Stmt {
	if p == nil || p.unprepared {
		return nil
	}
	if st, ok := p.stmts.Load(query); ok {
		return tx.StmtxContext(ctx, st.(*sqlx.Stmt))
	}
	if _, started := p.warming.LoadOrStore(query, true); !started {
		go func() {
			// Once per text: a text PostgreSQL refuses to prepare (it
			// fails unprepared too) is not tried again. Any other failure
			// (a timeout, a lost connection) lets a later call try again:
			// behind a transaction-mode pooler requests prepare only here.
			ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
			defer cancel()
			if _, err := p.stmt(ctx, query); err != nil && !errors.As(err, new(*pq.Error)) {
				p.warming.Delete(query)
			}
		}()
	}
	return nil
}

// The transaction's query methods, through inTx.

func (tx *txn) route(ctx context.Context, query string) routed {
	return routed{st: tx.prep.inTx(ctx, tx.Tx, query), q: tx.Tx, query: query}
}

func (tx *txn) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	return tx.route(ctx, query).GetContext(ctx, dest, args...)
}

func (tx *txn) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	return tx.route(ctx, query).SelectContext(ctx, dest, args...)
}

func (tx *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return tx.route(ctx, query).ExecContext(ctx, args...)
}

func (tx *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return tx.route(ctx, query).QueryContext(ctx, args...)
}

func (tx *txn) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	return tx.route(ctx, query).QueryxContext(ctx, args...)
}

func (tx *txn) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	return tx.route(ctx, query).QueryRowxContext(ctx, args...)
}
