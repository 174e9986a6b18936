package ratelimit

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// SetLeaseTimes sets how long l's leases hand out their budget, how long
// Redis remembers a lease of l's key, and how long it keeps the lease's
// own marker (tests that must see a lease end).
func SetLeaseTimes(l *Limiter, leaseFor, remembered, kept time.Duration) {
	l.leaseFor, l.leasedRemembered, l.leaseKept = leaseFor, remembered, kept
}

// IsGiveBack says whether cmd is a call of the give-back script (EVALSHA
// or EVAL).
func IsGiveBack(cmd redis.Cmder) bool {
	args := cmd.Args()
	return len(args) > 1 && (args[1] == giveBack.Hash() || args[1] == giveBackSrc)
}

// SetStrikesClock sets the clock s's refusals and probations run on (the
// strikes themselves are counted on Redis's).
func SetStrikesClock(s *Strikes, now func() time.Time) { s.now = now }

// StrikeHere counts a strike of client in s's process alone, as s does
// without Redis.
func StrikeHere(s *Strikes, client string) Result { return s.strikeHere(client) }
