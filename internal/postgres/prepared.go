package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/jmoiron/sqlx"
)

// prepared runs queries outside transactions as prepared statements, each
// prepared once per connection and cached by its text. A prepared statement
// skips PostgreSQL's parse and plan on every call: on a small machine where
// the database's CPU is the limit, that is most of a simple query's cost.
// It offers sqlx.DB's query methods, so call sites read the same.
type prepared struct {
	db    *sqlx.DB
	stmts sync.Map // query text → *sqlx.Stmt
}

func (p *prepared) stmt(ctx context.Context, query string) (*sqlx.Stmt, error) {
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

func (p *prepared) GetContext(ctx context.Context, dest any, query string, args ...any) error {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return err
	}
	return st.GetContext(ctx, dest, args...)
}

func (p *prepared) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return err
	}
	return st.SelectContext(ctx, dest, args...)
}

func (p *prepared) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// The sqlx.QueryerContext methods, for helpers shared with transactions.

func (p *prepared) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (p *prepared) QueryxContext(ctx context.Context, query string, args ...any) (*sqlx.Rows, error) {
	st, err := p.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryxContext(ctx, args...)
}

func (p *prepared) QueryRowxContext(ctx context.Context, query string, args ...any) *sqlx.Row {
	st, err := p.stmt(ctx, query)
	if err != nil {
		// sqlx.Row carries its error; build one through a query that fails
		// the same way, so callers see err on Scan.
		return p.db.QueryRowxContext(ctx, query, args...)
	}
	return st.QueryRowxContext(ctx, args...)
}
