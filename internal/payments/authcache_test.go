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
		_, _, err := api.Authenticate(ctx, k.Secret)
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
		_, _, err := api.Authenticate(ctx, secret)
		return payments.ErrorCode(err)
	}
	const bad = "svc_test_doesnotexist"
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
	if _, _, err := api.Authenticate(ctx, k2.Secret); err == nil || payments.ErrorCode(err) != "" {
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
