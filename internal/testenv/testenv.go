// Package testenv gives tests a real PostgreSQL database and a real Redis
// database of their own, so test packages run in parallel without sharing
// state; a test that must not share them with its package's other tests
// takes its own (OwnDatabaseURL, OwnRedisURL). The servers come from
// TEST_DATABASE_URL / TEST_REDIS_URL, else the loopback defaults
// (postgres://postgres@127.0.0.1:5432, redis://127.0.0.1:6379).
//
// With TEST_DATABASE_POOLER_URL (a transaction-mode PgBouncer in front of
// that server, deploy/local/pgbouncer.sh) the tests reach their database
// through the pooler, behind a PoolGuard, with DATABASE_POOL_MODE=transaction
// (set for the binaries the tests start too): the configuration of
// DATABASE_POOL_MODE=transaction, tested. With TEST_DATABASE_POOLER_PREPARED
// too (a pooler that tracks named prepared statements, PgBouncer 1.21 or
// later with max_prepared_statements > 0) the pools prepare their statements
// and DATABASE_POOLER_PREPARED_STATEMENTS=true is set: that configuration,
// tested.
package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // the driver
	"github.com/redis/go-redis/v9"

	"paysvc/internal/postgres"
)

func serverURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func redisBase() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		// Drop a trailing database index ("/3"), not the port's digits of
		// "redis://127.0.0.1:6382/".
		i := strings.LastIndex(u, "/")
		if strings.Trim(u[i+1:], "0123456789") == "" && i > len("redis://") {
			return u[:i+1]
		}
		return u + "/"
	}
	return "redis://127.0.0.1:6379/"
}

func poolerURL() string { return os.Getenv("TEST_DATABASE_POOLER_URL") }

// Pooled reports whether the tests run through a transaction-mode pooler.
func Pooled() bool { return poolerURL() != "" }

// PoolerPrepared reports whether the pooler tracks named prepared statements
// (TEST_DATABASE_POOLER_PREPARED=true), so that the tests' pools keep theirs.
func PoolerPrepared() bool {
	return Pooled() && os.Getenv("TEST_DATABASE_POOLER_PREPARED") == "true"
}

// PoolMode is the DATABASE_POOL_MODE of the tests' database URL.
func PoolMode() string {
	if Pooled() {
		return postgres.PoolTransaction
	}
	return postgres.PoolSession
}

// testDB creates this process's database once.
var testDB = sync.OnceValues(createDB)

// DatabaseURL returns the URL of this test process's own migrated database,
// creating it on first use. The name carries the pid; databases of
// processes that are gone are dropped, so crashed runs leave nothing behind.
// Through the pooler (Pooled), it is the pool guard's URL.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	dbs, err := testDB()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if dbs.guarded != "" {
		return dbs.guarded
	}
	return dbs.direct
}

// DirectDatabaseURL is DatabaseURL on the server itself, never the pooler.
func DirectDatabaseURL(t testing.TB) string {
	t.Helper()
	dbs, err := testDB()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dbs.direct
}

// PoolerDatabaseURL is DatabaseURL through the pooler without the guard;
// the test is skipped when no pooler is configured.
func PoolerDatabaseURL(t testing.TB) string {
	t.Helper()
	if !Pooled() {
		t.Skip("no pooler: set TEST_DATABASE_POOLER_URL (make test-pooled starts one)")
	}
	dbs, err := testDB()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return dbs.pooled
}

// ownDBs numbers the databases of OwnDatabaseURL.
var ownDBs atomic.Int64

// OwnDatabaseURL returns the URL of a migrated database of the test's own,
// dropped when the test ends, for a test that must not share DatabaseURL
// with the package's other tests (a worker's relay, or the renewal sweep,
// works on every merchant's rows of its database). Through the pooler
// (Pooled) it is reached as DatabaseURL is, through the pool guard.
func OwnDatabaseURL(t testing.TB) string {
	t.Helper()
	name := dbName(strconv.FormatInt(ownDBs.Add(1), 10))
	u, err := createDatabase(name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(name); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	if !Pooled() {
		return u
	}
	dbs, err := testDB() // the pool guard
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	gu, err := url.Parse(dbs.guarded)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	gu.Path = "/" + name
	return gu.String()
}

// DB returns a connection pool to this process's test database, in the
// tests' pool mode (PoolMode).
func DB(t testing.TB) *sqlx.DB {
	t.Helper()
	return DBOn(t, DatabaseURL(t))
}

// DBOn returns a connection pool to the database at dbURL, in the tests'
// pool mode, closed when the test ends.
func DBOn(t testing.TB, dbURL string) *sqlx.DB {
	t.Helper()
	return openOn(t, dbURL, PoolMode(), PoolerPrepared())
}

// DBOnMode is DBOn in pool mode mode (postgres.PoolSession or
// PoolTransaction), whatever the tests' own: a pool that prepares nothing
// can be had on the server itself.
func DBOnMode(t testing.TB, dbURL, mode string) *sqlx.DB {
	t.Helper()
	return openOn(t, dbURL, mode, false)
}

// openOn opens a pool of 20 connections, closed when the test ends; in
// transaction mode it prepares statements only with prepare.
func openOn(t testing.TB, dbURL, mode string, prepare bool) *sqlx.DB {
	t.Helper()
	db, err := postgres.OpenMode(context.Background(), dbURL, 20, mode, prepare)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// testDBs are the URLs of this process's database: on the server, and
// through the pooler without and with the guard (empty unless Pooled).
type testDBs struct{ direct, pooled, guarded string }

func createDB() (testDBs, error) {
	direct, err := createDatabase(dbName(""))
	if err != nil || !Pooled() {
		return testDBs{direct: direct}, err
	}
	pu, err := url.Parse(poolerURL())
	if err != nil {
		return testDBs{}, fmt.Errorf("TEST_DATABASE_POOLER_URL: %w", err)
	}
	du, _ := url.Parse(direct)
	pu.Path = du.Path
	g, err := StartPoolGuard(pu.Host, PoolerPrepared())
	if err != nil {
		return testDBs{}, err
	}
	gu := *pu
	gu.Host = g.Addr()
	// The binaries the tests start (exec with os.Environ()) read them.
	os.Setenv("DATABASE_POOL_MODE", postgres.PoolTransaction)
	os.Setenv("DATABASE_POOLER_PREPARED_STATEMENTS", strconv.FormatBool(PoolerPrepared()))
	return testDBs{direct: direct, pooled: pu.String(), guarded: gu.String()}, nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// dbName is the name of a test database of this process,
// paysvc_t_<pkg>_<pid> or, with a tag, paysvc_t_<pkg>_<tag>_<pid>: dropStale
// reads the pid after the last underscore.
func dbName(tag string) string {
	const prefix = "paysvc_t_"
	pkg := unsafeChars.ReplaceAllString(strings.TrimSuffix(strings.ToLower(filepath.Base(os.Args[0])), ".test"), "_")
	suffix := fmt.Sprintf("_%d", os.Getpid())
	if tag != "" {
		suffix = "_" + tag + suffix
	}
	if room := 60 - len(prefix) - len(suffix); len(pkg) > room {
		pkg = pkg[len(pkg)-room:]
	}
	return prefix + pkg + suffix
}

// createDatabase creates the migrated database name on the server, afresh,
// and returns its URL. It drops the databases of dead processes first.
func createDatabase(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := openAdmin(ctx)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	dropStale(ctx, admin)

	if err := dropOn(ctx, admin, name); err != nil {
		return "", err
	}
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	u, err := url.Parse(serverURL())
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := postgres.Migrate(ctx, db); err != nil {
		return "", err
	}
	return u.String(), nil
}

// dropDatabase drops the database name, closing its connections.
func dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := openAdmin(ctx)
	if err != nil {
		return err
	}
	defer admin.Close()
	return dropOn(ctx, admin, name)
}

// dropOn drops the database name through admin, closing its connections.
func dropOn(ctx context.Context, admin *sql.DB, name string) error {
	if _, err := admin.ExecContext(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return nil
}

// openAdmin connects to the server's postgres database.
func openAdmin(ctx context.Context) (*sql.DB, error) {
	admin, err := sql.Open("postgres", serverURL())
	if err != nil {
		return nil, err
	}
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		return nil, fmt.Errorf("PostgreSQL at %s does not answer (run deploy/local/services.sh): %w", serverURL(), err)
	}
	return admin, nil
}

// dropStale drops the test databases of processes that no longer run.
func dropStale(ctx context.Context, admin *sql.DB) {
	rows, err := admin.QueryContext(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'paysvc_t_%'`)
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		pid, err := strconv.Atoi(name[strings.LastIndexByte(name, '_')+1:])
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			stale = append(stale, name)
		}
	}
	rows.Close()
	for _, name := range stale {
		_ = dropOn(ctx, admin, name)
	}
}

// testRedisDB leases this process's Redis database once.
var testRedisDB = sync.OnceValues(claimRedisDB)

// RedisURL returns a Redis URL on a database index (1..15) that this process
// holds exclusively for its lifetime, flushed when taken.
func RedisURL(t testing.TB) string {
	t.Helper()
	db, err := testRedisDB()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return redisBase() + strconv.Itoa(db)
}

// OwnRedisURL returns a Redis URL on a database index (1..15) that the test
// holds exclusively until it ends, flushed when taken, for a test whose
// asynq servers must not share RedisURL with the package's other tests.
func OwnRedisURL(t testing.TB) string {
	t.Helper()
	db, release, err := leaseRedisDB()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(release)
	return redisBase() + strconv.Itoa(db)
}

// Redis returns a client on this process's Redis database.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	return RedisOn(t, RedisURL(t))
}

// RedisOn returns a client on the Redis database at redisURL, closed when
// the test ends.
func RedisOn(t testing.TB, redisURL string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// RedisOpt returns asynq's connection options for this process's Redis database.
func RedisOpt(t testing.TB) asynq.RedisConnOpt {
	t.Helper()
	return RedisOptOn(t, RedisURL(t))
}

// RedisOptOn returns asynq's connection options for the Redis database at
// redisURL.
func RedisOptOn(t testing.TB, redisURL string) asynq.RedisConnOpt {
	t.Helper()
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return opt
}

// claimRedisDB leases a Redis database index for the rest of the process's life.
func claimRedisDB() (int, error) {
	db, _, err := leaseRedisDB()
	return db, err
}

// leaseCount numbers this process's Redis leases.
var leaseCount atomic.Int64

// releaseLease deletes a lease key if it still holds the owner's value.
var releaseLease = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// leaseRedisDB takes a lease on a free database index in Redis db 0, flushes
// that database and keeps renewing the lease until release is called; a
// crashed process's lease runs out.
func leaseRedisDB() (db int, release func(), err error) {
	ctx := context.Background()
	opt, err := redis.ParseURL(redisBase() + "0")
	if err != nil {
		return 0, nil, err
	}
	ctl := redis.NewClient(opt)
	if err := ctl.Ping(ctx).Err(); err != nil {
		ctl.Close()
		return 0, nil, fmt.Errorf("redis at %s does not answer (run deploy/local/services.sh): %w", opt.Addr, err)
	}
	const lease = 30 * time.Second
	owner := fmt.Sprintf("%d:%d", os.Getpid(), leaseCount.Add(1))
	for attempt := 0; attempt < 600; attempt++ {
		for i := 1; i <= 15; i++ {
			key := fmt.Sprintf("paysvc:testenv:db:%d", i)
			ok, err := ctl.SetNX(ctx, key, owner, lease).Result()
			if err != nil {
				ctl.Close()
				return 0, nil, err
			}
			if !ok {
				continue
			}
			stop := make(chan struct{})
			go func() {
				tick := time.NewTicker(lease / 3)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						ctl.Expire(ctx, key, lease)
					}
				}
			}()
			release := sync.OnceFunc(func() {
				close(stop)
				releaseLease.Run(ctx, ctl, []string{key}, owner)
				ctl.Close()
			})
			db := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: i})
			defer db.Close()
			if err := db.FlushDB(ctx).Err(); err != nil {
				release()
				return 0, nil, err
			}
			return i, release, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctl.Close()
	return 0, nil, fmt.Errorf("no free Redis database index after 60s")
}
