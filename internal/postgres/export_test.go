package postgres

import (
	"context"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
)

// InTx exposes inTx to the tests of postgres_test: fn gets the transaction
// and a function that records a job for after the commit.
func (s *Store) InTx(ctx context.Context, fn func(tx *sqlx.Tx, addJob func(payments.Job)) error) error {
	return s.inTx(ctx, func(tx *txn) error {
		return fn(tx.Tx, func(j payments.Job) { tx.jobs = append(tx.jobs, j) })
	})
}
