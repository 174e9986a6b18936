package postgres

import (
	"context"
	"database/sql"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"paysvc/internal/groupcommit"
	"paysvc/internal/payments"
)

// InTx exposes inTx to the tests of postgres_test: fn gets the transaction
// and a function that records a job for after the commit.
func (s *Store) InTx(ctx context.Context, fn func(tx *sqlx.Tx, addJob func(payments.Job)) error) error {
	return s.inTx(ctx, func(tx *txn) error {
		return fn(tx.Tx, func(j payments.Job) { tx.jobs = append(tx.jobs, j) })
	})
}

// InTxPrepared runs query in a store transaction through the
// transaction's own methods, then reports whether that transaction's
// connection holds query as a prepared statement.
func (s *Store) InTxPrepared(ctx context.Context, query string, args ...any) (prepared bool, err error) {
	err = s.inTx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
		return tx.Tx.GetContext(ctx, &prepared, `SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE statement = $1)`, query)
	})
	return prepared, err
}

// Prepare prepares query on the pool as the store's statements are (the
// statement, shared by its callers), without running it.
func (s *Store) Prepare(ctx context.Context, query string) error {
	_, err := s.q.stmt(ctx, query)
	return err
}

// IndexPartition exposes indexPartition (migrations 0018 and 0019).
func IndexPartition(ctx context.Context, db *sql.DB, table, name, def, part string) error {
	return indexPartition(ctx, db, table, name, def, part)
}

// DropEmptied exposes dropEmptied: table is not quoted.
func (s *Store) DropEmptied(ctx context.Context, table string) error {
	return s.dropEmptied(ctx, true, pq.QuoteIdentifier(table))
}

// CountProductReadRuns, CountProductPageRuns and CountProductCreateRuns
// count the runs of the store's product queues from now on, and the calls
// they answered. Call them before any call.
func (s *Store) CountProductReadRuns() (runs, reads *atomic.Int64) { return countRuns(&s.productReads) }
func (s *Store) CountProductPageRuns() (runs, reads *atomic.Int64) { return countRuns(&s.productPages) }
func (s *Store) CountProductCreateRuns() (runs, creates *atomic.Int64) {
	return countRuns(&s.productCreates)
}

func countRuns[In, Out any](q *groupcommit.Queue[In, Out]) (runs, calls *atomic.Int64) {
	runs, calls = new(atomic.Int64), new(atomic.Int64)
	run := q.Run
	q.Run = func(cs []*groupcommit.Call[In, Out]) {
		runs.Add(1)
		calls.Add(int64(len(cs)))
		run(cs)
	}
	return runs, calls
}
