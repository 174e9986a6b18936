// Package migrations holds the SQL migrations, embedded so that `api migrate`
// needs nothing beside the binary.
package migrations

import "embed"

// FS holds every NNNN_name.sql file of this folder.
//
//go:embed *.sql
var FS embed.FS
