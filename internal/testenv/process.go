package testenv

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FreeAddr returns a loopback address nobody listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
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
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls := []net.Listener{l}
		base := l.Addr().(*net.TCPAddr).Port
		for p := base + 1; p < base+n && p <= 65535; p++ {
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
	t.Fatalf("found no %d consecutive free ports in 100 tries", n)
	return 0
}
