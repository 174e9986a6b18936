package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
	"paysvc/internal/testenv"
)

// TestStrikes: a client is refused from the strike past its budget, in
// the replica that struck, until the budget takes one again, and then let
// through one request per refill interval until its probation ends;
// another replica refuses it from its own next strike; other clients are
// not affected. A refusal costs no Redis call (its client is refused even
// with Redis gone).
func TestStrikes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix := payments.NewID("strikes_")
	const n, period = 3, 1500 * time.Millisecond // one back every 500 ms
	const probation = time.Second
	a := ratelimit.NewStrikes(testenv.Redis(t), prefix, n, period)
	ratelimit.SetProbation(a, probation)
	b := ratelimit.NewStrikes(testenv.Redis(t), prefix, n, period)

	for i := range n {
		if err := a.Strike(ctx, "203.0.113.5"); err != nil {
			t.Fatal(err)
		}
		if _, refused := a.Refusing("203.0.113.5"); refused {
			t.Fatalf("refused after strike %d of a budget of %d", i+1, n)
		}
	}
	if err := a.Strike(ctx, "203.0.113.5"); err != nil {
		t.Fatal(err)
	}
	left, refused := a.Refusing("203.0.113.5")
	if !refused || left <= 0 || left > period/n {
		t.Fatalf("after %d strikes: refused %v for %v, want refused for up to %v", n+1, refused, left, period/n)
	}
	if _, refused := a.Refusing("198.51.100.9"); refused {
		t.Error("another client is refused")
	}
	if _, refused := b.Refusing("203.0.113.5"); refused {
		t.Error("a replica that has not struck the client refuses it")
	}
	if err := b.Strike(ctx, "203.0.113.5"); err != nil {
		t.Fatal(err)
	}
	if _, refused := b.Refusing("203.0.113.5"); !refused {
		t.Error("the other replica's strike past the shared budget did not refuse the client")
	}

	// A refusal is decided in the process: with its Redis closed, a
	// refused client is still refused, and a strike fails without
	// refusing anyone.
	rdb := testenv.Redis(t)
	c := ratelimit.NewStrikes(rdb, prefix, n, period)
	if err := c.Strike(ctx, "203.0.113.5"); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	if _, refused := c.Refusing("203.0.113.5"); !refused {
		t.Error("refused client not refused without Redis")
	}
	if err := c.Strike(ctx, "192.0.2.1"); err == nil {
		t.Error("a strike without Redis reported no error")
	}
	if _, refused := c.Refusing("192.0.2.1"); refused {
		t.Error("a strike that failed refused its client")
	}

	// When the refusal ends the client is on probation: one request goes,
	// and the next waits a refill interval, until the probation ends.
	time.Sleep(left + 10*time.Millisecond)
	if _, refused := a.Refusing("203.0.113.5"); refused {
		t.Errorf("still refused after its %v", left)
	}
	if wait, refused := a.Refusing("203.0.113.5"); !refused || wait > period/n {
		t.Errorf("on probation, the request after one that went: refused %v for %v, want refused for up to %v", refused, wait, period/n)
	}
	time.Sleep(period/n + 10*time.Millisecond)
	if _, refused := a.Refusing("203.0.113.5"); refused {
		t.Error("on probation, a request a refill interval later is refused")
	}
	if _, refused := a.Refusing("203.0.113.5"); !refused {
		t.Error("on probation, the request right after it is not refused")
	}
	time.Sleep(probation)
	for i := range 3 {
		if _, refused := a.Refusing("203.0.113.5"); refused {
			t.Errorf("after probation, request %d is refused", i+1)
		}
	}
}
