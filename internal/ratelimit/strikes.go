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
// nothing but that.
//
// Each replica learns of a refusal from a strike of its own: a client
// spread over n replicas may strike up to n more times than the budget
// while it is refused, once per replica.
type Strikes struct {
	w   *Window
	now func() time.Time

	mu      sync.Mutex
	refused map[string]time.Time // client → until when it is refused
}

// maxRefused bounds the clients remembered as refused; past it, those
// whose refusal ended are forgotten, and if that is not enough, all of
// them: each is refused again at its next strike.
const maxRefused = 10_000

// NewStrikes returns strikes of n per period per client under prefix (GCRA
// with a burst of n, as Window).
func NewStrikes(rdb redis.UniversalClient, prefix string, n int, period time.Duration) *Strikes {
	return &Strikes{w: NewWindow(rdb, prefix, n, period), now: time.Now, refused: map[string]time.Time{}}
}

// Refusing says whether client is refused, and for how long yet.
func (s *Strikes) Refusing(client string) (time.Duration, bool) {
	s.mu.Lock()
	until, ok := s.refused[client]
	s.mu.Unlock()
	if !ok {
		return 0, false
	}
	left := until.Sub(s.now())
	return left, left > 0
}

// Strike spends one of client's budget; when the Window refuses it, the
// client is refused from now for the Window's RetryAfter. An error is
// Redis's: the strike is not counted.
func (s *Strikes) Strike(ctx context.Context, client string) error {
	res, err := s.w.Allow(ctx, client)
	if err != nil || res.Allowed {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) >= maxRefused {
		for c, until := range s.refused {
			if !until.After(now) {
				delete(s.refused, c)
			}
		}
		if len(s.refused) >= maxRefused {
			clear(s.refused)
		}
	}
	s.refused[client] = now.Add(res.RetryAfter)
	return nil
}
