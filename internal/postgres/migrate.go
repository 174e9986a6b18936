package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"paysvc/migrations"
)

// Migrate applies every pending migration; it is idempotent.
func Migrate(ctx context.Context, db *sql.DB) ([]*goose.MigrationResult, error) {
	// Two pods starting at once (the migration Job run twice, or a deploy
	// racing a manual `api migrate`) must not both apply a migration: the
	// run holds a session advisory lock (goose's lock id) on one connection
	// of db for its whole length; a second run waits for it, polling every
	// second for up to 10 minutes, then finds nothing left to apply. db must
	// be a direct connection (DATABASE_DIRECT_URL): a transaction-mode
	// pooler does not keep a session lock.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	return res, nil
}
