package testenv

import (
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FreeAddr returns a loopback address nobody listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePorts(t, 1)))
}

// WaitReady polls an admin listener's /readyz until it answers 200; it fails
// the test if the process's run returns first (on done) or 15 s pass.
func WaitReady(t testing.TB, addr string, done <-chan error) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("run returned %v before /readyz answered 200 (last: %s)", err, last)
		default:
		}
		res, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
			last = res.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET /readyz: got %s for 15s, want 200", last)
}

// WaitRun waits for a process's run to return after its ctx was cancelled.
func WaitRun(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation, want a graceful stop")
		return nil
	}
}

// FreePorts returns the first of n consecutive loopback ports nobody listens
// on right now (for ADMIN_ADDR, whose port +1 and +2 the worker and the
// scheduler take).
//
// The ports are drawn at random from below the kernel's ephemeral range,
// not asked of it (":0"): a port from that range is free again once its
// probe closes, and before the test's server binds it an outgoing
// connection of any process may take it as its local port — parallel test
// packages open hundreds a second to PostgreSQL and Redis — and the server
// fails with "address already in use". Below the range only another
// test's random draw can collide.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	lo, hi := portsBelowEphemeral()
	for range 100 {
		base := lo + rand.IntN(hi-lo-n)
		var ls []net.Listener
		for p := base; p < base+n; p++ {
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				ls = append(ls, l)
			}
		}
		for _, l := range ls {
			l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("found no %d consecutive free ports in [%d, %d) in 100 tries", n, lo, hi)
	return 0
}

// portsBelowEphemeral is the range FreePorts draws from: from 10000 up to
// the first port of the ephemeral range (ip_local_port_range; 32768 when
// it cannot be read), or 10000 ports below 65536 when that range starts
// too low to leave room.
func portsBelowEphemeral() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if first, err := strconv.Atoi(f[0]); err == nil {
				hi = first
			}
		}
	}
	if hi-10000 < 5000 {
		return 55536, 65536
	}
	return 10000, hi
}
