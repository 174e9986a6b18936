package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Strikes counts a client's strikes (the API: authentications whose key
// does not exist) in a Window shared by every replica, and refuses the
// client in this process, with no Redis call, from a strike the Window
// refused until the Window would take one again. A strike costs a Redis
// call; a refusal costs a map read, so a client past its budget costs
// little but that.
//
// A strike comes after the work it counts (a key's read), so when a
// refusal ends, every request the client has in flight would start its
// work before the first of their strikes is refused: a client with 32
// connections would do 32 reads per refusal, not one. So a refused client
// is then on probation: one request at a time goes, one per the budget's
// refill interval (period/n), until probation has passed since its last
// refusal (ten intervals, and at least minProbation).
//
// Each replica learns of a refusal from a strike of its own: a client
// spread over n replicas may strike up to n more times than the budget
// while it is refused, once per replica.
//
// Without Redis (an error, or the API's breaker open) a strike is counted
// in this process instead, by the same rule (GCRA, n per period, a burst
// of n): during an outage a client gets the budget once per replica, not
// once in all, but a flood of made-up keys still meets a limit.
type Strikes struct {
	w         *Window
	now       func() time.Time
	n         int
	interval  time.Duration // the budget's refill interval, period/n
	probation time.Duration

	mu      sync.Mutex
	refused map[string]refusal   // by client
	local   map[string]time.Time // by client: GCRA's theoretical arrival time, without Redis
}

// refusal is a refused client's state in this process.
type refusal struct {
	until     time.Time // refused until then
	probation time.Time // from until to then, one request per interval
}

// maxRefused bounds the clients remembered as refused; past it, those
// whose refusal and probation ended are forgotten, and if that is not
// enough, all of them: each is refused again at its next strike.
const maxRefused = 10_000

// minProbation is the shortest probation after a refusal.
const minProbation = 10 * time.Second

// NewStrikes returns strikes of n per period per client under prefix (GCRA
// with a burst of n, as Window).
func NewStrikes(rdb redis.UniversalClient, prefix string, n int, period time.Duration) *Strikes {
	interval := period / time.Duration(n)
	return &Strikes{
		w: NewWindow(rdb, prefix, n, period), now: time.Now, n: n, interval: interval,
		probation: max(minProbation, 10*interval), refused: map[string]refusal{}, local: map[string]time.Time{},
	}
}

// Refusing says whether client's next request is refused, and for how long
// yet. On probation a request that is not refused takes the client's turn:
// the next one is refused for an interval.
func (s *Strikes) Refusing(client string) (time.Duration, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refused[client]
	switch {
	case !ok:
		return 0, false
	case now.Before(r.until):
		return r.until.Sub(now), true
	case now.Before(r.probation):
		r.until = now.Add(s.interval)
		s.refused[client] = r
		return 0, false
	default:
		delete(s.refused, client)
		return 0, false
	}
}

// Strike spends one of client's budget. When the Window refuses it, the
// client is refused from now for the Window's RetryAfter, then on
// probation; fresh says whether the client was neither refused nor on
// probation before (a new refusal, worth telling an operator). An error
// is Redis's: the strike was counted in this process alone.
func (s *Strikes) Strike(ctx context.Context, client string) (fresh bool, err error) {
	res, err := s.w.Allow(ctx, client)
	if err != nil {
		res = s.strikeHere(client)
	}
	if res.Allowed {
		return false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	prune(s.refused, maxRefused-1, func(r refusal) bool { return !r.probation.After(now) })
	old, was := s.refused[client]
	until := now.Add(res.RetryAfter)
	s.refused[client] = refusal{until: until, probation: until.Add(s.probation)}
	return !was || !old.probation.After(now), err
}

// strikeHere counts a strike without Redis: GCRA on this process's clock,
// in a map bounded as refused is.
func (s *Strikes) strikeHere(client string) Result {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	tat := s.local[client]
	if tat.Before(now) {
		tat = now
	}
	if wait := tat.Sub(now) - time.Duration(s.n-1)*s.interval; wait > 0 {
		return Result{RetryAfter: wait}
	}
	// Full, it forgets the clients whose budget has refilled, and all of
	// them if that frees less than a quarter (each then starts with a full
	// budget), so that a full map is not scanned at every strike.
	prune(s.local, maxRefused*3/4, func(t time.Time) bool { return !t.After(now) })
	s.local[client] = tat.Add(s.interval)
	return Result{Allowed: true}
}

// prune bounds a map of clients at maxRefused: once full, it deletes the
// entries that are over, and clears it if more than keep remain.
func prune[V any](m map[string]V, keep int, over func(V) bool) {
	if len(m) < maxRefused {
		return
	}
	for c, v := range m {
		if over(v) {
			delete(m, c)
		}
	}
	if len(m) > keep {
		clear(m)
	}
}
