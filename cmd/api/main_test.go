package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// seenSecrets are every key secret the CLI has printed in this process;
// no command may ever write one to stderr.
var (
	seenMu      sync.Mutex
	seenSecrets []string
)

func rememberSecret(s string) {
	seenMu.Lock()
	defer seenMu.Unlock()
	seenSecrets = append(seenSecrets, s)
}

// result is one CLI invocation.
type result struct {
	code   int
	stdout string
	stderr string // the stderr argument of run
	logs   string // what went to the process's os.Stderr (the slog handler) meanwhile
}

// useTestEnv points the CLI at this process's test database and Redis.
func useTestEnv(t *testing.T) {
	t.Helper()
	t.Setenv("DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("REDIS_URL", testenv.RedisURL(t))
}

// useEmptyDatabase creates an empty database named for what and this
// process, dropped when t ends, and points DATABASE_URL at it.
func useEmptyDatabase(t *testing.T, what string) *url.URL {
	t.Helper()
	u, err := url.Parse(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The pid suffix lets testenv drop it if this process dies first.
	name := fmt.Sprintf("paysvc_t_%s_%d", what, os.Getpid())
	admin := testenv.DB(t)
	if _, err := admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`) })
	u.Path = "/" + name
	t.Setenv("DATABASE_URL", u.String())
	return u
}

// cli runs the command line as `api args...` and checks that no key secret
// printed so far appears on stderr or in the process's logs.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The logger writes to os.Stderr; capture it for the duration of run.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = pw
	logc := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		logc <- string(b)
	}()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	os.Stderr = orig
	pw.Close()
	logs := <-logc
	pr.Close()

	r := result{code: code, stdout: stdout.String(), stderr: stderr.String(), logs: logs}
	var printed struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(stdout.Bytes(), &printed) == nil && printed.Key != "" {
		rememberSecret(printed.Key)
	}
	seenMu.Lock()
	defer seenMu.Unlock()
	for _, s := range seenSecrets {
		if strings.Contains(r.stderr, s) {
			t.Errorf("api %s: got a key secret on stderr: %q", strings.Join(args, " "), r.stderr)
		}
		if strings.Contains(r.logs, s) {
			t.Errorf("api %s: got a key secret in the logs: %q", strings.Join(args, " "), r.logs)
		}
	}
	return r
}

// wantExit fails the test unless the command exited with want.
func (r result) wantExit(t *testing.T, want int, args string) {
	t.Helper()
	if r.code != want {
		t.Fatalf("api %s: got exit %d, want %d\nstdout: %s\nstderr: %s", args, r.code, want, r.stdout, r.stderr)
	}
}

// decode decodes stdout as a single JSON object.
func (r result) decode(t *testing.T) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout %q: not a JSON object: %v", r.stdout, err)
	}
	if dec.More() {
		t.Fatalf("stdout %q: got more than one JSON value, want one", r.stdout)
	}
	return v
}

// newMerchant inserts a merchant directly and returns its id.
func newMerchant(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	id := payments.NewID("mch_")
	if _, err := db.Exec(`INSERT INTO merchants (id, name, plan) VALUES ($1, 'CLI test', 'free')`, id); err != nil {
		t.Fatalf("insert merchant: %v", err)
	}
	return id
}

// seedKeys inserts n keys for the merchant directly, bypassing the limits.
func seedKeys(t *testing.T, db *sqlx.DB, merchant string, n int, created time.Time, expires *time.Time, revoked bool) {
	t.Helper()
	var revokedAt *time.Time
	if revoked {
		r := created.Add(time.Minute)
		revokedAt = &r
	}
	for i := 0; i < n; i++ {
		hash := make([]byte, 32)
		_, _ = rand.Read(hash)
		_, err := db.Exec(`INSERT INTO api_keys (id, merchant_id, livemode, key_hash, hint, expires_at, revoked_at, created_at)
			VALUES ($1, $2, false, $3, 'svc_test_seed', $4, $5, $6)`,
			payments.NewID("key_"), merchant, hash, expires, revokedAt, created)
		if err != nil {
			t.Fatalf("seed key: %v", err)
		}
	}
}

func countKeys(t *testing.T, db *sqlx.DB, merchant string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM api_keys WHERE merchant_id = $1`, merchant); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrate(t *testing.T) {
	useTestEnv(t)

	t.Run("already migrated database", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			r := cli(t, "migrate")
			r.wantExit(t, 0, "migrate")
			if got := fmt.Sprint(r.decode(t)["applied"]); got != "[]" {
				t.Errorf("run %d: got applied %s, want []", i+1, got)
			}
		}
	})

	t.Run("empty database, twice", func(t *testing.T) {
		u := useEmptyDatabase(t, "climigrate")
		name := strings.TrimPrefix(u.Path, "/")
		admin := testenv.DB(t)

		first := cli(t, "migrate")
		first.wantExit(t, 0, "migrate")
		applied, _ := first.decode(t)["applied"].([]any)
		if len(applied) == 0 {
			t.Fatalf("first run: got applied %v, want the migrations", first.decode(t)["applied"])
		}
		if s, _ := applied[0].(string); !strings.HasSuffix(s, "0001_foundation.sql") {
			t.Errorf("first run: got first migration %q, want …0001_foundation.sql", s)
		}

		second := cli(t, "migrate")
		second.wantExit(t, 0, "migrate")
		if got := fmt.Sprint(second.decode(t)["applied"]); got != "[]" {
			t.Errorf("second run: got applied %s, want []", got)
		}

		// Through a pooler, DATABASE_URL is the pooler and migrations take
		// DATABASE_DIRECT_URL: here the empty database is the direct one.
		name2 := name + "_direct"
		if _, err := admin.Exec(`CREATE DATABASE ` + name2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(`DROP DATABASE IF EXISTS ` + name2 + ` WITH (FORCE)`) })
		direct := *u
		direct.Path = "/" + name2
		t.Setenv("DATABASE_DIRECT_URL", direct.String())
		viaDirect := cli(t, "migrate")
		viaDirect.wantExit(t, 0, "migrate")
		if applied, _ := viaDirect.decode(t)["applied"].([]any); len(applied) != len(first.decode(t)["applied"].([]any)) {
			t.Errorf("with DATABASE_DIRECT_URL on an empty database: got applied %v, want every migration", applied)
		}

		db, err := postgres.Open(context.Background(), u.String(), 1)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, table := range []string{"merchants", "api_keys", "idempotency_keys", "content_violations"} {
			var ok bool
			if err := db.Get(&ok, `SELECT to_regclass($1) IS NOT NULL`, table); err != nil {
				t.Fatal(err)
			}
			if !ok {
				t.Errorf("after migrate: table %s: got missing, want created", table)
			}
		}
	})
}

func TestMerchantCreate(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	tests := []struct {
		name      string
		args      []string
		wantPlan  string
		wantEmail any
	}{
		{"pro", []string{"--name", "Acme", "--plan", "pro"}, "pro", nil},
		{"brand", []string{"--name", "Acme", "--plan", "brand"}, "brand", nil},
		{"free", []string{"--name", "Acme", "--plan", "free"}, "free", nil},
		{"default plan is free", []string{"--name", "Acme"}, "free", nil},
		{"with email", []string{"--name", "Acme", "--email", "ops@acme.example", "--plan", "pro"}, "pro", "ops@acme.example"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"merchant", "create"}, tt.args...)
			r := cli(t, args...)
			r.wantExit(t, 0, strings.Join(args, " "))
			v := r.decode(t)
			id, _ := v["id"].(string)
			if !strings.HasPrefix(id, "mch_") {
				t.Errorf("got id %q, want prefix mch_", id)
			}
			if v["name"] != "Acme" {
				t.Errorf("got name %v, want Acme", v["name"])
			}
			if v["plan"] != tt.wantPlan {
				t.Errorf("got plan %v, want %s", v["plan"], tt.wantPlan)
			}
			if v["email"] != tt.wantEmail {
				t.Errorf("got email %v, want %v", v["email"], tt.wantEmail)
			}
			var plan string
			if err := db.Get(&plan, `SELECT plan FROM merchants WHERE id = $1`, id); err != nil {
				t.Fatalf("merchant %s not stored: %v", id, err)
			}
			if plan != tt.wantPlan {
				t.Errorf("stored plan: got %q, want %q", plan, tt.wantPlan)
			}
		})
	}
}

func TestMerchantCreateErrors(t *testing.T) {
	useTestEnv(t)
	tests := []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"bad plan", []string{"--name", "Acme", "--plan", "enterprise"}, "plan"},
		{"no name", []string{"--plan", "pro"}, "name"},
		{"blank name", []string{"--name", "  "}, "name"},
		{"bad email", []string{"--name", "Acme", "--email", "not-an-email"}, "email"},
		{"unknown flag", []string{"--name", "Acme", "--colour", "red"}, "colour"},
		{"stray argument", []string{"--name", "Acme", "extra"}, "unexpected arguments"}, // not echoed: it could be a pasted secret
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"merchant", "create"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 {
				t.Fatalf("api %s: got exit 0 (stdout %s), want non-zero", strings.Join(args, " "), r.stdout)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("got stderr %q, want a message about %q", r.stderr, tt.wantStderr)
			}
			if r.stdout != "" {
				t.Errorf("got stdout %q, want nothing", r.stdout)
			}
		})
	}
}

// createdKey is the CLI's key create output.
type createdKey struct {
	ID        string `json:"id"`
	Key       string `json:"key"`
	Mode      string `json:"mode"`
	ExpiresAt *int64 `json:"expires_at"`
}

func TestKeyCreate(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	svc := payments.NewService(postgres.New(db), nil, time.Now)
	mch := newMerchant(t, db)

	tests := []struct {
		name       string
		args       []string
		wantPrefix string
		wantMode   string
		wantLive   bool
		wantTTL    time.Duration // 0: no expiry
	}{
		{"test mode", []string{"--mode", "test"}, "svc_test_", "test", false, 0},
		{"live mode", []string{"--mode", "live"}, "svc_live_", "live", true, 0},
		{"expires in 1h", []string{"--mode", "test", "--expires-in", "1h"}, "svc_test_", "test", false, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"key", "create", "--merchant", mch}, tt.args...)
			before := time.Now()
			r := cli(t, args...)
			r.wantExit(t, 0, strings.Join(args, " "))
			v := r.decode(t)
			for _, field := range []string{"id", "key", "mode", "expires_at"} {
				if _, ok := v[field]; !ok {
					t.Errorf("got output %v, want field %q", v, field)
				}
			}
			// The README shows the fields in this order; a reader compares by eye.
			if got, want := strings.Join(topLevelKeys(t, r.stdout), ","), "id,key,merchant_id,mode,expires_at"; got != want {
				t.Errorf("got fields in the order %s, want %s", got, want)
			}
			var k createdKey
			if err := json.Unmarshal([]byte(r.stdout), &k); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(k.ID, "key_") {
				t.Errorf("got id %q, want prefix key_", k.ID)
			}
			if !strings.HasPrefix(k.Key, tt.wantPrefix) || len(k.Key) <= len(tt.wantPrefix)+16 {
				t.Errorf("got key %q, want %s followed by a long random part", k.Key, tt.wantPrefix)
			}
			if k.Mode != tt.wantMode {
				t.Errorf("got mode %q, want %q", k.Mode, tt.wantMode)
			}
			switch {
			case tt.wantTTL == 0 && k.ExpiresAt != nil:
				t.Errorf("got expires_at %d, want null", *k.ExpiresAt)
			case tt.wantTTL != 0 && k.ExpiresAt == nil:
				t.Errorf("got expires_at null, want about now+%s", tt.wantTTL)
			case tt.wantTTL != 0:
				lo, hi := before.Add(tt.wantTTL).Unix()-1, time.Now().Add(tt.wantTTL).Unix()+1
				if *k.ExpiresAt < lo || *k.ExpiresAt > hi {
					t.Errorf("got expires_at %d, want between %d and %d", *k.ExpiresAt, lo, hi)
				}
			}

			// Stored: only the hash, and the key authenticates as the merchant's.
			var stored struct {
				Hash []byte `db:"key_hash"`
				Hint string `db:"hint"`
			}
			if err := db.Get(&stored, `SELECT key_hash, hint FROM api_keys WHERE id = $1`, k.ID); err != nil {
				t.Fatalf("key %s not stored: %v", k.ID, err)
			}
			if !bytes.Equal(stored.Hash, payments.HashKey(k.Key)) {
				t.Errorf("stored hash: got %x, want sha256 of the printed key", stored.Hash)
			}
			if stored.Hint == k.Key || !strings.HasPrefix(k.Key, stored.Hint) {
				t.Errorf("stored hint: got %q, want a short prefix of the key", stored.Hint)
			}
			sc, _, err := svc.Authenticate(context.Background(), k.Key, nil)
			if err != nil {
				t.Fatalf("Authenticate(printed key): %v", err)
			}
			if want := (payments.Scope{MerchantID: mch, Live: tt.wantLive}); sc != want {
				t.Errorf("Authenticate: got scope %+v, want %+v", sc, want)
			}
		})
	}

	t.Run("fourth key within 10 minutes", func(t *testing.T) {
		args := []string{"key", "create", "--merchant", mch, "--mode", "test"}
		r := cli(t, args...)
		r.wantExit(t, 3, strings.Join(args, " "))
		wantLimitError(t, r, "key_creation_rate_exceeded")
		if n := countKeys(t, db, mch); n != 3 {
			t.Errorf("got %d keys stored, want 3", n)
		}
	})
}

// topLevelKeys is the keys of the JSON object out, in the order printed.
func topLevelKeys(t *testing.T, out string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("stdout %q: not a JSON object (%v, %v)", out, tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("stdout %q: %v", out, err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatalf("stdout %q: %v", out, err)
		}
	}
	return keys
}

// wantLimitError checks the JSON error a refused key creation prints.
func wantLimitError(t *testing.T, r result, code string) {
	t.Helper()
	var v struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout %q: not JSON: %v", r.stdout, err)
	}
	if v.Error == nil {
		t.Fatalf("stdout %q: got no error object, want {\"error\":{\"code\":%q,…}}", r.stdout, code)
	}
	if v.Error.Code != code {
		t.Errorf("got error code %q, want %q", v.Error.Code, code)
	}
	if v.Error.Message == "" {
		t.Errorf("got an empty error message, want one")
	}
	if strings.Contains(r.stdout, "svc_test_") || strings.Contains(r.stdout, "svc_live_") {
		t.Errorf("got a key in a refusal: %s", r.stdout)
	}
}

func TestKeyCreateLimits(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	now := time.Now()
	past := now.Add(-time.Second)
	future := now.Add(24 * time.Hour)
	type seed struct {
		n       int
		age     time.Duration
		expires *time.Time
		revoked bool
	}
	tests := []struct {
		name     string
		seeds    []seed
		wantCode string // "" when the key is created
	}{
		{"2 in the last 10 minutes", []seed{{n: 2, age: 5 * time.Minute}}, ""},
		{"3 in the last 10 minutes", []seed{{n: 3, age: 5 * time.Minute}}, "key_creation_rate_exceeded"},
		{"3 revoked in the last 10 minutes still count", []seed{{n: 3, age: 5 * time.Minute, revoked: true}}, "key_creation_rate_exceeded"},
		{"3 created 11 minutes ago", []seed{{n: 3, age: 11 * time.Minute}}, ""},
		{"9 in the last hour", []seed{{n: 9, age: 30 * time.Minute}}, ""},
		{"10 in the last hour", []seed{{n: 10, age: 30 * time.Minute}}, "key_creation_rate_exceeded"},
		{"10 created 61 minutes ago", []seed{{n: 10, age: 61 * time.Minute}}, ""},
		{"24 active", []seed{{n: 24, age: 2 * time.Hour}}, ""},
		{"25 active", []seed{{n: 25, age: 2 * time.Hour}}, "max_keys_reached"},
		{"25 active, some expiring later", []seed{{n: 20, age: 2 * time.Hour}, {n: 5, age: 2 * time.Hour, expires: &future}}, "max_keys_reached"},
		{"24 active and revoked ones", []seed{{n: 24, age: 2 * time.Hour}, {n: 5, age: 2 * time.Hour, revoked: true}}, ""},
		{"24 active and expired ones", []seed{{n: 24, age: 2 * time.Hour}, {n: 5, age: 2 * time.Hour, expires: &past}}, ""},
		{"24 active, revoked and expired ones", []seed{
			{n: 24, age: 2 * time.Hour}, {n: 3, age: 3 * time.Hour, revoked: true}, {n: 3, age: 3 * time.Hour, expires: &past},
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mch := newMerchant(t, db)
			seeded := 0
			for _, s := range tt.seeds {
				seedKeys(t, db, mch, s.n, now.Add(-s.age), s.expires, s.revoked)
				seeded += s.n
			}
			args := []string{"key", "create", "--merchant", mch, "--mode", "live"}
			r := cli(t, args...)
			if tt.wantCode == "" {
				r.wantExit(t, 0, strings.Join(args, " "))
				if n := countKeys(t, db, mch); n != seeded+1 {
					t.Errorf("got %d keys stored, want %d", n, seeded+1)
				}
				return
			}
			r.wantExit(t, 3, strings.Join(args, " "))
			wantLimitError(t, r, tt.wantCode)
			if n := countKeys(t, db, mch); n != seeded {
				t.Errorf("got %d keys stored, want %d (none added)", n, seeded)
			}
		})
	}

	t.Run("the 25th active key is the last", func(t *testing.T) {
		mch := newMerchant(t, db)
		seedKeys(t, db, mch, 24, now.Add(-2*time.Hour), nil, false)
		seedKeys(t, db, mch, 4, now.Add(-2*time.Hour), nil, true)
		seedKeys(t, db, mch, 4, now.Add(-2*time.Hour), &past, false)
		args := []string{"key", "create", "--merchant", mch, "--mode", "test"}
		cli(t, args...).wantExit(t, 0, strings.Join(args, " "))
		r := cli(t, args...)
		r.wantExit(t, 3, strings.Join(args, " "))
		wantLimitError(t, r, "max_keys_reached")
	})
}

func TestKeyCreateErrors(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch := newMerchant(t, db)
	tests := []struct {
		name string
		args []string
	}{
		{"no merchant", []string{"--mode", "test"}},
		{"unknown merchant", []string{"--merchant", "mch_doesnotexist", "--mode", "test"}},
		{"no mode", []string{"--merchant", mch}},
		{"bad mode", []string{"--merchant", mch, "--mode", "prod"}},
		{"bad duration", []string{"--merchant", mch, "--mode", "test", "--expires-in", "soon"}},
		{"negative duration", []string{"--merchant", mch, "--mode", "test", "--expires-in", "-1h"}},
		{"stray argument", []string{"--merchant", mch, "--mode", "test", "extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"key", "create"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 || r.code == 3 {
				t.Fatalf("api %s: got exit %d (stdout %s), want a failure other than a limit", strings.Join(args, " "), r.code, r.stdout)
			}
			if strings.TrimSpace(r.stderr) == "" {
				t.Errorf("got empty stderr, want a message")
			}
			if strings.Contains(r.stdout, "svc_") {
				t.Errorf("got a key on stdout: %s", r.stdout)
			}
		})
	}
	if n := countKeys(t, db, mch); n != 0 {
		t.Errorf("got %d keys stored after failed commands, want 0", n)
	}
}

func TestKeyRevoke(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	svc := payments.NewService(postgres.New(db), nil, time.Now)
	mch := newMerchant(t, db)

	created := cli(t, "key", "create", "--merchant", mch, "--mode", "live", "--expires-in", "720h")
	created.wantExit(t, 0, "key create")
	var k createdKey
	if err := json.Unmarshal([]byte(created.stdout), &k); err != nil {
		t.Fatal(err)
	}

	before := time.Now().Unix()
	r := cli(t, "key", "revoke", "--id", k.ID)
	r.wantExit(t, 0, "key revoke --id "+k.ID)
	if strings.Contains(r.stdout, k.Key) {
		t.Errorf("got the key secret in the revoke output: %s", r.stdout)
	}
	v := r.decode(t)
	if _, ok := v["key"]; ok {
		t.Errorf("got a key field in the revoke output %v, want none", v)
	}
	if got, want := strings.Join(topLevelKeys(t, r.stdout), ","), "id,merchant_id,mode,hint,expires_at,revoked_at,created"; got != want {
		t.Errorf("got fields in the order %s, want %s", got, want)
	}
	if v["id"] != k.ID {
		t.Errorf("got id %v, want %s", v["id"], k.ID)
	}
	if v["mode"] != "live" {
		t.Errorf("got mode %v, want live", v["mode"])
	}
	revokedAt, ok := v["revoked_at"].(float64)
	if !ok || int64(revokedAt) < before-1 || int64(revokedAt) > time.Now().Unix()+1 {
		t.Errorf("got revoked_at %v, want about %d", v["revoked_at"], before)
	}
	if _, _, err := svc.Authenticate(context.Background(), k.Key, nil); !isCode(err, payments.KeyRevoked) {
		t.Errorf("Authenticate(revoked key): got %v, want key_revoked", err)
	}

	t.Run("again keeps the first time", func(t *testing.T) {
		time.Sleep(1100 * time.Millisecond)
		r := cli(t, "key", "revoke", "--id", k.ID)
		r.wantExit(t, 0, "key revoke --id "+k.ID)
		if got := r.decode(t)["revoked_at"]; got != v["revoked_at"] {
			t.Errorf("got revoked_at %v, want the first revocation %v", got, v["revoked_at"])
		}
	})

	tests := []struct {
		name string
		args []string
	}{
		{"unknown id", []string{"--id", "key_doesnotexist"}},
		{"no id", nil},
		// An operator who pastes the secret instead of the id must not see it echoed.
		{"secret given as id", []string{"--id", k.Key}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"key", "revoke"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 {
				t.Fatalf("api %s: got exit 0 (stdout %s), want non-zero", strings.Join(args, " "), r.stdout)
			}
			if strings.TrimSpace(r.stderr) == "" {
				t.Errorf("got empty stderr, want a message")
			}
			if r.stdout != "" {
				t.Errorf("got stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func isCode(err error, code payments.Code) bool {
	var pe *payments.Error
	return errors.As(err, &pe) && pe.Code == code
}

func TestMerchantUnsuspend(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch := newMerchant(t, db)
	if _, err := db.Exec(`UPDATE merchants SET suspended_at = now() - interval '1 hour' WHERE id = $1`, mch); err != nil {
		t.Fatal(err)
	}

	before := time.Now()
	r := cli(t, "merchant", "unsuspend", "--merchant", mch)
	r.wantExit(t, 0, "merchant unsuspend --merchant "+mch)
	if got := r.decode(t)["id"]; got != mch {
		t.Errorf("got id %v, want %s", got, mch)
	}
	var row struct {
		SuspendedAt   *time.Time `db:"suspended_at"`
		UnsuspendedAt *time.Time `db:"unsuspended_at"`
	}
	if err := db.Get(&row, `SELECT suspended_at, unsuspended_at FROM merchants WHERE id = $1`, mch); err != nil {
		t.Fatal(err)
	}
	if row.SuspendedAt != nil {
		t.Errorf("got suspended_at %v, want NULL", *row.SuspendedAt)
	}
	if row.UnsuspendedAt == nil || row.UnsuspendedAt.Before(before.Add(-time.Second)) {
		t.Errorf("got unsuspended_at %v, want about %v", row.UnsuspendedAt, before)
	}

	// The merchant's keys work again.
	created := cli(t, "key", "create", "--merchant", mch, "--mode", "test")
	created.wantExit(t, 0, "key create")
	var k createdKey
	if err := json.Unmarshal([]byte(created.stdout), &k); err != nil {
		t.Fatal(err)
	}
	svc := payments.NewService(postgres.New(db), nil, time.Now)
	if _, _, err := svc.Authenticate(context.Background(), k.Key, nil); err != nil {
		t.Errorf("Authenticate after unsuspend: got %v, want nil", err)
	}

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"unknown merchant", []string{"--merchant", "mch_doesnotexist"}},
		{"no merchant", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"merchant", "unsuspend"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 {
				t.Fatalf("api %s: got exit 0 (stdout %s), want non-zero", strings.Join(args, " "), r.stdout)
			}
			if strings.TrimSpace(r.stderr) == "" {
				t.Errorf("got empty stderr, want a message")
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	useTestEnv(t)
	for _, args := range [][]string{
		{"frobnicate"},
		{"merchant"},
		{"merchant", "delete", "--merchant", "mch_x"},
		{"key"},
		{"key", "list"},
		{"sandbox", "frobnicate"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := cli(t, args...)
			r.wantExit(t, 2, strings.Join(args, " "))
			if !strings.Contains(r.stderr, "usage:") {
				t.Errorf("got stderr %q, want the usage", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("got stdout %q, want nothing", r.stdout)
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		r := cli(t, "help")
		r.wantExit(t, 0, "help")
		if !strings.Contains(r.stdout, "usage:") {
			t.Errorf("got stdout %q, want the usage", r.stdout)
		}
	})
	// A subcommand's -h is an answer, not an error: its usage on stdout.
	for args, want := range map[string]string{
		"listen -h":              "-forward-to",
		"listen --help":          "-state-dir",
		"key create -h":          "usage: api key create --merchant ID",
		"partitions maintain -h": "usage: api partitions maintain",
	} {
		t.Run(args, func(t *testing.T) {
			r := cli(t, strings.Fields(args)...)
			r.wantExit(t, 0, args)
			if !strings.Contains(r.stdout, want) || r.stderr != "" {
				t.Errorf("got stdout %q, stderr %q; want %q on stdout and nothing on stderr", r.stdout, r.stderr, want)
			}
		})
	}
}

// TestCreateKeyConcurrent races key creations for one merchant: the row lock
// on the merchant must let exactly 3 through the 10-minute limit.
func TestCreateKeyConcurrent(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	svc := payments.NewService(postgres.New(db), nil, time.Now)
	ctx := context.Background()
	m, err := svc.CreateMerchant(ctx, "Concurrent", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}

	const n = 10
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = svc.CreateKey(ctx, m.ID, i%2 == 0, 0)
		}()
	}
	close(start)
	wg.Wait()

	ok, limited := 0, 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case isCode(err, payments.KeyCreationRateExceeded):
			limited++
		default:
			t.Errorf("goroutine %d: got error %v, want nil or key_creation_rate_exceeded", i, err)
		}
	}
	if ok != 3 || limited != n-3 {
		t.Errorf("got %d created and %d key_creation_rate_exceeded, want 3 and %d", ok, limited, n-3)
	}
	if got := countKeys(t, db, m.ID); got != 3 {
		t.Errorf("got %d keys stored, want 3", got)
	}
}

// TestSandboxPayout pays a merchant's balance out from the command line: the
// whole available amount once (payments net of fees, less what a pending
// refund holds back), then nothing; each mode on its own.
func TestSandboxPayout(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	ctx := context.Background()
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(sandbox.New(db, "http://sandbox.invalid")))
	mch := newMerchant(t, db)
	pay := func(live bool, amount int64) string {
		t.Helper()
		cur := "usd"
		in, err := svc.CreateIntent(ctx, payments.Scope{MerchantID: mch, Live: live}, payments.IntentInput{Amount: &amount, Currency: &cur})
		if err != nil {
			t.Fatal(err)
		}
		o, err := sandbox.New(db, "http://sandbox.invalid").Cards(svc).ConfirmPayment(ctx, in.PaymentIntentID, in.PublishableKey, in.ClientSecret, sandbox.CardSuccess)
		if err != nil || !o.Succeeded {
			t.Fatalf("pay %d: got %+v, %v, want succeeded", amount, o, err)
		}
		return in.PaymentIntentID
	}
	net := func(amount int64) int64 { return amount - payments.Fee(payments.PlanFree, "usd", amount) }
	payout := func(args ...string) map[string]any {
		t.Helper()
		args = append([]string{"sandbox", "payout", "--merchant", mch}, args...)
		r := cli(t, args...)
		r.wantExit(t, 0, strings.Join(args, " "))
		return r.decode(t)
	}
	want := func(amount int64) map[string]any { return map[string]any{"amount": float64(amount), "currency": "usd"} }
	payoutEntries := func(live bool) []int64 {
		t.Helper()
		var out []int64
		if err := db.Select(&out, `SELECT amount FROM ledger_entries WHERE merchant_id = $1 AND livemode = $2 AND type = 'payout' ORDER BY created_at`, mch, live); err != nil {
			t.Fatal(err)
		}
		return out
	}

	if got := payout("--mode", "test"); fmt.Sprint(got) != fmt.Sprint(want(0)) {
		t.Errorf("before any payment: got %v, want %v", got, want(0))
	}
	first := pay(false, 1000)
	pay(false, 2500)
	pay(false, 4999)
	pay(true, 7000)
	refund := int64(300)
	if _, err := svc.CreateRefund(ctx, payments.Scope{MerchantID: mch}, payments.RefundInput{PaymentIntent: &first, Amount: &refund}); err != nil {
		t.Fatal(err)
	}
	available := net(1000) + net(2500) + net(4999) - refund

	if got := payout("--mode", "test"); fmt.Sprint(got) != fmt.Sprint(want(available)) {
		t.Errorf("got %v, want %v (payments net of fees, less the pending refund)", got, want(available))
	}
	if got := payoutEntries(false); fmt.Sprint(got) != fmt.Sprint([]int64{-available}) {
		t.Errorf("got payout ledger entries %v, want [%d]", got, -available)
	}
	var bal struct {
		LedgerTotal int64 `db:"ledger_total"`
		Reserved    int64 `db:"reserved"`
	}
	if err := db.Get(&bal, `SELECT ledger_total, reserved FROM balances WHERE merchant_id = $1 AND NOT livemode`, mch); err != nil {
		t.Fatal(err)
	}
	if bal.LedgerTotal != refund || bal.Reserved != refund {
		t.Errorf("after the payout: got ledger_total %d reserved %d, want %d and %d (what the refund holds)", bal.LedgerTotal, bal.Reserved, refund, refund)
	}
	for _, args := range [][]string{{"--mode", "test"}, {"--mode", "test", "--currency", "usd"}, {"--mode", "test", "--currency", "USD"}} {
		if got := payout(args...); fmt.Sprint(got) != fmt.Sprint(want(0)) {
			t.Errorf("payout again (%v): got %v, want %v", args, got, want(0))
		}
	}
	if got := payoutEntries(false); len(got) != 1 {
		t.Errorf("got payout ledger entries %v, want still one", got)
	}

	// Live mode has its own balance.
	if got := payout("--mode", "live"); fmt.Sprint(got) != fmt.Sprint(want(net(7000))) {
		t.Errorf("live: got %v, want %v", got, want(net(7000)))
	}
	if got := payout("--mode", "live"); fmt.Sprint(got) != fmt.Sprint(want(0)) {
		t.Errorf("live again: got %v, want %v", got, want(0))
	}
	if got := payoutEntries(true); fmt.Sprint(got) != fmt.Sprint([]int64{-net(7000)}) {
		t.Errorf("got live payout entries %v, want [%d]", got, -net(7000))
	}
}

func TestSandboxPayoutErrors(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	mch := newMerchant(t, db)
	for _, tt := range []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"bad mode", []string{"--merchant", mch, "--mode", "prod"}, "mode"},
		{"no mode", []string{"--merchant", mch}, "mode"},
		{"no merchant", []string{"--mode", "test"}, "merchant"},
		{"unknown merchant", []string{"--merchant", "mch_doesnotexist0000000000", "--mode", "test"}, "mch_doesnotexist0000000000"},
		{"not a merchant id", []string{"--merchant", "svc_test_pastedsecret", "--mode", "test"}, "--merchant"},
		{"bad currency", []string{"--merchant", mch, "--mode", "test", "--currency", "dollars"}, "currency"},
		{"stray argument", []string{"--merchant", mch, "--mode", "test", "now"}, "unexpected arguments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"sandbox", "payout"}, tt.args...)
			r := cli(t, args...)
			if r.code == 0 {
				t.Fatalf("api %s: got exit 0 (stdout %s), want non-zero", strings.Join(args, " "), r.stdout)
			}
			if !strings.Contains(r.stderr, tt.wantStderr) {
				t.Errorf("got stderr %q, want a message about %q", r.stderr, tt.wantStderr)
			}
			if strings.Contains(r.stderr, "pastedsecret") {
				t.Errorf("got stderr %q, want the value not echoed", r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("got stdout %q, want nothing", r.stdout)
			}
		})
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM ledger_entries WHERE merchant_id = $1`, mch); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("got %d ledger entries after failed payouts, want 0", n)
	}
}
