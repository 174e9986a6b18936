package ratelimit

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/testenv"
)

// TestARefusalHeldForLeasesIsAnsweredInTime: a check refused while a lease
// of its key is remembered waits for the lease only as long as its caller
// waits: it is answered with its refusal before its deadline, never left
// to run out, which its caller (the API) would take for a Redis that is
// down and let the request through. With room before the deadline it
// waits for the lease and is decided again; without, it is refused at once.
func TestARefusalHeldForLeasesIsAnsweredInTime(t *testing.T) {
	t.Parallel()
	const limit, budget = 1000, 150 * time.Millisecond
	ctx := context.Background()
	for _, remembered := range []time.Duration{50 * time.Millisecond, time.Second} {
		key := payments.NewID("key_")
		a := New(testenv.Redis(t), limit)
		SetLeaseTimes(a, leaseFor, remembered)
		// a spends 1 and leases 10, and hands the lease out; the rest is
		// spent check by check.
		r, err := a.spend(ctx, key, 1, 10)
		if err != nil || r.granted != 11 {
			t.Fatalf("spend with a lease: got %+v, %v; want 11 granted", r, err)
		}
		if r, err := a.spend(ctx, key, limit-11, 0); err != nil || r.granted != limit-11 {
			t.Fatalf("spend the rest: got %+v, %v", r, err)
		}
		b := New(testenv.Redis(t), limit)
		start := time.Now()
		res, err := b.Start(ctx, key, budget).Wait()
		took := time.Since(start)
		if err != nil || res.Allowed {
			t.Errorf("lease remembered %v: got %+v, %v after %v; want refused within the caller's %v", remembered, res, err, took, budget)
		}
		t.Logf("lease remembered %v: refused after %v", remembered, took)
	}
}

// TestARefusalKeepsLeasesOff: once a key's check is refused, no lease of
// its budget is granted for a while, though the budget left would allow
// one: checks refused and decided again after the leases before them meet
// no lease taken in between. After that while, leases are granted again.
func TestARefusalKeepsLeasesOff(t *testing.T) {
	t.Parallel()
	const limit = 1000 // leases of up to 10, while 100 stay left
	ctx := context.Background()
	key := payments.NewID("key_")
	l := New(testenv.Redis(t), limit)
	SetLeaseTimes(l, leaseFor, 30*time.Millisecond) // refusals keep leases off for 90 ms
	if r, err := l.spend(ctx, key, 850, 0); err != nil || r.granted != 850 {
		t.Fatalf("spend 850: got %+v, %v", r, err)
	}
	if r, err := l.spend(ctx, key, 200, 0); err != nil || r.granted != 0 {
		t.Fatalf("spend 200 of 150 left: got %+v, %v; want refused", r, err)
	}
	if r, err := l.spend(ctx, key, 1, 10); err != nil || r.granted != 1 {
		t.Errorf("1 and a lease of 10 just after a refusal, 150 left: got %+v, %v; want 1 granted, no lease", r, err)
	}
	time.Sleep(150 * time.Millisecond)
	if r, err := l.spend(ctx, key, 1, 10); err != nil || r.granted != 11 {
		t.Errorf("1 and a lease of 10 after the refusal's while, 149 left: got %+v, %v; want 11 granted", r, err)
	}
}

// TestALateGiveBackIsDropped: a lease's give-back that reaches Redis after
// Redis stopped remembering the lease is dropped. The key's state may have
// expired and started afresh meanwhile (here: deleted), and must not be
// credited with budget it never spent.
func TestALateGiveBackIsDropped(t *testing.T) {
	t.Parallel()
	const limit = 1000
	ctx := context.Background()
	key := payments.NewID("key_")
	rdb := testenv.Redis(t)
	a := New(rdb, limit)
	SetLeaseTimes(a, 300*time.Millisecond, 100*time.Millisecond) // given back 200 ms late
	r, err := a.spend(ctx, key, 1, 10)
	if err != nil || r.granted != 11 {
		t.Fatalf("spend with a lease: got %+v, %v; want 11 granted", r, err)
	}
	a.lend(key, 10, r.remaining)
	if err := rdb.Del(ctx, redisKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	b := New(testenv.Redis(t), limit)
	if r, err := b.spend(ctx, key, 50, 0); err != nil || r.granted != 50 {
		t.Fatalf("spend 50 afresh: got %+v, %v", r, err)
	}
	time.Sleep(500 * time.Millisecond) // a's lease ends and gives back 10
	r, err = b.spend(ctx, key, 1, 0)
	if want := limit - 51; err != nil || r.remaining != want {
		t.Errorf("one more after the late give-back: got %+v, %v; want %d remaining", r, err, want)
	}
}
