package payments

import (
	"crypto/rand"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// idLen random base62 characters give about 143 bits: ids cannot be guessed,
// so a leaked id names an object without granting anything.
const idLen = 24

// NewID returns prefix followed by idLen random base62 characters.
func NewID(prefix string) string {
	return prefix + randomBase62(idLen)
}

// randomBase62 returns n uniformly random base62 characters from crypto/rand.
func randomBase62(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			panic("crypto/rand: " + err.Error()) // never fails on Linux
		}
		for _, b := range buf {
			// 248 = 4*62: rejecting larger bytes keeps every character equally likely.
			if b < 248 && len(out) < n {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}

// Scope is who a request acts for: one merchant in one mode. Every service and
// store method takes it right after ctx, and every query filters on both.
type Scope struct {
	MerchantID string
	Live       bool
}

// Mode names the scope's mode as the API and CLI spell it.
func (s Scope) Mode() string {
	if s.Live {
		return "live"
	}
	return "test"
}
