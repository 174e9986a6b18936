package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
)

// TestOwnDatabasesLastTheTest: OwnDatabaseURL and OwnRedisURL give each call
// a migrated database and a Redis database apart from the process's and
// from each other; the databases are dropped and the leases given back when
// the test ends.
func TestOwnDatabasesLastTheTest(t *testing.T) {
	ctx := context.Background()
	var names, leases []string
	t.Run("own", func(t *testing.T) {
		dbs := map[string]bool{DatabaseURL(t): true}
		rdbs := map[string]bool{RedisURL(t): true}
		for range 2 {
			du, ru := OwnDatabaseURL(t), OwnRedisURL(t)
			if dbs[du] || rdbs[ru] {
				t.Fatalf("got %s and %s, want a database and a Redis database apart from %v and %v", du, ru, dbs, rdbs)
			}
			dbs[du], rdbs[ru] = true, true
			u, err := url.Parse(du)
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimPrefix(u.Path, "/")
			if !strings.HasPrefix(name, "paysvc_t_") || !strings.HasSuffix(name, fmt.Sprintf("_%d", os.Getpid())) {
				t.Errorf("database %s: want paysvc_t_…_%d, which dropStale drops once this process is gone", name, os.Getpid())
			}
			names = append(names, name)
			var n int
			if err := DBOn(t, du).Get(&n, `SELECT count(*) FROM merchants`); err != nil || n != 0 {
				t.Errorf("merchants of %s: got %d, %v, want an empty migrated table", name, n, err)
			}
			leases = append(leases, "paysvc:testenv:db:"+ru[strings.LastIndexByte(ru, '/')+1:])
		}
	})
	admin, err := sql.Open("postgres", serverURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, name := range names {
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil || n != 0 {
			t.Errorf("database %s after the test: got %d rows, %v, want it dropped", name, n, err)
		}
	}
	ctl := RedisOn(t, redisBase()+"0")
	for _, key := range leases {
		if n, err := ctl.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("lease %s after the test: got %d, %v, want it given back", key, n, err)
		}
	}
}
