package payments

import (
	"context"
	"sync"
	"time"
)

// Clock is the one source of "now" of the domain, the store's sweeps, the
// worker and the scheduler. Now takes the scope because time belongs to a
// merchant and mode: in production it is real time for everyone; with the
// sandbox processor each merchant and mode has its own clock, real time plus
// an offset stored in PostgreSQL (sandbox_clocks) that only ever grows, so
// that renewals, trials, dunning and session expiry can be tested by moving
// it forward (Store.AdvanceClock) instead of waiting.
//
// Base is the clock's own time, before any merchant's offset: tests inject it
// (a fixed or fake func() time.Time), sweeps pass it to the store, which adds
// each row's offset in SQL, and it times what is no merchant's business: API
// key expiry and the auth cache, content-violation windows (a merchant must
// not age its violations out by moving its own clock), pruning.
//
// Offsets are read through a per-process cache, like authenticated keys
// (authCache) and with the same TTL: a moved clock is seen within a second,
// and the API adds no database round trip to read it, since Authenticate
// primes the cache with the offset read together with the key.
type Clock struct {
	base    func() time.Time
	offsets ClockOffsets // nil: real time for every scope (production)
	ttl     time.Duration
	mu      sync.RWMutex
	m       map[Scope]clockEntry
}

// ClockOffsets reads how far a scope's sandbox clock is ahead of real time
// (zero for a clock never moved).
type ClockOffsets interface {
	ClockOffset(ctx context.Context, sc Scope) (time.Duration, error)
}

type clockEntry struct {
	offset time.Duration
	read   time.Time // real (monotonic) time of the read: a fake base must not keep entries forever
}

// maxClockEntries bounds memory; past it the cache starts over.
const maxClockEntries = 100_000

// NewClock returns a clock on base (time.Now when nil); with offsets, each
// scope's time is base plus its sandbox offset.
func NewClock(base func() time.Time, offsets ClockOffsets) *Clock {
	if base == nil {
		base = time.Now
	}
	return &Clock{base: base, offsets: offsets, ttl: time.Second}
}

// Base returns the time before any merchant's offset.
func (c *Clock) Base() time.Time { return c.base() }

// Now returns the scope's time. When its offset cannot be read (the
// database is down), the last one read is used, else none: the operation
// that asked will usually fail on the same database anyway, and a sandbox
// clock is never worth failing a request for.
func (c *Clock) Now(ctx context.Context, sc Scope) time.Time {
	now := c.base()
	if c.offsets == nil {
		return now
	}
	c.mu.RLock()
	e, ok := c.m[sc]
	c.mu.RUnlock()
	if ok && time.Since(e.read) < c.ttl {
		return now.Add(e.offset)
	}
	off, err := c.offsets.ClockOffset(ctx, sc)
	if err != nil {
		return now.Add(e.offset) // e is the zero entry when there was none
	}
	c.remember(sc, off)
	return now.Add(off)
}

// remember caches a scope's offset, read just now.
func (c *Clock) remember(sc Scope, offset time.Duration) {
	if c.offsets == nil {
		return
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxClockEntries {
		c.m = make(map[Scope]clockEntry)
	}
	c.m[sc] = clockEntry{offset: offset, read: time.Now()}
	c.mu.Unlock()
}
