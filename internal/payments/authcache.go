package payments

import (
	"sync"
	"time"
)

// authCache remembers what authentication read for a key hash for a short
// time, saving a database round trip on almost every request. Revocation,
// suspension and unsuspension made through this process drop entries at
// once; made elsewhere (the CLI, another replica) they take effect within
// the TTL. Expiry is checked on every request against the cached time, and
// unknown keys are never cached.
type authCache struct {
	ttl time.Duration
	mu  sync.RWMutex
	m   map[string]authEntry // key: the key's hash
}

type authEntry struct {
	auth KeyAuth
	at   time.Time
}

// maxAuthEntries bounds memory; past it the cache starts over.
const maxAuthEntries = 100_000

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

// WithAuthCacheTTL sets how long an authenticated key's record is reused
// (default 1 s; 0 reads the database on every request).
func WithAuthCacheTTL(d time.Duration) Option {
	return func(s *Service) { s.auth.ttl = d }
}
