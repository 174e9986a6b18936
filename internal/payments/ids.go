package payments

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
// random characters (idLen base36 in Go, see timedIDs; base62 before
// 2026-12-08; 32 hex digits when PostgreSQL mints a delivery's id, see
// internal/postgres insertEvents). Its body is
// longer than 32 characters, which no id minted before was.
const timedLen = 12

// NewTimedID returns an id carrying t (see IDTime). Before 1970 (never in
// practice) it returns a NewID, which carries no time.
func NewTimedID(prefix string, t time.Time) string {
	ms := t.UnixMilli()
	if ms < 0 {
		return NewID(prefix)
	}
	return prefix + fmt.Sprintf("%012x", ms) + timedIDs.next(ms)
}

// timedIDs makes the timed ids one process mints for one millisecond
// increase in the order they are minted. Events written together share
// their created_at (customer.subscription.updated, then .deleted, at one
// now) and lists order such ties by id: with random ids the later event
// came first half the time. The first id of a millisecond is random; each
// next one is the last plus a random step of 1 to 2^63, so it stays
// unguessable from the one before, as oklog/ulid's monotonic entropy does.
// The digits are base36, lowercase (24 of them: about 124 bits): strings of
// them sort by their number under any collation, C or en_US alike, where
// base62's cases would not. An overflow (about 2^-61 likely) starts afresh.
var timedIDs monotonic

const base36 = "0123456789abcdefghijklmnopqrstuvwxyz"

type monotonic struct {
	mu   sync.Mutex
	ms   int64
	last [idLen]byte // base36 digits, most significant first
}

func (m *monotonic) next(ms int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ms != m.ms || !m.step() {
		r := randomDigits(base36, idLen)
		for i := range m.last {
			m.last[i] = byte(strings.IndexByte(base36, r[i]))
		}
		m.ms = ms
	}
	out := make([]byte, idLen)
	for i, d := range m.last {
		out[i] = base36[d]
	}
	return string(out)
}

// step adds a random 1..2^63 to last; false on overflow.
func (m *monotonic) step() bool {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux
	}
	carry := binary.BigEndian.Uint64(b[:])>>1 + 1
	for i := idLen - 1; i >= 0 && carry > 0; i-- {
		d := uint64(m.last[i]) + carry%36
		carry /= 36
		if d >= 36 {
			d -= 36
			carry++
		}
		m.last[i] = byte(d)
	}
	return carry == 0
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
func randomBase62(n int) string { return randomDigits(base62, n) }

// randomDigits returns n uniformly random characters of digits (at most
// 256 of them) from crypto/rand.
func randomDigits(digits string, n int) string {
	// Bytes from the largest multiple of len(digits) up are rejected, so
	// every character is equally likely (248 = 4×62, 252 = 7×36).
	limit := 256 - 256%len(digits)
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			panic("crypto/rand: " + err.Error()) // never fails on Linux
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, digits[int(b)%len(digits)])
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
