package breaker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/breaker"
	"paysvc/internal/testenv"
)

// switchable stands between a client and the test's Redis: up, it forwards
// each connection; down, it drops every connection it holds and closes
// each new one at once, as a Redis that died would.
type switchable struct {
	upstream string
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]bool
}

func newSwitchable(t *testing.T) (*switchable, string) {
	t.Helper()
	u, err := url.Parse(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &switchable{upstream: u.Host, conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	u.Host = ln.Addr().String()
	return s, u.String()
}

func (s *switchable) serve(client net.Conn) {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		client.Close()
		return
	}
	server, err := net.Dial("tcp", s.upstream)
	if err != nil {
		s.mu.Unlock()
		client.Close()
		return
	}
	s.conns[client], s.conns[server] = true, true
	s.mu.Unlock()
	go func() { io.Copy(server, client); server.Close() }() //nolint:errcheck // until either side closes
	io.Copy(client, server)                                 //nolint:errcheck
	client.Close()
}

func (s *switchable) set(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		for c := range s.conns {
			c.Close()
		}
		clear(s.conns)
	}
}

// client returns a client of redisURL with a breaker pinging every
// cooldown.
func client(t *testing.T, redisURL string, cooldown time.Duration) (*redis.Client, *breaker.Hook) {
	t.Helper()
	rdb := testenv.RedisOn(t, redisURL)
	h := breaker.New(slog.New(slog.DiscardHandler), cooldown, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
	rdb.AddHook(h)
	return rdb, h
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// openIt fails commands against a Redis that is down until the breaker
// opens, and returns how many it took.
func openIt(t *testing.T, sw *switchable, rdb *redis.Client, h *breaker.Hook) int {
	t.Helper()
	sw.set(true)
	for i := 1; i <= 50; i++ {
		err := rdb.Get(within(t, 200*time.Millisecond), "breaker:absent").Err()
		if err == nil || err == breaker.ErrUnreachable || errors.Is(err, redis.Nil) {
			t.Fatalf("command %d with Redis down: got %v, want its own failure", i, err)
		}
		if h.Open() {
			return i
		}
	}
	t.Fatal("50 failed commands and the breaker is still closed")
	return 0
}

// TestFailsAtOnceWhileRedisIsDown: with Redis gone, commands that get no
// answer open the breaker (three at least, and none answered for 300 ms);
// every command after them fails with ErrUnreachable itself (not sent),
// pipelines too, also after several of the breaker's own pings have
// failed; and once Redis is back, a ping closes it without any command
// asking.
func TestFailsAtOnceWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	const cooldown = 300 * time.Millisecond
	sw, redisURL := newSwitchable(t)
	rdb, h := client(t, redisURL, cooldown)
	key := "breaker:" + t.Name()
	if err := rdb.Set(context.Background(), key, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	if n := openIt(t, sw, rdb, h); n < 3 {
		t.Fatalf("opened after %d failed commands, want 3 at least", n)
	}
	unsent := func(when string) {
		t.Helper()
		for range 100 {
			if err := rdb.Get(context.Background(), key).Err(); err != breaker.ErrUnreachable {
				t.Fatalf("%s: got %v, want breaker.ErrUnreachable (not sent)", when, err)
			}
		}
		cmds, err := rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			p.Get(context.Background(), key)
			p.Get(context.Background(), key)
			return nil
		})
		if err != breaker.ErrUnreachable || cmds[0].Err() != breaker.ErrUnreachable || cmds[1].Err() != breaker.ErrUnreachable {
			t.Fatalf("%s, pipeline: got %v (%v, %v)", when, err, cmds[0].Err(), cmds[1].Err())
		}
	}
	unsent("open breaker")
	time.Sleep(3 * cooldown) // the breaker's pings fail meanwhile
	if !h.Open() {
		t.Fatal("closed while Redis is still down")
	}
	unsent("open breaker, after its pings failed")

	sw.set(false)
	deadline := time.Now().Add(10 * time.Second)
	for h.Open() {
		if time.Now().After(deadline) {
			t.Fatal("Redis back for 10 s and the breaker is still open")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, err := rdb.Get(context.Background(), key).Result(); err != nil || v != "1" {
		t.Fatalf("after Redis came back: got %q, %v", v, err)
	}
}

// TestAnswersKeepItClosed: error replies are answers (Redis is up), and
// commands their callers gave up on, or whose budget had run out before
// they started, say nothing about Redis: none of them opens the breaker.
// Failures open it only three in a row: an answer between them starts
// the count again.
func TestAnswersKeepItClosed(t *testing.T) {
	t.Parallel()
	sw, redisURL := newSwitchable(t)
	rdb, h := client(t, redisURL, time.Minute)
	ctx := context.Background()
	for range 10 {
		err := rdb.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err()
		var reply redis.Error
		if !errors.As(err, &reply) {
			t.Fatalf("EVALSHA of no script: got %v, want a NOSCRIPT reply", err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for range 10 {
		if err := rdb.Ping(cancelled).Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: got %v", err)
		}
	}
	if h.Open() {
		t.Fatal("open after replies and cancelled commands")
	}

	sw.set(true)
	time.Sleep(400 * time.Millisecond) // past the quiet: only the count holds it closed now
	expired, cancel := context.WithTimeout(ctx, -time.Second)
	defer cancel()
	for range 10 {
		if err := rdb.Ping(expired).Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("expired: got %v", err)
		}
	}
	fail := func() {
		t.Helper()
		sw.set(true)
		if err := rdb.Ping(within(t, 200*time.Millisecond)).Err(); err == nil {
			t.Fatal("PING with Redis down answered")
		}
	}
	fail()
	fail()
	if h.Open() {
		t.Fatal("open after two failures and ten commands that had run out of time before they started")
	}
	sw.set(false)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	fail()
	fail()
	if h.Open() {
		t.Fatal("open after two failures in a row (an answer before them)")
	}
	time.Sleep(400 * time.Millisecond)
	fail()
	if !h.Open() {
		t.Fatal("closed after three failures in a row, none answered for 400 ms")
	}
}

// TestClosedClientSaysClosed: once the client closes, with the breaker
// open, its commands fail with redis.ErrClosed, as a closed client's do,
// not with ErrUnreachable: what loops on Redis until the client closes
// (the eviction check) must see it.
func TestClosedClientSaysClosed(t *testing.T) {
	t.Parallel()
	sw, redisURL := newSwitchable(t)
	rdb, h := client(t, redisURL, time.Minute)
	openIt(t, sw, rdb, h)
	h.Close()
	rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("closed client, open breaker: got %v, want redis.ErrClosed", err)
	}
}
