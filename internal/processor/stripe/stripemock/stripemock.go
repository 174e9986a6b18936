// Package stripemock starts stripe-mock (github.com/stripe/stripe-mock) for
// tests: Stripe's own OpenAPI description, embedded in stripe-mock, checks
// every request the adapter sends. Version v0.183.0 embeds API version
// 2023-10-16, the one stripe-go v76 pins; it runs with -strict-version-check
// so a request of another version is refused.
package stripemock

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Version is the stripe-mock release the tests are written against.
const Version = "v0.183.0"

// binary finds stripe-mock: STRIPE_MOCK, PATH, then GOBIN / GOPATH/bin
// (where `go install` puts it).
func binary() (string, error) {
	if p := os.Getenv("STRIPE_MOCK"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "stripe-mock")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("stripe-mock not found: go install github.com/stripe/stripe-mock@%s", Version)
}

// freePort is a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs stripe-mock on free loopback ports for the test and returns
// its base URL; it is stopped when the test ends. Without stripe-mock the
// test fails when CI is set (a CI run must not pass by skipping) and is
// skipped otherwise.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	for attempt := 0; attempt < 3; attempt++ {
		httpPort, err1 := freePort()
		httpsPort, err2 := freePort()
		if err1 != nil || err2 != nil {
			t.Fatalf("stripe-mock: no free port: %v %v", err1, err2)
		}
		cmd := exec.Command(bin, "-http-addr", "127.0.0.1:"+strconv.Itoa(httpPort),
			"-https-addr", "127.0.0.1:"+strconv.Itoa(httpsPort), "-strict-version-check")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start stripe-mock: %v", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-done
		}
		base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
		if ready(base, done) {
			t.Cleanup(stop)
			return base
		}
		stop() // a port taken in between, most likely: try others
	}
	t.Fatal("stripe-mock did not start")
	return ""
}

// ready waits for stripe-mock to answer, or to exit.
func ready(base string, exited <-chan struct{}) bool {
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return false
		default:
		}
		req, _ := http.NewRequest("GET", base+"/v1/accounts/acct_ready", nil)
		req.Header.Set("Authorization", "Bearer sk_test_ready")
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
