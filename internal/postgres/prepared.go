package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
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
	// (Store.requestSlots), on which a request may prepare a statement.
	spare bool
	stmts sync.Map // query text → *sqlx.Stmt
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
	st, err := p.db.PreparexContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if prev, loaded := p.stmts.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sqlx.Stmt), nil
	}
	return st, nil
}

// inRequest returns the statement to run query with in the request's
// transaction, or nil to run it there unprepared (transaction pooling).
// A query not prepared yet is prepared on the pool first (once per
// process, on a connection the request slots leave free, see
// Store.requestSlots); database/sql then prepares it once on each
// connection it runs on. Most of an idempotent request's cost in
// PostgreSQL was parsing and planning its statements again every time.
// A pool of one connection (no spare) prepares nothing in a request.
func (p *prepared) inRequest(ctx context.Context, rt *requestTx, query string) (*sqlx.Stmt, error) {
	if !p.spare {
		if st, ok := p.stmts.Load(query); ok {
			return rt.tx.StmtxContext(ctx, st.(*sqlx.Stmt)), nil
		}
		return nil, nil
	}
	st, err := p.stmt(ctx, query)
	if err != nil || st == nil {
		return nil, err
	}
	return rt.tx.StmtxContext(ctx, st), nil
}

func (p *prepared) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		if err != nil {
			return err
		}
		if st != nil {
			return st.GetContext(ctx, dest, args...)
		}
		return rt.tx.GetContext(ctx, dest, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return err
	}
	if st == nil {
		return p.db.GetContext(ctx, dest, query, args...)
	}
	return st.GetContext(ctx, dest, args...)
}

func (p *prepared) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		if err != nil {
			return err
		}
		if st != nil {
			return st.SelectContext(ctx, dest, args...)
		}
		return rt.tx.SelectContext(ctx, dest, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return err
	}
	if st == nil {
		return p.db.SelectContext(ctx, dest, query, args...)
	}
	return st.SelectContext(ctx, dest, args...)
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		if err != nil {
			return nil, err
		}
		if st != nil {
			return st.ExecContext(ctx, args...)
		}
		return rt.tx.ExecContext(ctx, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return p.db.ExecContext(ctx, query, args...)
	}
	return st.ExecContext(ctx, args...)
}

// The sqlx.QueryerContext methods, for helpers shared with transactions.

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		if err != nil {
			return nil, err
		}
		if st != nil {
			return st.QueryContext(ctx, args...)
		}
		return rt.tx.QueryContext(ctx, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return p.db.QueryContext(ctx, query, args...)
	}
	return st.QueryContext(ctx, args...)
}

func (p *prepared) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	if rt := requestTxOf(ctx); rt != nil {
		st, err := p.inRequest(ctx, rt, query)
		if err != nil {
			return nil, err
		}
		if st != nil {
			return st.QueryxContext(ctx, args...)
		}
		return rt.tx.QueryxContext(ctx, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return p.db.QueryxContext(ctx, query, args...)
	}
	return st.QueryxContext(ctx, args...)
}

func (p *prepared) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	if rt := requestTxOf(ctx); rt != nil {
		if st, err := p.inRequest(ctx, rt, query); err == nil && st != nil {
			return st.QueryRowxContext(ctx, args...)
		}
		return rt.tx.QueryRowxContext(ctx, query, args...)
	}
	st, err := p.stmt(ctx, query)
	if err != nil || st == nil {
		// Unprepared; or a failed prepare, whose error sqlx.Row can only
		// carry from a query that fails the same way, seen on Scan.
		return p.db.QueryRowxContext(ctx, query, args...)
	}
	return st.QueryRowxContext(ctx, args...)
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
			// Once per text, whatever the outcome: a text that does not
			// prepare (it fails unprepared too) is not tried again.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = p.stmt(ctx, query)
		}()
	}
	return nil
}

// The transaction's query methods, through inTx.

func (tx *txn) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.GetContext(ctx, dest, args...)
	}
	return tx.Tx.GetContext(ctx, dest, query, args...)
}

func (tx *txn) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.SelectContext(ctx, dest, args...)
	}
	return tx.Tx.SelectContext(ctx, dest, query, args...)
}

func (tx *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.Tx.ExecContext(ctx, query, args...)
}

func (tx *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.Tx.QueryContext(ctx, query, args...)
}

func (tx *txn) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.QueryxContext(ctx, args...)
	}
	return tx.Tx.QueryxContext(ctx, query, args...)
}

func (tx *txn) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	if st := tx.prep.inTx(ctx, tx.Tx, query); st != nil {
		return st.QueryRowxContext(ctx, args...)
	}
	return tx.Tx.QueryRowxContext(ctx, query, args...)
}
