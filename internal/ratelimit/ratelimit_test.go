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
// answer NOSCRIPT and the script is sent again: every check
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

// scriptCalls counts the GCRA script calls a client sends (EVALSHA and
// EVAL), alone or in pipelines; not a lease's give-back, which decides
// nothing.
type scriptCalls struct{ n atomic.Int64 }

func (s *scriptCalls) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if name := c.Name(); (name == "evalsha" || name == "eval") && !ratelimit.IsGiveBack(c) {
			s.n.Add(1)
		}
	}
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.count(cmds...)
		return next(ctx, cmds)
	}
}

// checkAtOnce runs n concurrent checks of key and returns their results.
func checkAtOnce(t *testing.T, l *ratelimit.Limiter, key string, n int) []ratelimit.Result {
	t.Helper()
	results := make([]ratelimit.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := l.Allow(context.Background(), key)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	wg.Wait()
	return results
}

// TestSameKeyChecksDecidedTogether: concurrent checks of one key are
// decided by fewer script calls than checks, and each gets its own place
// in the budget (Remaining below the limit, none above it).
func TestSameKeyChecksDecidedTogether(t *testing.T) {
	t.Parallel()
	rdb := testenv.Redis(t)
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	l := ratelimit.New(rdb, 1000)
	key := payments.NewID("key_")
	results := checkAtOnce(t, l, key, 300)
	// Each call may also lease up to a hundredth of the hour (10) ahead,
	// and a lease that ended before its budget was handed out is given
	// back a moment later: until then it is spent.
	least := 700 - 10*int(calls.n.Load())
	for _, res := range results {
		if !res.Allowed || res.Remaining < least || res.Remaining > 999 {
			t.Fatalf("got %+v; want allowed with %d to 999 remaining (%d script calls)", res, least, calls.n.Load())
		}
	}
	if got := calls.n.Load(); got >= 300 {
		t.Errorf("300 concurrent checks of one key took %d script calls; want fewer", got)
	}
	t.Logf("300 concurrent checks: %d script calls", calls.n.Load())
}

// TestRefusedTogether: once a key's budget is spent, concurrent checks are
// refused by one script call, each with the wait of a single check: no
// more than one emission interval (an hour / the limit).
func TestRefusedTogether(t *testing.T) {
	t.Parallel()
	const limit = 10 // one request refills every 6 minutes
	rdb := testenv.Redis(t)
	l := ratelimit.New(rdb, limit)
	key := payments.NewID("key_")
	for i := range limit {
		if res, err := l.Allow(context.Background(), key); err != nil || !res.Allowed {
			t.Fatalf("check %d: got %+v, %v; want allowed", i, res, err)
		}
	}
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	for _, res := range checkAtOnce(t, l, key, 50) {
		if res.Allowed || res.Remaining != 0 || res.RetryAfter <= 5*time.Minute || res.RetryAfter > 6*time.Minute {
			t.Fatalf("got %+v; want refused with a RetryAfter of about 6 minutes", res)
		}
	}
	if got := calls.n.Load(); got >= 50 {
		t.Errorf("50 refused checks took %d script calls; want fewer", got)
	}
}

// TestCrossingTheLimitTogether: concurrent checks that cross the limit get
// exactly the budget that was left, no more and no fewer.
func TestCrossingTheLimitTogether(t *testing.T) {
	t.Parallel()
	const limit, spent, concurrent = 100, 93, 40
	l := ratelimit.New(testenv.Redis(t), limit)
	key := payments.NewID("key_")
	for i := range spent {
		if res, err := l.Allow(context.Background(), key); err != nil || !res.Allowed {
			t.Fatalf("check %d: got %+v, %v; want allowed", i, res, err)
		}
	}
	allowed := 0
	for _, res := range checkAtOnce(t, l, key, concurrent) {
		if res.Allowed {
			allowed++
		} else if res.RetryAfter <= 0 {
			t.Errorf("refused %+v without a RetryAfter", res)
		}
	}
	if allowed != limit-spent {
		t.Errorf("got %d of %d concurrent checks allowed with %d left; want exactly %d", allowed, concurrent, limit-spent, limit-spent)
	}
}

// TestRefusingAfterARefusal: a key refused is Refusing until its refusal's
// RetryAfter has run; a key allowed, or another key, is not.
func TestRefusingAfterARefusal(t *testing.T) {
	t.Parallel()
	const limit = 3600 // one request refills every second
	l := ratelimit.New(testenv.Redis(t), limit)
	key, other := payments.NewID("key_"), payments.NewID("key_")
	ctx := context.Background()
	for _, res := range checkAtOnce(t, l, key, limit) { // spend the hour at once
		if !res.Allowed {
			t.Fatalf("spending the budget: got %+v; want allowed", res)
		}
	}
	if l.Refusing(key) {
		t.Fatal("Refusing before any refusal: got true")
	}
	res, err := l.Allow(ctx, key)
	if err != nil || res.Allowed {
		t.Fatalf("check over the limit: got %+v, %v; want refused", res, err)
	}
	refused := time.Now()
	if !l.Refusing(key) {
		t.Error("Refusing right after a refusal: got false")
	}
	if l.Refusing(other) {
		t.Error("Refusing for another key: got true")
	}
	time.Sleep(time.Until(refused.Add(res.RetryAfter + 50*time.Millisecond)))
	if l.Refusing(key) {
		t.Errorf("Refusing %v after a refusal with RetryAfter %v: got true", time.Since(refused), res.RetryAfter)
	}
}

// sends counts a client's sends of the GCRA script's EVALSHA to Redis: a
// command sent alone and a pipeline each count once (the connections'
// set-up commands do not count). The first send is held until firstHeld
// is closed; holding is closed once it is held.
type sends struct {
	n         atomic.Int64
	alone     atomic.Int64 // script calls sent by themselves
	firstHeld chan struct{}
	holding   chan struct{} // closed once the first send is held
	once      sync.Once
}

func (s *sends) hold() {
	s.once.Do(func() {
		close(s.holding)
		<-s.firstHeld
	})
}

func (s *sends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			s.hold()
			s.n.Add(1)
			s.alone.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s *sends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				s.hold()
				s.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestManyKeysDecidedInOneRoundTrip: checks of different keys (many
// merchants' requests) queued while a check is in Redis are decided next,
// all in one pipeline: one round trip for the lot, not one for the first
// key and one for the rest. Every check is allowed with its key's budget
// less one (to GCRA's rounding).
func TestManyKeysDecidedInOneRoundTrip(t *testing.T) {
	t.Parallel()
	const keys = 40
	rdb := testenv.Redis(t)
	s := &sends{firstHeld: make(chan struct{}), holding: make(chan struct{})}
	rdb.AddHook(s)
	l := ratelimit.New(rdb, 1000)
	results := make([]ratelimit.Result, keys+1)
	errs := make([]error, keys+1)
	var wg sync.WaitGroup
	check := func(i int) {
		wg.Go(func() { results[i], errs[i] = l.Allow(context.Background(), payments.NewID("key_")) })
	}
	check(0) // its check goes alone and is held in the hook
	<-s.holding
	for i := 1; i <= keys; i++ {
		check(i) // queued behind the held one
	}
	time.Sleep(500 * time.Millisecond) // every check has queued (a loaded machine pauses for 100 ms and more)
	before := s.n.Load()
	close(s.firstHeld)
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil || !res.Allowed || res.Remaining < 998 {
			t.Fatalf("check %d: got %+v, %v; want allowed with 998 or 999 remaining (GCRA's rounding)", i, res, errs[i])
		}
	}
	if before != 0 {
		t.Fatalf("sends before the first was let go: got %d, want 0 (held)", before)
	}
	// The held send, then the queued keys' one pipeline.
	if got, alone := s.n.Load(), s.alone.Load(); got != 2 || alone != 1 {
		t.Errorf("%d keys' checks queued behind one: got %d sends (%d script calls alone), want 2 (the first alone, then one pipeline)", keys, got, alone)
	}
}

// TestLeaseDecidesWithoutRedis: after concurrent checks of a key the
// process holds a lease of its budget, and decides the next checks at
// once, with no script call, each with one less Remaining, until the lease
// runs out. When a lease ends its unused budget goes back to Redis:
// another replica then finds the key's budget spent by exactly the checks
// allowed.
func TestLeaseDecidesWithoutRedis(t *testing.T) {
	t.Parallel()
	const limit = 10_000 // leases of up to 100; one request refills in 0.36 s
	rdb := testenv.Redis(t)
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	l := ratelimit.New(rdb, limit)
	ratelimit.SetLeaseTimes(l, 200*time.Millisecond, time.Second, 2*time.Second)
	key := payments.NewID("key_")
	ctx := context.Background()
	for _, res := range checkAtOnce(t, l, key, 50) {
		if !res.Allowed {
			t.Fatalf("got %+v; want allowed", res)
		}
	}
	allowed, fromLease, before, prev := 50, 0, calls.n.Load(), 0
	for {
		sent := calls.n.Load()
		k := l.Start(ctx, key, 0)
		if !k.Decided() { // the lease ran out: this one goes to Redis
			if got := sent - before; got != 0 {
				t.Errorf("%d checks decided from a lease made %d script calls; want 0", fromLease, got)
			}
			if res, err := k.Wait(); err != nil || !res.Allowed {
				t.Fatalf("check after the lease: got %+v, %v; want allowed", res, err)
			}
			allowed++
			break
		}
		res, err := k.Wait()
		if err != nil || !res.Allowed || res.Limit != limit || (fromLease > 0 && res.Remaining != prev-1) {
			t.Fatalf("check %d from the lease: got %+v, %v; want allowed with %d remaining", fromLease, res, err, prev-1)
		}
		prev = res.Remaining
		fromLease++
		allowed++
	}
	if fromLease == 0 {
		t.Fatal("no check after 50 at once was decided at Start; want decided from a lease")
	}
	time.Sleep(300 * time.Millisecond) // the leases end and give back the rest
	res, err := ratelimit.New(testenv.Redis(t), limit).Allow(ctx, key)
	if want := limit - allowed - 1; err != nil || !res.Allowed || res.Remaining < want || res.Remaining > want+1 {
		t.Errorf("another replica after %d checks and the leases' end: got %+v, %v; want allowed with %d remaining (%d with a refill)", allowed, res, err, want, want+1)
	}
	t.Logf("%d checks decided from the lease", fromLease)
}

// TestALeaseHeldElsewhereIsWaitedFor: replica a holds a lease of a key's
// budget and leaves it unused; replica b spends the rest with concurrent
// checks. b's checks are not refused for the budget a holds: those that
// find the budget spent wait for a's lease to end and its budget to come
// back, and are decided again. The key allows exactly its limit, and then
// refuses.
func TestALeaseHeldElsewhereIsWaitedFor(t *testing.T) {
	t.Parallel()
	const limit = 1000 // leases of up to 10, while 100 stay left
	a, b := ratelimit.New(testenv.Redis(t), limit), ratelimit.New(testenv.Redis(t), limit)
	ratelimit.SetLeaseTimes(a, time.Second, 1500*time.Millisecond, 3*time.Second)
	key := payments.NewID("key_")
	ctx := context.Background()
	allowed := 0
	for _, res := range checkAtOnce(t, a, key, 40) {
		if res.Allowed {
			allowed++
		}
	}
	k := a.Start(ctx, key, 0)
	leased := time.Now()
	if !k.Decided() {
		t.Fatal("a after 40 checks at once holds no lease")
	}
	if res, _ := k.Wait(); res.Allowed {
		allowed++
	}
	start := time.Now()
	if start.Sub(leased) > 500*time.Millisecond {
		// b's checks would come after a's lease ends: nothing to wait for.
		t.Fatalf("b started %v after a's lease of 1 s: too late to find it held", start.Sub(leased))
	}
	for _, res := range checkAtOnce(t, b, key, limit) {
		if res.Allowed {
			allowed++
		}
	}
	t.Logf("b's %d checks took %v", limit, time.Since(start))
	if allowed != limit {
		t.Errorf("got %d checks allowed of a key with a budget of %d; want exactly %d", allowed, limit, limit)
	}
	if res, err := a.Allow(ctx, key); err != nil || res.Allowed {
		t.Errorf("one more: got %+v, %v; want refused", res, err)
	}
}
