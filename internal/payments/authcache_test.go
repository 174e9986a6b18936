package payments_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestAuthCache: revocation through the same service is seen at once;
// through another process (another Service, as the CLI is) within the TTL.
func TestAuthCache(t *testing.T) {
	ctx := context.Background()
	store := postgres.New(testenv.DB(t))
	clk := &fakeClock{t: time.Now()}
	api := payments.NewService(store, nil, clk.now, payments.WithAuthCacheTTL(time.Second))
	cli := payments.NewService(store, nil, clk.now)

	m, err := cli.CreateMerchant(ctx, "Cache test", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	newKey := func() payments.NewKey {
		k, err := cli.CreateKey(ctx, m.ID, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	auth := func(k payments.NewKey) payments.Code {
		_, _, err := api.Authenticate(ctx, k.Secret, nil)
		return payments.ErrorCode(err)
	}

	k1 := newKey()
	if got := auth(k1); got != "" {
		t.Fatalf("fresh key: got %q, want success", got)
	}
	if _, err := cli.RevokeKey(ctx, k1.ID); err != nil {
		t.Fatal(err)
	}
	if got := auth(k1); got != "" {
		t.Errorf("revoked elsewhere, within the TTL: got %q, want the cached success", got)
	}
	clk.add(time.Second)
	if got := auth(k1); got != payments.KeyRevoked {
		t.Errorf("revoked elsewhere, after the TTL: got %q, want key_revoked", got)
	}

	k2 := newKey()
	if got := auth(k2); got != "" {
		t.Fatalf("second key: got %q, want success", got)
	}
	if _, err := api.RevokeKey(ctx, k2.ID); err != nil {
		t.Fatal(err)
	}
	if got := auth(k2); got != payments.KeyRevoked {
		t.Errorf("revoked through this service: got %q, want key_revoked at once", got)
	}

	// Expiry is checked against the clock on every request, cached or not.
	k3, err := cli.CreateKey(ctx, m.ID, false, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := auth(k3); got != "" {
		t.Fatalf("expiring key: got %q, want success", got)
	}
	clk.add(600 * time.Millisecond)
	if got := auth(k3); got != payments.KeyExpired {
		t.Errorf("expired key still cached: got %q, want key_expired", got)
	}

	if got := auth(payments.NewKey{Secret: "svc_test_doesnotexist"}); got != payments.Unauthorized {
		t.Errorf("unknown key: got %q, want unauthorized", got)
	}
}

// countingKeys counts the key reads that reach the database; while fail
// is set they fail as a database outage would.
type countingKeys struct {
	payments.Store
	reads atomic.Int64
	fail  atomic.Bool
}

func (c *countingKeys) KeyByHash(ctx context.Context, hash []byte) (payments.KeyAuth, error) {
	c.reads.Add(1)
	if c.fail.Load() {
		return payments.KeyAuth{}, errors.New("connection refused")
	}
	return c.Store.KeyByHash(ctx, hash)
}

// TestAuthCacheUnknownKeys: a key no merchant has is read from the
// database once a TTL, however often it is presented; a real key beside it
// is unaffected.
func TestAuthCacheUnknownKeys(t *testing.T) {
	ctx := context.Background()
	store := &countingKeys{Store: postgres.New(testenv.DB(t))}
	clk := &fakeClock{t: time.Now()}
	api := payments.NewService(store, nil, clk.now, payments.WithAuthCacheTTL(time.Second))
	m, err := api.CreateMerchant(ctx, "Unknown keys", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	k, err := api.CreateKey(ctx, m.ID, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	auth := func(secret string) payments.Code {
		_, _, err := api.Authenticate(ctx, secret, nil)
		return payments.ErrorCode(err)
	}
	const bad = "svc_test_doesnotexist00000000000000000000"
	for i := range 5 {
		if got := auth(bad); got != payments.Unauthorized {
			t.Fatalf("unknown key, try %d: got %q, want unauthorized", i, got)
		}
	}
	if n := store.reads.Load(); n != 1 {
		t.Errorf("unknown key presented 5 times within the TTL: %d database reads, want 1", n)
	}
	if got := auth(k.Secret); got != "" {
		t.Errorf("a real key beside it: got %q, want success", got)
	}

	// A read that failed is no answer: it is not remembered as unknown,
	// and the key works once the database does.
	k2, err := api.CreateKey(ctx, m.ID, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	store.fail.Store(true)
	if _, _, err := api.Authenticate(ctx, k2.Secret, nil); err == nil || payments.ErrorCode(err) != "" {
		t.Errorf("key read during an outage: got %v, want the database's error (no 401, no success)", err)
	}
	store.fail.Store(false)
	if got := auth(k2.Secret); got != "" {
		t.Errorf("key read after the outage: got %q, want success", got)
	}

	clk.add(time.Second)
	store.reads.Store(0)
	if got := auth(bad); got != payments.Unauthorized {
		t.Errorf("unknown key after the TTL: got %q, want unauthorized", got)
	}
	if n := store.reads.Load(); n != 1 {
		t.Errorf("unknown key after the TTL: %d database reads, want 1 (read again)", n)
	}
}

// recordingReads is a KeyReads that counts what Authenticate asks and
// tells, and refuses while refuse is set.
type recordingReads struct {
	admits, missed int
	refuse         bool
}

var errRefused = payments.Errorf(payments.RateLimitExceeded, "refused")

func (r *recordingReads) Admit() error {
	r.admits++
	if r.refuse {
		return errRefused
	}
	return nil
}

func (r *recordingReads) Missed(context.Context) { r.missed++ }

// TestAuthenticateAsksKeyReads: a key's database read is admitted by the
// caller's KeyReads first and reported when it finds nothing; a refusal is
// the answer and reads nothing; keys the cache holds, and strings that
// cannot be keys, involve neither the database nor KeyReads.
func TestAuthenticateAsksKeyReads(t *testing.T) {
	ctx := context.Background()
	store := &countingKeys{Store: postgres.New(testenv.DB(t))}
	clk := &fakeClock{t: time.Now()}
	api := payments.NewService(store, nil, clk.now, payments.WithAuthCacheTTL(time.Second))
	m, err := api.CreateMerchant(ctx, "Key reads", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	k, err := api.CreateKey(ctx, m.ID, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingReads{}
	auth := func(secret string) error {
		_, _, err := api.Authenticate(ctx, secret, r)
		return err
	}

	for _, malformed := range []string{"", "svc_test_", "svc_test_short", "svc_test_doesnotexist0000000000000000000",
		"svc_test_doesnotexist000000000000000000000", "svc_test_doesnotexist0000000000000000000!", "sk_test_doesnotexist00000000000000000000",
		"svc_test_doesnotexist0000000000000000000\u00e9"} {
		if err := auth(malformed); payments.ErrorCode(err) != payments.Unauthorized {
			t.Errorf("%q: got %v, want unauthorized", malformed, err)
		}
	}
	if store.reads.Load() != 0 || r.admits != 0 || r.missed != 0 {
		t.Errorf("malformed keys: %d reads, %d admits, %d missed; want none", store.reads.Load(), r.admits, r.missed)
	}

	const unknown = "svc_live_doesnotexist00000000000000000000"
	for range 3 {
		if err := auth(unknown); payments.ErrorCode(err) != payments.Unauthorized {
			t.Fatalf("unknown key: got %v, want unauthorized", err)
		}
	}
	if store.reads.Load() != 1 || r.admits != 1 || r.missed != 1 {
		t.Errorf("an unknown key 3 times in a TTL: %d reads, %d admits, %d missed; want 1 each", store.reads.Load(), r.admits, r.missed)
	}

	r.refuse = true
	if err := auth("svc_live_doesnotexistEither00000000000000"); err != errRefused {
		t.Errorf("another unknown key while refused: got %v, want the refusal", err)
	}
	if err := auth(k.Secret); err != errRefused {
		t.Errorf("a real key not yet cached while refused: got %v, want the refusal", err)
	}
	if store.reads.Load() != 1 || r.missed != 1 {
		t.Errorf("while refused: %d reads, %d missed; want 1 and 1 (nothing read)", store.reads.Load(), r.missed)
	}
	r.refuse = false
	if err := auth(k.Secret); err != nil {
		t.Fatalf("the real key admitted: %v", err)
	}
	r.refuse = true
	if err := auth(k.Secret); err != nil {
		t.Errorf("the real key cached, while refused: %v, want success", err)
	}
	if err := auth(unknown); payments.ErrorCode(err) != payments.Unauthorized {
		t.Errorf("the unknown key cached, while refused: got %v, want unauthorized", err)
	}
	if store.reads.Load() != 2 || r.missed != 1 {
		t.Errorf("after: %d reads, %d missed; want 2 and 1 (a found key is no miss)", store.reads.Load(), r.missed)
	}

	// Past the TTL the real key is read again, without asking: the cache
	// has seen it found, and a client making keys up cannot have it.
	clk.add(2 * time.Second)
	admits := r.admits
	if err := auth(k.Secret); err != nil {
		t.Errorf("the real key past its TTL, while refused: %v, want success", err)
	}
	if store.reads.Load() != 3 || r.admits != admits {
		t.Errorf("the real key past its TTL: %d reads, %d more admits; want 3 reads and no admit", store.reads.Load(), r.admits-admits)
	}

	// A read that failed is not a miss; one its client abandoned is.
	r.refuse = false
	store.fail.Store(true)
	if err := auth(unknown); err == nil || payments.ErrorCode(err) != "" {
		t.Errorf("a read during an outage: got %v, want the database's error", err)
	}
	if r.missed != 1 {
		t.Errorf("a failed read counted as a miss (%d)", r.missed)
	}
	store.fail.Store(false)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := api.Authenticate(gone, "svc_live_abandoned00000000000000000000000", r); err == nil {
		t.Error("a read whose client has gone: no error")
	}
	if r.missed != 2 {
		t.Errorf("a read whose client has gone: %d missed, want 2", r.missed)
	}
}
