package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key checked faster than Redis answers (many concurrent requests of one
// merchant) is decided from a lease: the GCRA call that decides a run of
// its checks also spends, in the same atomic script, the budget of the
// checks expected in the next leaseFor, and this process hands that budget
// out to them itself, with no round trip. When the lease ends its unused
// budget is given back to Redis (giveBack), as if never spent.
//
// A key is never allowed more than its budget: nothing is handed out that
// Redis did not grant, a give-back returns only what was not handed out,
// and only while Redis remembers the lease.
//
// A check is refused only when the budget is spent, across replicas:
//   - A lease is granted only while the budget left after it is at least
//     reserve, a tenth of the hour. Near its limit a key is decided check
//     by check, as without leases.
//   - Redis remembers for leasedRemembered that a key's budget was leased.
//     A check refused meanwhile may be refused only because another replica
//     holds unused budget: it waits until every such lease has ended and
//     been given back, and is decided again (Limiter.afterLeases). A
//     refusal keeps new leases of the key off until then, so the second
//     decision is final.
//
// The budget a key loses (refused early, never allowed more): a lease held
// by a replica that dies, or whose give-back reaches Redis more than
// leasedRemembered after the grant (a process stalled that long), or whose
// grant's reply was given up on; and a refusal decided at once instead of
// after the leases, when its caller cannot wait for that (its deadline is
// near). Each is at most maxLease, a hundredth of the hour, and only while
// the key crosses its limit. Replicas from before leases (redis_rate's
// script, the same state) refuse without waiting for the new ones' leases.

// Lease timings: a lease hands out its budget for leaseFor, and Redis
// remembers a lease for leasedRemembered, which leaves its give-back
// three times leaseFor to arrive. A refusal keeps leases off for three
// times leasedRemembered (the refused marker): the wait for the leases
// before it and the second decision fit in that.
const (
	leaseFor         = 25 * time.Millisecond
	leasedRemembered = 100 * time.Millisecond
	maxLeaseCap      = 4096
)

// sizeLeases sets the lease bounds for a budget of perHour: leases of at
// most a hundredth of the hour (and maxLeaseCap), granted only while a
// tenth of it stays left. A budget under 100 an hour is never leased.
func (l *Limiter) sizeLeases(perHour int) {
	l.maxLease = min(perHour/100, maxLeaseCap)
	l.reserve = perHour / 10
	l.leaseFor, l.leasedRemembered = leaseFor, leasedRemembered
}

// lease is budget of one key this process spent in Redis ahead of its
// checks, handed out until it ends.
type lease struct {
	mu        sync.Mutex
	left      int // budget not yet handed out
	remaining int // the key's budget left in Redis after the lease was taken
	size      int
	ended     bool
}

// take hands out one request of the lease's budget, if any is left.
func (le *lease) take() (Result, bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended || le.left == 0 {
		return Result{}, false
	}
	le.left--
	return Result{Allowed: true, Remaining: le.remaining + le.left}, true
}

// fromLease decides one check of key from this process's lease, if it
// holds one with budget left.
func (l *Limiter) fromLease(key string) (Result, bool) {
	v, ok := l.leases.Load(key)
	if !ok {
		return Result{}, false
	}
	res, ok := v.(*lease).take()
	res.Limit = l.burst
	return res, ok
}

// answerFromLeases answers the checks a lease taken while they queued
// covers, and returns the rest by key.
func (l *Limiter) answerFromLeases(byKey [][]*check) [][]*check {
	rest := byKey[:0]
	for _, cs := range byKey {
		for len(cs) > 0 {
			res, ok := l.fromLease(cs[0].In)
			if !ok {
				break
			}
			cs[0].Answer(res, nil)
			cs = cs[1:]
		}
		if len(cs) > 0 {
			rest = append(rest, cs)
		}
	}
	return rest
}

// leaseSize is the budget to lease beside the n checks a GCRA call decides
// for key: twice the last lease when it ran out before its end, what it
// handed out when it ended with budget left, and n when n checks came at
// once and none was leased lately. A key checked one at a time is not
// leased: Redis answers before its next check.
func (l *Limiter) leaseSize(key string, n int) int {
	if l.maxLease == 0 {
		return 0
	}
	want := 0
	if v, ok := l.leases.Load(key); ok {
		le := v.(*lease)
		le.mu.Lock()
		if le.ended {
			want = le.size - le.left
		} else {
			want = 2 * le.size
		}
		le.mu.Unlock()
	} else if n > 1 {
		want = n
	}
	return min(want, l.maxLease)
}

// lend holds a lease of size for key, with remaining left in Redis after
// it, until leaseFor has run; then gives back what was not handed out.
func (l *Limiter) lend(key string, size, remaining int) {
	le := &lease{left: size, remaining: remaining, size: size}
	l.leases.Store(key, le)
	time.AfterFunc(l.leaseFor, func() {
		le.mu.Lock()
		le.ended = true
		unused := le.left
		le.mu.Unlock()
		if unused == le.size {
			l.leases.CompareAndDelete(key, le) // the key has gone quiet
		}
		if unused > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), l.leasedRemembered)
			defer cancel()
			// Failing, the budget stays spent: the key is refused that
			// much early, never allowed more.
			_ = giveBack.Run(ctx, l.rdb, []string{redisKey(key), markerKey(key, "leased")}, unused, l.burst, periodSeconds).Err()
		}
	})
}

// spent is the reply of one GCRA call (spend).
type spent struct {
	granted    int           // requests allowed: 0, n, or n plus a lease
	remaining  int           // budget left after them
	retryAfter time.Duration // refused: until the n fit
	leased     time.Duration // refused: until every lease of the key has ended (0: none)
}

// spend spends n requests of key's budget, and a lease of extra more when
// the budget left after it stays at least reserve.
func (l *Limiter) spend(ctx context.Context, key string, n, extra int) (spent, error) {
	v, err := gcra.Run(ctx, l.rdb, []string{redisKey(key), markerKey(key, "leased"), markerKey(key, "refused")},
		l.burst, periodSeconds, n, extra, l.reserve, l.leasedRemembered.Milliseconds(), 3*l.leasedRemembered.Milliseconds()).Slice()
	if err != nil {
		return spent{}, err
	}
	if len(v) != 4 {
		return spent{}, redis.Nil
	}
	granted, _ := v[0].(int64)
	remaining, _ := v[1].(int64)
	retry, _ := v[2].(int64)
	leased, _ := v[3].(int64)
	return spent{granted: int(granted), remaining: int(remaining),
		retryAfter: time.Duration(retry) * time.Microsecond, leased: time.Duration(max(leased, 0)) * time.Millisecond}, nil
}

// redisKey is key's GCRA state in Redis: redis_rate's key, so the budget
// carries over from the replicas that ran it.
func redisKey(key string) string { return "rate:ratelimit:" + key }

// markerKey is a marker of key's state ("leased", "refused"). Its hash tag
// is the state's whole key, so the script's keys hash to one slot of a
// cluster (whose MOVED answers stay the only error there, see
// internal/app's TestRedisClusterUnsupported).
func markerKey(key, what string) string { return "{" + redisKey(key) + "}:" + what }

// gcra is redis_rate's GCRA (its allowN script: the state is the
// theoretical arrival time, in seconds since 2017, under the same key),
// with whole arguments and a lease. A refusal keeps leases of the key off
// for a while (the refused marker), so that checks refused once and
// decided again after the leases before them (afterLeases) meet no lease
// taken in between. KEYS: the state, the lease marker, the refused marker.
// ARGV: burst (the hourly rate too), period (s), cost, lease, reserve,
// the lease marker's life (ms), the refused marker's life (ms).
// Reply: granted, remaining, retry after (µs), the lease marker's PTTL (ms)
// when refused (-2: none).
var gcra = redis.NewScript(`
redis.replicate_commands()
local burst = tonumber(ARGV[1])
local interval = tonumber(ARGV[2]) / burst
local cost = tonumber(ARGV[3])
local extra = tonumber(ARGV[4])
local reserve = tonumber(ARGV[5])

local now = redis.call("TIME")
now = (now[1] - 1483228800) + (now[2] / 1000000)
local tat = tonumber(redis.call("GET", KEYS[1]) or now)
if tat < now then
  tat = now
end
-- requests that fit now
local fit = (now - tat) / interval + burst
if fit < cost then
  redis.call("SET", KEYS[3], 1, "PX", ARGV[7])
  return {0, 0, math.ceil((cost - fit) * interval * 1000000), redis.call("PTTL", KEYS[2])}
end
if extra > 0 and fit - cost - extra >= reserve and redis.call("EXISTS", KEYS[3]) == 0 then
  cost = cost + extra
  -- never shorter than a lease before it (another replica's, maybe
  -- remembered longer)
  if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[6]) then
    redis.call("SET", KEYS[2], 1, "PX", ARGV[6])
  end
end
local new_tat = tat + cost * interval
redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
return {cost, math.floor(fit - cost), 0, 0}
`)

// giveBack returns a lease's unused budget: the state's arrival time moves
// back by that many intervals, as if they had never been spent. Only while
// Redis remembers the lease: a check refused since has waited for the
// give-back that long (afterLeases), and a state that expired and started
// afresh meanwhile (a process stalled for seconds) must not be credited
// with budget it never spent. A give-back that comes later is lost: the
// key is refused that much early, never allowed more. KEYS: the state, the
// lease marker. ARGV: requests, rate, period (s).
var giveBack = redis.NewScript(giveBackSrc)

const giveBackSrc = `
local tat = redis.call("GET", KEYS[1])
if tat and redis.call("EXISTS", KEYS[2]) == 1 then
  redis.call("SET", KEYS[1], tonumber(tat) - ARGV[1] * ARGV[3] / ARGV[2], "KEEPTTL")
end
return 0
`

// periodSeconds is the limit's period: an hour.
const periodSeconds = 3600
