package ratelimit

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
	"paysvc/internal/testenv"
)

// TestARefusalHeldForLeasesIsAnsweredInTime: a check refused while a lease
// of its key is remembered waits for the lease only as long as its caller
// waits: it is answered with its refusal before its deadline, never left
// to run out, which its caller (the API) would take for a Redis that is
// down and let the request through. With room before the deadline it
// waits for the lease and is decided again; without, it is refused at once.
func TestARefusalHeldForLeasesIsAnsweredInTime(t *testing.T) {
	t.Parallel()
	const limit, budget = 1000, 150 * time.Millisecond
	ctx := context.Background()
	for _, remembered := range []time.Duration{50 * time.Millisecond, time.Second} {
		testenv.UnlessPaused(t, answerMargin, func() error {
			key := payments.NewID("key_")
			a := New(testenv.Redis(t), limit)
			SetLeaseTimes(a, leaseFor, remembered, leaseKept)
			// a spends 1 and leases 10, and hands the lease out; the rest is
			// spent check by check.
			grant(t, a, key, 10)
			if r, err := a.spend(ctx, key, limit-11, 0); err != nil || r.granted != limit-11 {
				t.Fatalf("spend the rest: got %+v, %v", r, err)
			}
			b := New(testenv.Redis(t), limit)
			start := time.Now()
			res, err := b.Start(ctx, key, budget).Wait()
			took := time.Since(start)
			if err != nil || res.Allowed {
				return fmt.Errorf("lease remembered %v: got %+v, %v after %v; want refused within the caller's %v", remembered, res, err, took, budget)
			}
			t.Logf("lease remembered %v: refused after %v", remembered, took)
			return nil
		})
	}
}

// TestARefusalKeepsLeasesOff: once a key's check is refused while a lease
// of it is remembered, no lease of its budget is granted for a while,
// though budget has come back meanwhile (here: the state moved back, as
// other replicas' give-backs would): checks refused and decided again
// after the leases before them meet no lease taken in between. After that
// while, leases are granted again.
func TestARefusalKeepsLeasesOff(t *testing.T) {
	t.Parallel()
	const limit = 1000
	ctx := context.Background()
	key := payments.NewID("key_")
	rdb := testenv.Redis(t)
	l := New(rdb, limit)
	l.reserve = 0 // leases whatever is left
	// Remembered for 300 ms: refusals keep leases off for 900 ms. (30 ms
	// was outlived by a VM's pause between the grant and the refusal.)
	SetLeaseTimes(l, leaseFor, 300*time.Millisecond, leaseKept)
	grant(t, l, key, 10)
	if r, err := l.spend(ctx, key, limit-12, 0); err != nil || r.granted != limit-12 {
		t.Fatalf("spend all but 1: got %+v, %v", r, err)
	}
	// Crossing while the lease is remembered: 1 of 2 fits, the other waits.
	if r, err := l.spend(ctx, key, 2, 0); err != nil || r.granted != 1 || r.leased <= 0 {
		t.Fatalf("spend 2 of 1 left, a lease remembered: got %+v, %v; want 1 granted and the lease's wait", r, err)
	}
	tat, err := rdb.Get(ctx, redisKey(key)).Float64()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, redisKey(key), tat-50*3.6, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := l.spend(ctx, key, 1, 10); err != nil || r.granted != 1 {
		t.Errorf("1 and a lease of 10 just after a refusal, 50 back: got %+v, %v; want 1 granted, no lease", r, err)
	}
	time.Sleep(time.Second)
	if r, err := l.spend(ctx, key, 1, 10); err != nil || r.granted != 11 {
		t.Errorf("1 and a lease of 10 after the refusal's while, 49 left: got %+v, %v; want 11 granted", r, err)
	}
}

// TestALateGiveBackIsDropped: a lease's give-back counts only while Redis
// keeps that lease's own marker, within which the key's state cannot have
// expired and started afresh; later it is dropped, though another lease of
// the key is remembered then. A fresh state (here: the old one deleted)
// must not be credited with budget it never spent.
func TestALateGiveBackIsDropped(t *testing.T) {
	t.Parallel()
	const limit = 1000
	ctx := context.Background()
	key := payments.NewID("key_")
	rdb := testenv.Redis(t)
	a := New(rdb, limit)
	SetLeaseTimes(a, 300*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond) // given back 200 ms late
	r := grant(t, a, key, 10)
	a.lend(key, 10, r.remaining, r.lease, r.until)
	if err := rdb.Del(ctx, redisKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	b := New(testenv.Redis(t), limit)
	if r, err := b.spend(ctx, key, 50, 0); err != nil || r.granted != 50 {
		t.Fatalf("spend 50 afresh: got %+v, %v", r, err)
	}
	time.Sleep(250 * time.Millisecond)
	// b leases just before a's give-back: the key's lease is remembered
	// when it comes. b's own give-back, in time, counts.
	r = grant(t, b, key, 10)
	b.lend(key, 10, r.remaining, r.lease, r.until)
	time.Sleep(300 * time.Millisecond) // both leases end and give back 10
	r, err := b.spend(ctx, key, 1, 0)
	if want := limit - 52; err != nil || r.remaining != want {
		t.Errorf("one more after both give-backs: got %+v, %v; want %d remaining (a's late 10 dropped, b's counted)", r, err, want)
	}
}

// TestHeldRefusalsOnASlowRedis: on a Redis answering in 75 ms, through the
// client options the API uses (go-redis then waits for a reply it has sent
// for, whatever the context), a check refused while a lease is remembered
// is still answered with its refusal before its caller's 150 ms run out,
// never with the timeout its caller would let through.
func TestHeldRefusalsOnASlowRedis(t *testing.T) {
	t.Parallel()
	const limit = 1000
	ctx := context.Background()
	b := New(slowRedis(t, 75*time.Millisecond), limit)
	a := New(testenv.Redis(t), limit)
	SetLeaseTimes(a, leaseFor, 20*time.Millisecond, leaseKept) // held (75+20+40 < 150 ms), its second decision past the deadline (75+20+75)
	testenv.UnlessPaused(t, 15*time.Millisecond, func() error {
		key := payments.NewID("key_")
		grant(t, a, key, 10)
		if r, err := a.spend(ctx, key, limit-11, 0); err != nil || r.granted != limit-11 {
			t.Fatalf("spend the rest: got %+v, %v", r, err)
		}
		start := time.Now()
		res, err := b.Start(ctx, key, 150*time.Millisecond).Wait()
		if err != nil || res.Allowed {
			return fmt.Errorf("got %+v, %v after %v; want refused within 150 ms", res, err, time.Since(start))
		}
		return nil
	})
}

// TestCrossingTheLimitWhileLeased: concurrent checks that cross the limit
// while another replica holds a lease get the budget left in Redis at
// once, whatever their deadline; only the checks beyond it wait for the
// lease (or keep their refusal when their caller cannot wait).
func TestCrossingTheLimitWhileLeased(t *testing.T) {
	t.Parallel()
	const limit = 1000
	ctx := context.Background()
	a := New(testenv.Redis(t), limit)
	SetLeaseTimes(a, leaseFor, time.Second, 2*time.Second) // remembered longer than b's callers wait
	b := New(testenv.Redis(t), limit)
	testenv.UnlessPaused(t, answerMargin, func() error {
		key := payments.NewID("key_")
		grant(t, a, key, 10)
		if r, err := a.spend(ctx, key, limit-61, 0); err != nil || r.granted != limit-61 {
			t.Fatalf("spend all but 50: got %+v, %v", r, err)
		}
		var allowed, refused, failed atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				res, err := b.Start(ctx, key, 150*time.Millisecond).Wait()
				switch {
				case err != nil:
					failed.Add(1)
				case res.Allowed:
					allowed.Add(1)
				default:
					refused.Add(1)
				}
			})
		}
		wg.Wait()
		if allowed.Load() != 50 || refused.Load() != 50 {
			return fmt.Errorf("100 checks with 50 left in Redis: got %d allowed, %d refused, %d out of time; want 50 and 50", allowed.Load(), refused.Load(), failed.Load())
		}
		return nil
	})
}

// slowRedis is a client of the test Redis through a relay that holds every
// reply for delay, with the options the API's client has.
func slowRedis(t *testing.T, delay time.Duration) *redis.Client {
	t.Helper()
	relay := testenv.Forward(t, testenv.RedisURL(t), func(client, server net.Conn) {
		go func() { io.Copy(server, client); server.Close() }()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				time.Sleep(delay)
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	opt, err := redis.ParseURL(relay)
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize, opt.MinIdleConns = 4, 4
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	// Connected ahead: a connection's handshake would take several delays.
	for range 4 {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestAGiveBackReturnsOnlyWhatHasNotRefilled: a lease's unused budget that
// GCRA has refilled by its give-back (its slots behind the clock, with
// requests spent since) is not given back: the bucket was full at its
// burst when they were spent, and crediting it would allow more than the
// budget. The give-back leaves the state as it found it.
func TestAGiveBackReturnsOnlyWhatHasNotRefilled(t *testing.T) {
	t.Parallel()
	const limit = 36_000_000 // one request refills in 0.1 ms
	ctx := context.Background()
	key := payments.NewID("key_")
	rdb := testenv.Redis(t)
	a := New(rdb, limit)
	r := grant(t, a, key, 100) // the lease's slots end 35 ms from now
	time.Sleep(50 * time.Millisecond)
	if r, err := New(testenv.Redis(t), limit).spend(ctx, key, 5000, 0); err != nil || r.granted != 5000 {
		t.Fatalf("spend 5000: got %+v, %v", r, err)
	}
	before, err := rdb.Get(ctx, redisKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := a.giveBack(key, r.lease, 100); err != nil || back != 0 {
		t.Errorf("give back 100 unused after their slots refilled: got %d back, %v; want 0", back, err)
	}
	if after, err := rdb.Get(ctx, redisKey(key)).Result(); err != nil || after != before {
		t.Errorf("state after the give-back: %s, %v; want %s as before", after, err, before)
	}
}

// TestALeaseIsChargedPastItsHandOut: a lease of a fast key's budget
// (whose bucket refills within the lease's hand-out) is charged from the
// end of its hand-out on, so none of it has refilled when it is handed
// out: a key leased at a full bucket, its lease handed out, and then
// spent to the last request, allows no more than its burst and the one
// request before (as GCRA without leases would).
func TestALeaseIsChargedPastItsHandOut(t *testing.T) {
	t.Parallel()
	const limit = 36_000_000 // one request refills in 0.1 ms; a lease of 100, in 10 ms
	ctx := context.Background()
	key := payments.NewID("key_")
	a := New(testenv.Redis(t), limit)
	r := grant(t, a, key, 100)
	a.lend(key, 100, r.remaining, r.lease, r.until)
	time.Sleep(15 * time.Millisecond) // a bucket charged at the grant has refilled
	used := 0
	for {
		if _, ok := a.fromLease(key); !ok {
			break
		}
		used++
	}
	rest, err := New(testenv.Redis(t), limit).spend(ctx, key, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	// GCRA without leases: 1, then used+rest at one instant of a bucket
	// that holds limit (and refilled the first meanwhile). Past the
	// hand-out's end the lease refills like any spending: a machine's
	// pause before the last spend may add that much (Redis charged the
	// lease from no earlier than r.until, and decided before now).
	want := limit + 1
	if late := time.Since(r.until); late > 0 {
		want += int(late/(100*time.Microsecond)) + 1
	}
	if total := 1 + used + rest.granted; total > want {
		t.Errorf("1, then %d from the lease and %d at once: %d allowed; want at most %d", used, rest.granted, total, want)
	}
}

// TestAGiveBackLeavesALiveLeaseInPlace: a give-back moves back every slot
// charged after its lease, another replica's lease granted since among
// them; it returns no more than keeps that lease's slots past the end of
// its hand-out, or the lease's requests would sit on slots already
// refilled, on top of the burst. Then the lease's hand-out and a call for
// the whole burst allow no more than GCRA without leases.
func TestAGiveBackLeavesALiveLeaseInPlace(t *testing.T) {
	t.Parallel()
	const limit = 36_000_000 // one request refills in 0.1 ms
	ctx := context.Background()
	key := payments.NewID("key_")
	a := New(testenv.Redis(t), limit)
	b := New(testenv.Redis(t), limit)
	ra := grant(t, a, key, 100) // slots from 25 ms
	time.Sleep(12 * time.Millisecond)
	rb := grant(t, b, key, 100) // slots from 37 ms
	b.lend(key, 100, rb.remaining, rb.lease, rb.until)
	time.Sleep(time.Until(ra.until))
	if _, err := a.giveBack(key, ra.lease, 100); err != nil { // a's lease ends unused
		t.Fatal(err)
	}
	time.Sleep(time.Until(rb.until) - 2*time.Millisecond)
	first := time.Now()
	used := 0
	for {
		if _, ok := b.fromLease(key); !ok {
			break
		}
		used++
	}
	time.Sleep(time.Until(rb.until))
	rest, err := New(testenv.Redis(t), limit).spend(ctx, key, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	// GCRA without leases: a bucket of limit, and what refilled since the
	// first of these requests.
	if bound := limit + int(time.Since(first)/(100*time.Microsecond)) + 1; used+rest.granted > bound {
		t.Errorf("%d from b's lease, then %d at once: %d over GCRA without leases", used, rest.granted, used+rest.granted-bound)
	}
}

// TestCloseGivesBackItsLeases: a limiter closed as its process stops gives
// back at once what its live leases did not hand out, hands out nothing
// more, and takes no lease after; a lease granted as Close ran goes back
// at once too. Without it the budget stays spent until the leases end,
// which a process that exits never reaches.
func TestCloseGivesBackItsLeases(t *testing.T) {
	t.Parallel()
	const limit = 100_000 // leases of up to 1,000
	interval := 3600.0 / limit
	ctx := context.Background()
	rdb := testenv.Redis(t)
	l := New(rdb, limit)
	SetLeaseTimes(l, 5*time.Second, time.Second, leaseKept) // still handing out when Close runs
	tat := func(key string) float64 {
		t.Helper()
		v, err := rdb.Get(ctx, redisKey(key)).Float64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	key, late := payments.NewID("key_"), payments.NewID("key_")
	leaseOf(t, l, key, 300, 100)
	rl := grant(t, l, late, 50)
	before, beforeLate := tat(key), tat(late)

	l.Close()
	if got, want := (before-tat(key))/interval, 200.0; math.Abs(got-want) > 0.01 {
		t.Errorf("Close gave back %.2f requests of the live lease; want the %v not handed out", got, want)
	}
	if _, ok := l.fromLease(key); ok {
		t.Error("a check after Close was decided from the lease; want none handed out")
	}
	if n := l.leaseSize(key, 5); n != 0 {
		t.Errorf("lease size after Close: %d; want 0 (no more leases)", n)
	}
	l.lend(late, 50, rl.remaining, rl.lease, rl.until) // its grant's reply came after Close
	if got := (beforeLate - tat(late)) / interval; math.Abs(got-50) > 0.01 {
		t.Errorf("a lease granted as Close ran: %.2f given back at once; want 50", got)
	}
	if _, ok := l.fromLease(late); ok {
		t.Error("a lease granted as Close ran handed out a check; want none")
	}
	after := tat(key)
	v, ok := l.leases.Load(key)
	if !ok {
		t.Fatal("the closed lease is not in the limiter's map")
	}
	l.endLease(v.(*lease)) // as its timer does at its end: nothing more goes back
	if got := tat(key); got != after {
		t.Errorf("state moved by %.2f requests as the closed lease ended again; want it left", (after-got)/interval)
	}
}

// TestAnOldLeaseIsForgotten: a key's ended lease sizes its next one only
// for leaseRecalled; then it is dropped from the limiter's map, which so
// holds only keys checked lately, and the key leases as one not leased
// lately.
func TestAnOldLeaseIsForgotten(t *testing.T) {
	t.Parallel()
	l := New(testenv.Redis(t), 100_000)
	// Long enough for the ten checks to be handed out before it ends on a
	// loaded machine (at 50 ms, a CI run under -race once found it over).
	SetLeaseTimes(l, 500*time.Millisecond, leasedRemembered, leaseKept)
	key := payments.NewID("key_")
	leaseOf(t, l, key, 10, 10)
	v, _ := l.leases.Load(key)
	le := v.(*lease)
	ended := func() bool { le.mu.Lock(); defer le.mu.Unlock(); return le.ended }
	for deadline := time.Now().Add(5 * time.Second); !ended(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease did not end within 5 s of its 50 ms")
		}
	}
	endedAt := time.Now()
	if n := l.leaseSize(key, 1); n != 10 {
		t.Errorf("lease size just after a lease of 10 was all handed out: %d; want 10", n)
	}
	for {
		_, held := l.leases.Load(key)
		if !held {
			break
		}
		if time.Since(endedAt) > leaseRecalled+5*time.Second {
			t.Fatalf("the ended lease is still in the limiter's map %v after it ended; want it dropped after %v", time.Since(endedAt), leaseRecalled)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(endedAt); took < leaseRecalled-100*time.Millisecond {
		t.Errorf("the ended lease was dropped %v after it ended; want kept for %v", took, leaseRecalled)
	}
	if n := l.leaseSize(key, 1); n != 0 {
		t.Errorf("lease size of one check after the key's last lease was forgotten: %d; want 0, as a key not leased lately", n)
	}
}

// leaseOf has l spend one check of key and a lease of size beside it, hold
// the lease, and hand out take of it.
func leaseOf(t *testing.T, l *Limiter, key string, size, take int) {
	t.Helper()
	r := grant(t, l, key, size)
	l.lend(key, size, r.remaining, r.lease, r.until)
	for i := range take {
		if _, ok := l.fromLease(key); !ok {
			t.Fatalf("check %d of the lease's %d: not decided from it", i+1, size)
		}
	}
}

// TestAnEarlierLeaseGivesBackAfterALaterOne: two replicas' leases, A
// granted before B, give back in the other order (their calls crossing).
// B's slots lie above A's, so B's give-back did not move A's, and A still
// gives back its unused slots ahead of the clock: counting B's give-back
// as a move of A's slots would read them as refilled and give back none.
func TestAnEarlierLeaseGivesBackAfterALaterOne(t *testing.T) {
	t.Parallel()
	const limit = 3_600_000 // one request a millisecond; leases of up to 4,096
	rdb := testenv.Redis(t)
	a, b := New(rdb, limit), New(rdb, limit)
	key := payments.NewID("key_")
	ra := grant(t, a, key, 100)
	rb := grant(t, b, key, 100)
	if n, err := b.giveBack(key, rb.lease, 100); err != nil || n != 100 {
		t.Fatalf("B gives back its 100 first: got %d, %v; want 100 (nothing spent since its grant)", n, err)
	}
	// A's slots end about 125 ms ahead of its grant, B's hand-out about 25
	// ms: about 100 of them lie ahead of both.
	n, err := a.giveBack(key, ra.lease, 100)
	if err != nil || n < 50 || n > 100 {
		t.Errorf("A gives back its 100 after B: got %d, %v; want its slots ahead of B's hand-out (about 100)", n, err)
	}
	t.Logf("A gave back %d", n)
}

// grant has l spend one check of key and a lease of size beside it, and
// returns Redis's reply.
func grant(t *testing.T, l *Limiter, key string, size int) spent {
	t.Helper()
	r, err := l.spend(context.Background(), key, 1, size)
	if err != nil || r.granted != size+1 {
		t.Fatalf("spend 1 and a lease of %d: got %+v, %v", size, r, err)
	}
	return r
}
