package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
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
	p, err := Migrations(db, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	return res, nil
}

// Migrations returns a goose provider of every migration: the SQL files of
// migrations/ and the Go ones. db needs two connections or more: goose
// runs a Go migration on db beside the connection it holds.
func Migrations(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, append(opts, goose.WithGoMigrations(goMigrations()...))...)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

// goMigrations are the migrations that cannot be one SQL file run in a
// transaction: each is numbered among the files of migrations/ (which say
// so where their number would be) and is idempotent, since goose records
// a migration run outside a transaction only once it is done.
func goMigrations() []*goose.Migration {
	return []*goose.Migration{
		// 0018: events_type serves a type-filtered page of GET /v1/events
		// (Store.EventPage): one index walk per type, newest first.
		goose.NewGoMigration(18, &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			return partitionedIndex(ctx, db, "events", "events_type", "(merchant_id, livemode, type, created_at DESC, id DESC)")
		}}, nil),
		// 0019: webhook_deliveries_failed serves an endpoint's delivery log
		// filtered to failed (Store.EndpointDeliveries). Only failed
		// deliveries have an entry, so a delivery costs it nothing until
		// it fails: with pending ones too (status <> 'succeeded') every
		// delivery got an entry when written, 12% fewer deliveries a second
		// in paired bench runs. A pending page has webhook_deliveries_pending.
		goose.NewGoMigration(19, &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			return partitionedIndex(ctx, db, "webhook_deliveries", "webhook_deliveries_failed",
				"(merchant_id, livemode, endpoint_id, created_at DESC, id DESC) WHERE status = 'failed'")
		}}, nil),
	}
}

// partitionedIndex creates index name on the partitioned table, def its
// columns and any predicate, without blocking writes to it for the length of the build,
// which on a large table is minutes: CREATE INDEX on a partitioned table
// cannot be CONCURRENTLY and would hold off every insert of an event (and
// so every payment) until done. Instead the parent's index is made ON ONLY
// (invalid: no query uses it, and every partition created from now on gets
// its own index with it), each partition's index is built CONCURRENTLY and
// attached, and the parent's becomes valid with the last one. A partition
// dropped meanwhile by partition maintenance is skipped, one it replaced
// (a move's new default partition) keeps the index its creation gave it
// (indexPartition), and one left with an invalid index by a build that
// failed half-way is built again.
func partitionedIndex(ctx context.Context, db *sql.DB, table, name, def string) error {
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON ONLY %s %s`,
		pq.QuoteIdentifier(name), pq.QuoteIdentifier(table), def)); err != nil {
		return fmt.Errorf("create index %s: %w", name, err)
	}
	// Every partition, those indexed already too: attaching again the
	// index a partition's creation attached is what makes the parent
	// valid when that partition was the last one (a run cut short, then a
	// move that replaced the default partition).
	x := sqlx.NewDb(db, "postgres")
	var parts []string
	if err := x.SelectContext(ctx, &parts, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY c.relname`, table); err != nil {
		return fmt.Errorf("list partitions of %s: %w", table, err)
	}
	for _, part := range parts {
		if err := indexPartition(ctx, db, table, name, def, part); err != nil {
			return err
		}
	}
	var valid bool
	if err := x.GetContext(ctx, &valid, `SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass`, name); err != nil {
		return fmt.Errorf("index %s: %w", name, err)
	}
	if !valid {
		return fmt.Errorf("index %s: still invalid after indexing every partition of %s", name, table)
	}
	return nil
}

// indexPartition builds and attaches the index of partitioned index name
// (def its columns) on table's partition part, unless part has one
// attached already. Partition maintenance may replace part meanwhile: a
// move's swap gives the table a new default partition under the same
// name, created with every index of the parent, this one included. So the
// partition is looked at just before the build, and an ATTACH that finds
// another index attached since drops the one built here. An index
// attached already is attached again, which does nothing but make the
// parent valid when it was the last one: only an ATTACH does that.
func indexPartition(ctx context.Context, db *sql.DB, table, name, def, part string) error {
	x := sqlx.NewDb(db, "postgres")
	idxName := part + "_" + strings.TrimPrefix(name, table+"_")
	idx := pq.QuoteIdentifier(idxName)
	// The name of part's index attached to name, if any: attached ones
	// are inheritance children of the parent's index.
	attached := func() (string, error) {
		var other string
		err := x.GetContext(ctx, &other, `SELECT c.relname FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
			JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND x.indrelid = to_regclass($2)`, name, pq.QuoteIdentifier(part))
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		return other, err
	}
	// keep attaches other, part's attached index, again, and drops the one
	// built here when it is another (this run's, or an earlier run's that
	// its ATTACH refused).
	keep := func(other string) error {
		if other != idxName {
			if _, err := db.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+idx); err != nil {
				return fmt.Errorf("drop the duplicate index %s: %w", idxName, err)
			}
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf(`ALTER INDEX %s ATTACH PARTITION %s`, pq.QuoteIdentifier(name), pq.QuoteIdentifier(other))); err != nil {
			return fmt.Errorf("index %s of %s: %w", name, part, err)
		}
		return nil
	}
	other, err := attached()
	if err != nil {
		return fmt.Errorf("index %s of %s: %w", name, part, err)
	}
	if other != "" {
		return keep(other)
	}
	var valid sql.NullBool
	err = x.GetContext(ctx, &valid, `SELECT x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
		WHERE c.relname = $1 AND c.relnamespace = current_schema()::regnamespace`, idxName)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("index of %s: %w", part, err)
	}
	steps := []string{
		fmt.Sprintf(`CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s %s`, idx, pq.QuoteIdentifier(part), def),
		fmt.Sprintf(`ALTER INDEX %s ATTACH PARTITION %s`, pq.QuoteIdentifier(name), idx),
	}
	if valid.Valid && !valid.Bool {
		steps = append([]string{`DROP INDEX CONCURRENTLY IF EXISTS ` + idx}, steps...)
	}
	for _, q := range steps {
		_, err := db.ExecContext(ctx, q)
		var pe *pq.Error
		switch {
		case err == nil:
			continue
		case errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42704"):
			return nil // undefined_table or _object: the partition was dropped meanwhile
		case errors.As(err, &pe) && pe.Code == "55000": // another index attached for part since the look
			other, aerr := attached()
			if aerr != nil || other == "" {
				return fmt.Errorf("index %s of %s: %w", name, part, err)
			}
			return keep(other)
		default:
			return fmt.Errorf("index %s of %s: %w", name, part, err)
		}
	}
	return nil
}
