package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"

	"paysvc/migrations"
)

// Migrate applies every pending migration; it is idempotent.
func Migrate(ctx context.Context, db *sql.DB) ([]*goose.MigrationResult, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	return res, nil
}
