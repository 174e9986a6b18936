package payments

import (
	"sync"
	"time"
)

// authCache remembers what authentication read for a key hash for a short
// time, saving a database round trip on almost every request. Revocation,
// suspension and unsuspension made through this process drop entries at
// once; made elsewhere (the CLI, another replica) they take effect within
// the TTL. Expiry is checked on every request against the cached time.
//
// A hash no key has is remembered too, for the same TTL and apart from the
// keys' entries (a flood of made-up keys cannot push those out): a client
// retrying with a deleted or mistyped key, or anyone sending the same bad
// key over and over, costs the database one read a TTL instead of one a
// request. It never hides a new key: a key's secret is random and first
// exists when the key is made, so no request can have presented it before.
type authCache struct {
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]authEntry // key: the key's hash

	// unknown has a lock of its own: a flood of made-up keys writes it on
	// every request, and should not hold up the found keys' reads of m.
	unknownMu sync.RWMutex
	unknown   map[string]time.Time // hashes no key has: when that was read
}

type authEntry struct {
	auth KeyAuth
	at   time.Time
}

// maxAuthEntries and maxUnknownEntries bound memory; past either, that
// map starts over.
const (
	maxAuthEntries    = 100_000
	maxUnknownEntries = 10_000
)

func (c *authCache) get(hash []byte, now time.Time) (KeyAuth, bool) {
	if c == nil || c.ttl <= 0 {
		return KeyAuth{}, false
	}
	c.mu.RLock()
	e, ok := c.m[string(hash)]
	c.mu.RUnlock()
	if !ok || now.Sub(e.at) >= c.ttl {
		return KeyAuth{}, false
	}
	return e.auth, true
}

func (c *authCache) put(hash []byte, a KeyAuth, now time.Time) {
	if c == nil || c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxAuthEntries {
		c.m = make(map[string]authEntry)
	}
	c.m[string(hash)] = authEntry{auth: a, at: now}
	c.mu.Unlock()
}

// known says whether hash was a key's when last read, however long ago
// (until its map starts over): a key in use, which a client that made
// keys up cannot have. Its record may be stale; the caller reads it again.
func (c *authCache) known(hash []byte) bool {
	if c == nil || c.ttl <= 0 {
		return false
	}
	c.mu.RLock()
	_, ok := c.m[string(hash)]
	c.mu.RUnlock()
	return ok
}

// isUnknown says whether hash was read as no key's within the TTL.
func (c *authCache) isUnknown(hash []byte, now time.Time) bool {
	if c == nil || c.ttl <= 0 {
		return false
	}
	c.unknownMu.RLock()
	at, ok := c.unknown[string(hash)]
	c.unknownMu.RUnlock()
	return ok && now.Sub(at) < c.ttl
}

// putUnknown remembers that hash is no key's.
func (c *authCache) putUnknown(hash []byte, now time.Time) {
	if c == nil || c.ttl <= 0 {
		return
	}
	c.unknownMu.Lock()
	if c.unknown == nil || len(c.unknown) >= maxUnknownEntries {
		c.unknown = make(map[string]time.Time)
	}
	c.unknown[string(hash)] = now
	c.unknownMu.Unlock()
}

// forget drops the entries of a merchant (keyID "" = all its keys) or of one key.
func (c *authCache) forget(merchantID, keyID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	for h, e := range c.m {
		if (keyID != "" && e.auth.Key.ID == keyID) || (keyID == "" && e.auth.Key.MerchantID == merchantID) {
			delete(c.m, h)
		}
	}
	c.mu.Unlock()
}

// WithAuthCacheTTL sets how long an authenticated key's record is reused,
// and how long a hash no key has is answered 401 without a read (default
// 1 s; 0 reads the database on every request).
func WithAuthCacheTTL(d time.Duration) Option {
	return func(s *Service) { s.auth.ttl = d }
}
