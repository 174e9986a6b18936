package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"paysvc/internal/testenv"
)

// TestMigrateConcurrentRuns: two `api migrate` started at the same moment
// on an empty database (two pods starting) both succeed, every migration
// is applied by exactly one of them, and goose's table records each
// version once. Without the advisory lock both create goose's table and
// apply 0001 and one fails. Three fresh databases, to give a race its
// chances.
func TestMigrateConcurrentRuns(t *testing.T) {
	useTestEnv(t)
	admin := testenv.DB(t)
	u, err := url.Parse(testenv.DirectDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		name := fmt.Sprintf("paysvc_t_migrace%d_%d", round, os.Getpid())
		if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`) })
		fresh := *u
		fresh.Path = "/" + name
		t.Setenv("DATABASE_DIRECT_URL", fresh.String())

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := make(chan struct{})
		var wg sync.WaitGroup
		outs := make([]bytes.Buffer, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = migrate(ctx, &outs[i])
			}()
		}
		close(start)
		wg.Wait()
		cancel()

		seen := map[string]int{}
		total := 0
		for i := range 2 {
			if errs[i] != nil {
				t.Fatalf("round %d, run %d: got %v, want both runs to succeed", round, i+1, errs[i])
			}
			var v struct{ Applied []string }
			if err := json.Unmarshal(outs[i].Bytes(), &v); err != nil {
				t.Fatalf("round %d, run %d: got %q: %v", round, i+1, outs[i].String(), err)
			}
			for _, m := range v.Applied {
				seen[m]++
			}
			total += len(v.Applied)
		}
		var versions, distinct int
		fdb, err := sql.Open("postgres", fresh.String())
		if err != nil {
			t.Fatal(err)
		}
		if err := fdb.QueryRow(`SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0`).Scan(&versions, &distinct); err != nil {
			t.Fatal(err)
		}
		fdb.Close()
		if len(seen) == 0 || total != len(seen) || versions != total || distinct != total {
			t.Errorf("round %d: the two runs applied %d migrations (%d distinct), goose_db_version has %d rows (%d versions); want each migration applied once",
				round, total, len(seen), versions, distinct)
		}
	}
}
