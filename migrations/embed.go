// Package migrations holds the SQL migrations, embedded so that `api migrate`
// needs nothing beside the binary.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this folder. A migration that cannot
// be one SQL file run in a transaction is Go code, numbered among these:
// 0018 (events_type) and 0019 (webhook_deliveries_failed), indexes built
// without blocking writes, are in internal/postgres/migrate.go.
//
//go:embed *.sql
var FS embed.FS
