package payments

import (
	"strings"
	"testing"
	"time"
)

// Timed ids minted in one millisecond increase in the order they are
// minted (events recorded together sort by id within their created_at),
// under byte order and under any collation (lowercase base36 digits); a
// new millisecond starts from a random point.
func TestTimedIDsIncreaseWithinAMillisecond(t *testing.T) {
	at := time.UnixMilli(1_800_000_000_000)
	prev := NewTimedID("evt_", at)
	seen := map[string]bool{prev: true}
	for i := 0; i < 10000; i++ {
		id := NewTimedID("evt_", at)
		if id <= prev {
			t.Fatalf("id %d: %s after %s, want greater", i, id, prev)
		}
		if seen[id] {
			t.Fatalf("id %s minted twice", id)
		}
		seen[id] = true
		if tail := id[len("evt_")+timedLen:]; len(tail) != idLen || strings.Trim(tail, base36) != "" {
			t.Fatalf("id %s: want %d lowercase base36 digits after the time", id, idLen)
		}
		if got, ok := IDTime(id); !ok || !got.Equal(at) {
			t.Fatalf("IDTime(%s) = %v %v, want %v", id, got, ok, at)
		}
		prev = id
	}
	// Another millisecond: random again, not a step on from the last (64
	// uniform first digits take fewer than 10 of 36 values with a chance
	// under 10^-20).
	first := map[byte]bool{}
	for i := 0; i < 64; i++ {
		first[NewTimedID("evt_", at.Add(time.Duration(i+1)*time.Millisecond))[len("evt_")+timedLen]] = true
	}
	if len(first) < 10 {
		t.Errorf("64 new milliseconds' ids took %d first digits, want a random spread", len(first))
	}
}
