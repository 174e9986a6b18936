package payments

import (
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// idLen random base62 characters give about 143 bits: ids cannot be guessed,
// so a leaked id names an object without granting anything.
const idLen = 24

// NewID returns prefix followed by idLen random base62 characters.
func NewID(prefix string) string {
	return prefix + randomBase62(idLen)
}

// A timed id carries the time of the partition its row lives in (events,
// webhook deliveries: internal/postgres partitions), so that a lookup by id
// reads one partition: prefix, 12 hex digits of the Unix millisecond, then
// random characters (idLen base62 in Go; 32 hex digits when PostgreSQL
// mints a delivery's id, see internal/postgres insertEvents). Its body is
// longer than 32 characters, which no id minted before was.
const timedLen = 12

// NewTimedID returns an id carrying t (see IDTime). Before 1970 (never in
// practice) it returns a NewID, which carries no time.
func NewTimedID(prefix string, t time.Time) string {
	ms := t.UnixMilli()
	if ms < 0 {
		return NewID(prefix)
	}
	return prefix + fmt.Sprintf("%012x", ms) + randomBase62(idLen)
}

// IDTime returns the millisecond a timed id carries, and false for ids
// minted before ids carried their time (and for any other string).
func IDTime(id string) (time.Time, bool) {
	_, body, ok := strings.Cut(id, "_")
	if !ok || len(body) <= 32 {
		return time.Time{}, false
	}
	ms, err := strconv.ParseUint(body[:timedLen], 16, 63)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)).UTC(), true
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
