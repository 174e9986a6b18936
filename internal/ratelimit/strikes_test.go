package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
	"paysvc/internal/testenv"
)

// manualClock is a clock a test moves.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestStrikes: a client is refused from the strike past its budget, in
// the replica that struck, until the budget takes one again, and then let
// through one request per refill interval until its probation ends;
// another replica refuses it from its own next strike; other clients are
// not affected. A refusal costs no Redis call (its client is refused even
// with Redis gone). The budget is counted in Redis, on a period long
// enough that no strike of the test refills; refusals run on a clock the
// test moves.
func TestStrikes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix := payments.NewID("strikes_")
	const n, period = 3, time.Hour // refills one every 20 minutes
	const interval = period / n
	clk := &manualClock{t: time.Now()}
	replica := func() *ratelimit.Strikes {
		s := ratelimit.NewStrikes(testenv.Redis(t), prefix, n, period)
		ratelimit.SetStrikesClock(s, clk.now)
		return s
	}
	a, b := replica(), replica()
	const client = "203.0.113.5"

	for i := range n {
		if fresh, err := a.Strike(ctx, client); err != nil || fresh {
			t.Fatalf("strike %d of %d: fresh %v, %v", i+1, n, fresh, err)
		}
		if _, refused := a.Refusing(client); refused {
			t.Fatalf("refused after strike %d of a budget of %d", i+1, n)
		}
	}
	if fresh, err := a.Strike(ctx, client); err != nil || !fresh {
		t.Fatalf("the strike past the budget: fresh %v, %v; want a fresh refusal", fresh, err)
	}
	left, refused := a.Refusing(client)
	if !refused || left <= 0 || left > interval {
		t.Fatalf("after %d strikes: refused %v for %v, want refused for up to %v", n+1, refused, left, interval)
	}
	if fresh, err := a.Strike(ctx, client); err != nil || fresh {
		t.Errorf("a strike while refused: fresh %v, %v; want a refusal that is not fresh", fresh, err)
	}
	if _, refused := a.Refusing("198.51.100.9"); refused {
		t.Error("another client is refused")
	}
	if _, refused := b.Refusing(client); refused {
		t.Error("a replica that has not struck the client refuses it")
	}
	if _, err := b.Strike(ctx, client); err != nil {
		t.Fatal(err)
	}
	if _, refused := b.Refusing(client); !refused {
		t.Error("the other replica's strike past the shared budget did not refuse the client")
	}

	// A refusal is decided in the process: with its Redis closed, a
	// refused client is still refused, and a strike fails without
	// refusing anyone.
	rdb := testenv.Redis(t)
	c := ratelimit.NewStrikes(rdb, prefix, n, period)
	if _, err := c.Strike(ctx, client); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	if _, refused := c.Refusing(client); !refused {
		t.Error("refused client not refused without Redis")
	}
	if _, err := c.Strike(ctx, "192.0.2.1"); err == nil {
		t.Error("a strike without Redis reported no error")
	}
	if _, refused := c.Refusing("192.0.2.1"); refused {
		t.Error("a strike that failed refused its client")
	}

	// When the refusal ends the client is on probation: one request goes,
	// and the next waits the refill interval, until the probation ends
	// (ten intervals after the last refusal's end).
	left, _ = a.Refusing(client)
	clk.add(left + time.Millisecond)
	for turn := range 3 {
		if _, refused := a.Refusing(client); refused {
			t.Errorf("probation, turn %d: its first request is refused", turn+1)
		}
		if wait, refused := a.Refusing(client); !refused || wait != interval {
			t.Errorf("probation, turn %d: the request after it: refused %v for %v, want refused for %v", turn+1, refused, wait, interval)
		}
		clk.add(interval)
	}
	clk.add(10 * interval)
	for i := range 3 {
		if _, refused := a.Refusing(client); refused {
			t.Errorf("after probation, request %d is refused", i+1)
		}
	}
}

// TestStrikesWithoutRedis: with Redis gone, strikes are counted in the
// process by the same rule: the budget's n strikes go (each reporting
// Redis's error), the next refuses the client (a fresh refusal) for the
// refill interval, and a strike an interval later goes again; another
// client has its own budget.
func TestStrikesWithoutRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, period = 3, time.Hour
	const interval = period / n
	rdb := testenv.Redis(t)
	s := ratelimit.NewStrikes(rdb, payments.NewID("strikes_"), n, period)
	clk := &manualClock{t: time.Now()}
	ratelimit.SetStrikesClock(s, clk.now)
	rdb.Close()
	const client = "203.0.113.7"
	for i := range n {
		if fresh, err := s.Strike(ctx, client); err == nil || fresh {
			t.Fatalf("strike %d of %d without Redis: fresh %v, %v; want Redis's error and no refusal", i+1, n, fresh, err)
		}
		if _, refused := s.Refusing(client); refused {
			t.Fatalf("refused after strike %d of %d", i+1, n)
		}
	}
	if fresh, err := s.Strike(ctx, client); err == nil || !fresh {
		t.Fatalf("the strike past the budget without Redis: fresh %v, %v; want a fresh refusal", fresh, err)
	}
	if left, refused := s.Refusing(client); !refused || left <= 0 || left > interval {
		t.Fatalf("refused %v for %v, want refused for up to %v", refused, left, interval)
	}
	if _, err := s.Strike(ctx, "198.51.100.20"); err == nil {
		t.Fatal("no error without Redis")
	}
	if _, refused := s.Refusing("198.51.100.20"); refused {
		t.Error("another client is refused")
	}

	// The rule itself, on a client of its own: n at once, then one per
	// refill interval, and n again after a period.
	const other = "192.0.2.77"
	for i := range n {
		if res := ratelimit.StrikeHere(s, other); !res.Allowed {
			t.Fatalf("local strike %d of %d refused", i+1, n)
		}
	}
	for range 3 {
		if res := ratelimit.StrikeHere(s, other); res.Allowed || res.RetryAfter != interval {
			t.Fatalf("local strike past the budget: got %+v, want refused for %v", res, interval)
		}
		clk.add(interval)
		if res := ratelimit.StrikeHere(s, other); !res.Allowed {
			t.Fatalf("local strike a refill interval later: got %+v, want allowed", res)
		}
	}
	clk.add(period)
	for i := range n {
		if res := ratelimit.StrikeHere(s, other); !res.Allowed {
			t.Fatalf("a period later, local strike %d of %d refused", i+1, n)
		}
	}
}
