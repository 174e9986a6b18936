package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
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
// A key is never allowed more than GCRA without leases would allow it:
// nothing is handed out that Redis did not grant; a lease is charged from
// the end of its hand-out on (its grant's call sent leaseFor before), so
// none of it refills before it is handed out, as a fast key's full bucket
// would otherwise let it; and a give-back returns only what was not handed
// out and GCRA has not refilled meanwhile (giveBack), once, and only while
// Redis keeps that lease's own marker (leaseKept), and never so much that
// a lease granted since, still handing out, would sit on slots already
// refilled. Charging a lease ahead costs a key whose state is less than
// leaseFor ahead of the clock up to leaseFor of refill, for leaseFor.
//
// A check is refused only when the budget is spent, across replicas, but
// for the losses below:
//   - A lease is granted only while the budget left after it is at least
//     reserve, a tenth of the hour. Near its limit a key is decided by
//     calls of the checks at hand only, as without leases.
//   - Redis remembers for leasedRemembered that a key's budget was leased.
//     A check that does not fit meanwhile may not fit only because another
//     replica holds unused budget: it waits until every such lease has
//     ended and been given back, and is decided again (Limiter.afterLeases).
//     That refusal keeps new leases of the key off until then, so the
//     second decision is final. Checks that cross the limit together take
//     what is left at once; only those beyond it wait.
//
// What a key can lose, refused early but never allowed more (each time at
// most the leases outstanding, a hundredth of the hour per replica, and
// only as the key crosses its limit):
//   - a lease held by a replica that dies (one that stops gives its leases
//     back at once, Close), or whose give-back reaches Redis later than
//     leaseKept, or whose grant's reply was given up on;
//   - with requests spent since its grant, the one slot of a lease the
//     clock is in when it is given back, and the slots another lease still
//     handing out needs kept (giveBack);
//   - a lease's charge ahead (up to leaseFor of refill, for leaseFor);
//   - a give-back that arrives after the lease was no longer remembered
//     (a Redis slower than about 75 ms a round trip): the check waiting
//     for it has been decided without it;
//   - a refused check whose caller cannot wait for the leases and a second
//     decision (its deadline near), or whose second decision does not
//     answer before its caller's deadline: it keeps its refusal. A second
//     decision Redis ran after its callers were answered spends their
//     budget all the same.
//
// Replicas from before leases (redis_rate's script, the same state) refuse
// without waiting for the new ones' leases.

// Lease timings: a lease hands out its budget for leaseFor, and Redis
// remembers a lease of the key for leasedRemembered, which leaves its
// give-back three times leaseFor (less the round trips) to arrive before a
// refused check stops waiting for it. A refusal keeps leases off for three
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
	l.leaseFor, l.leasedRemembered, l.leaseKept = leaseFor, leasedRemembered, leaseKept
	l.leaseIDs.prefix = strconv.FormatUint(rand.Uint64(), 36) + "."
}

// lease is budget of one key this process spent in Redis ahead of its
// checks, handed out until it ends.
type lease struct {
	key, id   string // the key's, and its name in Redis (spend)
	mu        sync.Mutex
	left      int // budget not yet handed out
	remaining int // the key's budget left in Redis after the lease was taken
	size      int
	ended     bool
	// until is when it stops handing out: leaseFor after its grant's call
	// was made, before Redis read its clock.
	until time.Time
}

// take hands out one request of the lease's budget, if any is left.
func (le *lease) take() (Result, bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended || le.left == 0 || !time.Now().Before(le.until) {
		return Result{}, false
	}
	le.left--
	return Result{Allowed: true, Remaining: le.remaining + le.left}, true
}

// end stops the lease's hand-out and returns what it did not hand out, the
// first time only: its give-back is made once.
func (le *lease) end() (unused int, first bool) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ended {
		return 0, false
	}
	le.ended = true
	return le.left, true
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
// once and none was leased lately (leaseRecalled). A key checked one at a
// time is not leased: Redis answers before its next check.
func (l *Limiter) leaseSize(key string, n int) int {
	if l.maxLease == 0 || l.closed.Load() {
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

// leaseRecalled is how long an ended lease sizes its key's next one: a
// key whose last lease ended longer ago leases as one not leased lately.
const leaseRecalled = time.Second

// lend holds a lease of size for key, with remaining left in Redis after
// it, until until (leaseFor after its grant's call was sent: Redis charged
// its slots from no earlier than then); then gives back what was not
// handed out. id names the lease in Redis (spend).
func (l *Limiter) lend(key string, size, remaining int, id string, until time.Time) {
	le := &lease{key: key, id: id, left: size, remaining: remaining, size: size, until: until}
	l.leases.Store(key, le)
	if l.closed.Load() { // granted as Close ran: it may not have seen it
		l.endLease(le)
		return
	}
	time.AfterFunc(time.Until(until), func() { l.endLease(le) })
}

// endLease ends le, if it has not ended, and gives back what it did not
// hand out.
func (l *Limiter) endLease(le *lease) {
	unused, first := le.end()
	if !first {
		return
	}
	if unused == le.size {
		l.leases.CompareAndDelete(le.key, le) // the key has gone quiet
	} else {
		// Kept to size the key's next lease (leaseSize) while it says
		// something of the key's pace; then forgotten, so that the map
		// holds only keys checked lately.
		time.AfterFunc(leaseRecalled, func() { l.leases.CompareAndDelete(le.key, le) })
	}
	if unused > 0 {
		// Failing, the budget stays spent: the key is refused that
		// much early, never allowed more.
		_, _ = l.giveBack(le.key, le.id, unused)
	}
}

// Close ends this process's leases at once, gives back what they did not
// hand out, and takes no more leases; call it when no more checks come (the
// API's server has drained). A replica that stopped with leases live would
// leave their budget spent (a rolling deploy's every replica, a lease of
// each busy key): refused early near the limit, never allowed more.
// Checks after Close are decided by Redis, as without leases.
func (l *Limiter) Close() {
	l.closed.Store(true)
	var wg sync.WaitGroup
	l.leases.Range(func(_, v any) bool {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.endLease(v.(*lease))
		}()
		return true
	})
	wg.Wait()
}

// giveBack gives back unused requests of key's lease id (the giveBack
// script), and returns how many went back.
func (l *Limiter) giveBack(key, id string, unused int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.leaseKept)
	defer cancel()
	return giveBack.Run(ctx, l.rdb, []string{redisKey(key), markerKey(key, "lease:"+id), markerKey(key, "credits"), markerKey(key, "handout"), markerKey(key, "givebacks")},
		unused, l.burst, periodSeconds, l.leaseKept.Milliseconds()).Int()
}

// spent is the reply of one GCRA call (spend).
type spent struct {
	granted    int           // requests allowed: those of the n that fit, or n plus a lease
	remaining  int           // budget left after them
	retryAfter time.Duration // some refused: until the first of them fits
	leased     time.Duration // some refused: until every lease of the key has ended (0: none)
	lease      string        // the lease's id, when one was granted
	until      time.Time     // the lease hands out until then
}

// spend spends as many of n requests of key's budget as fit, and a lease
// of extra more when all fit and the budget left after it stays at least
// reserve.
func (l *Limiter) spend(ctx context.Context, key string, n, extra int) (spent, error) {
	var id string
	var until time.Time
	if extra > 0 {
		id = l.leaseIDs.prefix + strconv.FormatUint(l.leaseIDs.n.Add(1), 36)
		until = time.Now().Add(l.leaseFor) // before Redis's clock reads its now
	}
	v, err := gcra.Run(ctx, l.rdb,
		[]string{redisKey(key), markerKey(key, "leased"), markerKey(key, "refused"), markerKey(key, "lease:"+id), markerKey(key, "credits"), markerKey(key, "handout"),
			markerKey(key, "grants"), markerKey(key, "givebacks")},
		l.burst, periodSeconds, n, extra, l.reserve, l.leasedRemembered.Milliseconds(),
		3*l.leasedRemembered.Milliseconds(), l.leaseKept.Milliseconds(), l.leaseFor.Milliseconds()).Slice()
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
	return spent{granted: int(granted), remaining: int(remaining), lease: id, until: until,
		retryAfter: time.Duration(retry) * time.Microsecond, leased: time.Duration(max(leased, 0)) * time.Millisecond}, nil
}

// leaseIDs names this process's leases: a random prefix and a counter.
type leaseIDs struct {
	prefix string
	n      atomic.Uint64
}

// leaseKept is how long Redis keeps a lease's own marker, within which its
// give-back counts. A key's state, once spent, lives at least a second
// (its expiry is in whole seconds), so it cannot have expired and started
// afresh before its leases' give-backs.
const leaseKept = time.Second

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
// with whole arguments, as many of the cost granted as fit (a call of
// cost 1 each at this instant would pass for exactly those), and a lease.
//
// A refusal while a lease of the key is remembered keeps new leases off
// for a while (the refused marker), so that checks refused then and
// decided again after the leases before them (afterLeases) meet no lease
// taken in between; a refusal with no lease remembered writes nothing. A
// lease's own marker holds where its slots end (the state right after its
// grant), the key's give-back tally then, and the grant's place among the
// key's leases (a counter), for its give-back.
//
// KEYS: the state, the key's lease marker, the refused marker, this
// lease's own marker, the give-back tally, the latest hand-out end of the
// key's leases, the leases' counter, the record of give-backs by place
// (giveBack). ARGV: burst (the hourly rate too), period (s), cost, lease,
// reserve, the key's lease marker's life (ms), the refused marker's life
// (ms), the lease's own marker's life (ms), leaseFor (ms).
// Reply: granted, remaining, retry after (µs) and the key's lease marker's
// PTTL (ms; -2: none) when some were refused.
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
local granted = cost
if fit < cost then
  granted = math.max(math.floor(fit), 0)
end
local new_tat = tat + granted * interval
local leased = 0
if granted < cost then
  leased = redis.call("PTTL", KEYS[2])
  if leased > 0 then
    redis.call("SET", KEYS[3], 1, "PX", ARGV[7])
  end
elseif extra > 0 and redis.call("EXISTS", KEYS[3]) == 0 then
  -- The lease's slots start no earlier than the end of its hand-out (now
  -- plus leaseFor), so that none has refilled before it is handed out:
  -- a fast key's bucket, full again within that, would otherwise allow
  -- the lease's requests on top of its burst.
  local leased_tat = math.max(new_tat, now + tonumber(ARGV[9]) / 1000) + extra * interval
  if (now - leased_tat) / interval + burst >= reserve then
    granted = cost + extra
    new_tat = leased_tat
    -- never shorter than a lease before it (another replica's, maybe
    -- remembered longer)
    if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[6]) then
      redis.call("SET", KEYS[2], 1, "PX", ARGV[6])
    end
    -- the latest hand-out end of the key's leases, for give-backs
    local handout = now + tonumber(ARGV[9]) / 1000
    if handout > tonumber(redis.call("GET", KEYS[6]) or "0") then
      redis.call("SET", KEYS[6], string.format("%.9f", handout), "PX", ARGV[9] + 1)
    end
    local tally = tonumber(redis.call("GET", KEYS[5]) or "0")
    -- the grant's place among the key's leases; a counter that starts
    -- afresh (no lease for twice leaseKept: every marker of the count
    -- before is gone) starts the record of give-backs afresh too
    local seq = redis.call("INCR", KEYS[7])
    redis.call("PEXPIRE", KEYS[7], 2 * tonumber(ARGV[8]))
    if seq == 1 then
      redis.call("DEL", KEYS[8])
    end
    redis.call("SET", KEYS[4], string.format("%.9f %d %d", new_tat, tally, seq), "PX", ARGV[8])
    if tally > 0 and redis.call("PTTL", KEYS[5]) < 2 * tonumber(ARGV[8]) then
      redis.call("PEXPIRE", KEYS[5], 2 * tonumber(ARGV[8]))
    end
  end
end
if granted > 0 then
  redis.call("SET", KEYS[1], new_tat, "EX", math.ceil(new_tat - now))
end
local retry = 0
if granted < cost then
  retry = math.ceil((granted + 1 - fit) * interval * 1000000)
end
return {granted, math.max(math.floor((now - new_tat) / interval + burst), 0), retry, leased}
`)

// giveBack returns a lease's unused budget: the state's arrival time moves
// back by that many intervals, as if they had never been spent. When
// requests were spent since the grant, only the part GCRA has not refilled
// yet: the unused requests are the lease's last slots, which end where its
// own marker says, earlier by what leases granted before it gave back since
// its grant: the tally's growth, less what leases granted after it gave
// back (their slots lie above its slots; the record of give-backs by place
// says how much). Whatever that record misses counts as a move, which only
// gives back less. Slots
// behind the clock have refilled (the bucket was full at its burst when
// those requests were spent): giving them back would allow more than the
// budget. The slot the clock is in is not given back either: a key may
// lose that one, never gain it. Once: it deletes the lease's own marker, and
// counts only while that marker lives (leaseKept); a later give-back is
// lost (the key refused that much early, never allowed more). KEYS: the
// state, the lease's own marker, the give-back tally, the latest hand-out
// end of the key's leases (the clock is read as no earlier: a lease granted
// since keeps its slots past its hand-out), the record of give-backs by
// place. A marker without a place (written before it was kept) counts
// every give-back since as a move. ARGV: requests, rate, period (s), the
// marker's life (ms; the tally lives twice that).
var giveBack = redis.NewScript(giveBackSrc)

const giveBackSrc = `
redis.replicate_commands()
local lease = redis.call("GET", KEYS[2])
if not lease then
  return 0
end
redis.call("DEL", KEYS[2])
local ends, tally, seq = string.match(lease, "^(%S+) (%S+) ?(%d*)$")
seq = tonumber(seq)
local interval = tonumber(ARGV[3]) / tonumber(ARGV[2])
local given = tonumber(redis.call("GET", KEYS[3]) or "0") - tonumber(tally)
if given < 0 then
  -- the tally started afresh: what moved since is not known
  return 0
end
if seq then
  -- leases granted after this one hold slots above its slots: what they
  -- gave back did not move them
  local later = 0
  for _, g in ipairs(redis.call("ZRANGEBYSCORE", KEYS[5], "(" .. seq, "+inf")) do
    later = later + tonumber(string.match(g, ":(%d+)$"))
  end
  if later > given then
    return 0 -- not the record this tally counted: what moved is not known
  end
  given = given - later
end
local tat = tonumber(redis.call("GET", KEYS[1]) or "0")
ends = tonumber(ends) - given * interval
local back = tonumber(ARGV[1])
if tat > ends + interval / 2 then
  -- spent since the grant: only the slots still ahead of the clock
  local now = redis.call("TIME")
  now = (now[1] - 1483228800) + (now[2] / 1000000)
  -- and none a lease granted since, still handing out, would move onto
  now = math.max(now, tonumber(redis.call("GET", KEYS[4]) or "0"))
  back = math.min(back, math.floor((ends - now) / interval))
end
-- (nothing spent since: the unused go back whole; a state behind the
-- clock reads as a full bucket, as it would have without the lease)
if back <= 0 or tat == 0 then
  return 0
end
redis.call("SET", KEYS[1], tat - back * interval, "KEEPTTL")
redis.call("INCRBY", KEYS[3], back)
-- never shorter: a lease granted since counts on it
if redis.call("PTTL", KEYS[3]) < 2 * tonumber(ARGV[4]) then
  redis.call("PEXPIRE", KEYS[3], 2 * tonumber(ARGV[4]))
end
if seq then
  -- what each lease gave back, by its place, for the leases granted
  -- before it; a record dropped (expired, or a thousand grants old) only
  -- makes a give-back count another's as its own move, giving back less
  redis.call("ZADD", KEYS[5], seq, seq .. ":" .. back)
  redis.call("ZREMRANGEBYSCORE", KEYS[5], "-inf", "(" .. (seq - 1000))
  redis.call("PEXPIRE", KEYS[5], 2 * tonumber(ARGV[4]))
end
return back
`

// periodSeconds is the limit's period: an hour.
const periodSeconds = 3600
