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
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the driver

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
}

// OnCommit sets the hook told of new jobs after their transaction commits.
func (s *Store) OnCommit(fn func(ctx context.Context, jobs []payments.Job)) { s.onCommit = fn }

// txn is a transaction and the jobs it created, to enqueue after commit.
type txn struct {
	*sqlx.Tx
	jobs []payments.Job
}

// New returns a Store on db.
func New(db *sqlx.DB) *Store {
	s := &Store{db: db}
	s.q.db = db
	return s
}

// Open connects to url and checks the connection. It turns on lib/pq's
// binary_parameters, which sends a parameterized query in one round trip
// instead of two (parse, then bind): round trips are what the API's
// latency is made of. In that mode []byte parameters are sent as binary,
// so only bytea columns take []byte; JSON is passed as a string.
func Open(ctx context.Context, dsn string, maxConns int) (*sqlx.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	q := u.Query()
	if q.Get("binary_parameters") == "" {
		q.Set("binary_parameters", "yes")
		u.RawQuery = q.Encode()
	}
	db, err := sqlx.Open("postgres", u.String())
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
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

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *txn) error) error {
	sqltx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &txn{Tx: sqltx}
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

// jsonb is a JSON column value, as text (see Open).
func jsonb(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("marshal jsonb: %v", err)) // only maps and slices of strings reach here
	}
	return string(b)
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

// loadCursor finds the starting_after row in the caller's scope; an unknown
// id is a validation_error, not an empty page.
func (s *Store) loadCursor(ctx context.Context, q string, sc payments.Scope, id string) (cursor, error) {
	var c cursor
	err := s.q.GetContext(ctx, &c, q, sc.MerchantID, sc.Live, id)
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
// starting_after row's ($3, $4) = (created_at, id). Both fetch limit+1 rows
// ($3 or $5) to tell whether more exist; conv turns a row into the item.
func keysetPage[R, T any](ctx context.Context, s *Store, sc payments.Scope, lp payments.ListParams, table, first, after string, conv func(R) (T, error)) (payments.Page[T], error) {
	var rows []R
	var err error
	if lp.StartingAfter == "" {
		err = s.q.SelectContext(ctx, &rows, first, sc.MerchantID, sc.Live, lp.Limit+1)
	} else {
		c, cerr := s.loadCursor(ctx, `SELECT created_at, id FROM `+table+` WHERE merchant_id = $1 AND livemode = $2 AND id = $3`, sc, lp.StartingAfter)
		if cerr != nil {
			return payments.Page[T]{}, cerr
		}
		err = s.q.SelectContext(ctx, &rows, after, sc.MerchantID, sc.Live, c.CreatedAt, c.ID, lp.Limit+1)
	}
	if err != nil {
		return payments.Page[T]{}, fmt.Errorf("select %s: %w", table, err)
	}
	out := make([]T, 0, len(rows))
	for _, r := range rows {
		item, err := conv(r)
		if err != nil {
			return payments.Page[T]{}, err
		}
		out = append(out, item)
	}
	return page(out, lp.Limit), nil
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
