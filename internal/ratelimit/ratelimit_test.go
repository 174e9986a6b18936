package ratelimit_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
	"paysvc/internal/testenv"
)

// TestExactAcrossReplicas: two API replicas (two clients, two limiters)
// spend one key's budget of 1,000 with 1,500 concurrent requests, whose
// checks their batchers put in shared pipelines: exactly 1,000 are allowed.
func TestExactAcrossReplicas(t *testing.T) {
	t.Parallel()
	const limit, requests = 1000, 1500
	key := payments.NewID("key_")
	var limiters []*ratelimit.Limiter
	for range 2 {
		limiters = append(limiters, ratelimit.New(testenv.Redis(t), limit))
	}
	var (
		allowed atomic.Int64
		wg      sync.WaitGroup
	)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := limiters[i%2].Allow(context.Background(), key)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Errorf("got %d requests allowed, want exactly %d", got, limit)
	}
	// The 1,001st, once the others are done, is refused too.
	if res, err := limiters[0].Allow(context.Background(), key); err != nil || res.Allowed || res.RetryAfter <= 0 {
		t.Errorf("one more: got %+v, %v; want refused with a RetryAfter", res, err)
	}
}

// TestBudgetWithHangingRedis: a Redis that accepts connections and never
// answers makes each check fail within its context's budget, also while
// other checks wait in the same batch, and the checks after it do not
// queue behind the hung one for longer than their own budget.
func TestBudgetWithHangingRedis(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // read nothing, answer nothing
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
	defer rdb.Close()
	l := ratelimit.New(rdb, 1000)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := l.Allow(ctx, "key_hang")
			if took := time.Since(start); err == nil || took > 400*time.Millisecond {
				t.Errorf("check %d: got error %v after %v, want an error within about 100ms", i, err, took)
			}
		}()
	}
	wg.Wait()
}

// TestScriptFlushed: after Redis has lost its script cache (a restart, a
// failover to a replica that never ran the script) the batched EVALSHAs
// answer NOSCRIPT and redis_rate sends the script again: every check
// still gets an answer, none an error.
func TestScriptFlushed(t *testing.T) {
	rdb := testenv.Redis(t)
	l := ratelimit.New(rdb, 1000)
	key := payments.NewID("key_")
	for round := range 2 {
		if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, err := l.Allow(context.Background(), key); err != nil || !res.Allowed {
					t.Errorf("round %d, check %d after SCRIPT FLUSH: got %+v, %v; want allowed", round, i, res, err)
				}
			}()
		}
		wg.Wait()
	}
}
