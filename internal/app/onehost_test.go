package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/testenv"
)

// TestOneHostOneEnvironment starts api, worker and scheduler as processes on
// this host from one identical environment (as a shared .env, a systemd
// EnvironmentFile or a Procfile would): all three must run, each serving
// /healthz and /readyz on its own admin address (ADMIN_ADDR's port, +1, +2).
// Then it kills their Redis: every /readyz stays 200 and says "degraded",
// paysvc_dependency_up{dependency="redis"} is 0, and the API still serves a
// request; when Redis is back, readiness says "ok" again.
func TestOneHostOneEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the three binaries")
	}
	bin := buildBinaries(t)
	rds := startRedis(t)

	base := testenv.FreePorts(t, 3)
	apiAddr := testenv.FreeAddr(t)
	env := append(os.Environ(),
		"DATABASE_URL="+testenv.DatabaseURL(t),
		"REDIS_URL=redis://"+rds.addr+"/0",
		"API_ADDR="+apiAddr,
		"ADMIN_ADDR=127.0.0.1:"+strconv.Itoa(base),
		// Nothing per process: the rule alone must separate them.
		"API_ADMIN_ADDR=", "WORKER_ADMIN_ADDR=", "SCHEDULER_ADMIN_ADDR=",
		"LOG_LEVEL=info",
	)
	key := testKey(t, bin, env)

	admins := map[string]string{}
	exited := map[string]<-chan struct{}{}
	for i, name := range []string{"api", "worker", "scheduler"} {
		args := []string{}
		if name == "api" {
			args = []string{"serve"}
		}
		exited[name] = startProcess(t, filepath.Join(bin, name), args, env, name)
		admins[name] = "127.0.0.1:" + strconv.Itoa(base+i)
	}
	for name, addr := range admins {
		waitReadiness(t, name, addr, exited[name], http.StatusOK, "ok")
		if code, body := httpGet(t, "http://"+addr+"/healthz"); code != http.StatusOK {
			t.Errorf("%s GET /healthz: got %d %s, want 200", name, code, body)
		}
	}
	if code := createCustomer(t, apiAddr, key); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("POST /v1/customers with Redis up: got %d, want 200 or 201", code)
	}

	// Redis dies: every process stays ready, degraded.
	rds.kill(t)
	for name, addr := range admins {
		waitReadiness(t, name, addr, exited[name], http.StatusOK, "degraded")
		if _, body := httpGet(t, "http://"+addr+"/metrics"); !strings.Contains(body, `paysvc_dependency_up{dependency="redis"} 0`) ||
			!strings.Contains(body, `paysvc_dependency_up{dependency="postgres"} 1`) {
			t.Errorf("%s GET /metrics with Redis down: got no redis 0 and postgres 1 in paysvc_dependency_up, want them", name)
		}
	}
	if code := createCustomer(t, apiAddr, key); code != http.StatusOK && code != http.StatusCreated {
		t.Errorf("POST /v1/customers with Redis down: got %d, want 200 or 201 (rate limiting skipped)", code)
	}

	// Redis is back on the same port: ready, ok.
	rds.start(t)
	for name, addr := range admins {
		waitReadiness(t, name, addr, exited[name], http.StatusOK, "ok")
	}
}

// buildBinaries builds cmd/api, cmd/worker and cmd/scheduler into a
// temporary directory and returns it.
func buildBinaries(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/api", "./cmd/worker", "./cmd/scheduler")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/...: %v\n%s", err, out)
	}
	return dir
}

// testKey creates a merchant and a test key with the admin CLI.
func testKey(t *testing.T, bin string, env []string) string {
	t.Helper()
	_, key := merchantKey(t, bin, env)
	return key
}

// merchantKey creates a merchant and a test key with the admin CLI and
// returns the merchant's id and the key.
func merchantKey(t *testing.T, bin string, env []string) (merchant, key string) {
	t.Helper()
	cli := func(args ...string) map[string]any {
		cmd := exec.Command(filepath.Join(bin, "api"), args...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("api %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("api %s: got %q, want JSON: %v", strings.Join(args, " "), out, err)
		}
		return v
	}
	m := cli("merchant", "create", "--name", "One host", "--email", "onehost@example.com")
	k := cli("key", "create", "--merchant", fmt.Sprint(m["id"]), "--mode", "test")
	return fmt.Sprint(m["id"]), fmt.Sprint(k["key"])
}

// redisServer is a redis-server of this test, on a port of its own, that
// the test can kill and start again.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	r := &redisServer{addr: testenv.FreeAddr(t)}
	r.start(t)
	t.Cleanup(func() {
		if r.cmd != nil {
			r.kill(t)
		}
	})
	return r
}

func (r *redisServer) start(t *testing.T) {
	t.Helper()
	_, port, _ := strings.Cut(r.addr, ":")
	r.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	dieWithTest(r.cmd)
	r.done = make(chan struct{})
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start redis-server (needed to kill Redis under the processes): %v", err)
	}
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(r.cmd, r.done)
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	waitFor(t, 10*time.Second, "redis-server on "+r.addr, func() (bool, string) {
		err := c.Ping(context.Background()).Err()
		return err == nil, fmt.Sprint(err)
	})
}

func (r *redisServer) kill(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// dieWithTest has cmd killed when the test binary dies: a server left
// behind by a killed `go test` holds its port and takes the next run's
// tasks from Redis, against a database that is gone.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// startProcess runs bin with env and returns a channel closed when it
// exits. At the end of the test it stops it with SIGTERM and wants a clean
// exit; its output is shown if the test failed.
func startProcess(t *testing.T, bin string, args, env []string, name string) <-chan struct{} {
	t.Helper()
	cmd := exec.Command(bin, args...)
	dieWithTest(cmd)
	cmd.Env = env
	logs := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			t.Errorf("%s exited before the end of the test: %v", name, err)
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s after SIGTERM: got %v, want a clean exit", name, err)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("%s still running 30 s after SIGTERM", name)
			}
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, logs.String())
		}
	})
	return exited
}

// waitReadiness polls /readyz until it answers code with status; it fails
// at once if the process exited.
func waitReadiness(t *testing.T, name, addr string, exited <-chan struct{}, code int, status string) {
	t.Helper()
	waitFor(t, 20*time.Second, fmt.Sprintf("%s GET /readyz %d %q", name, code, status), func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("%s exited, want it running with /readyz %d %q", name, code, status)
		default:
		}
		c, body := httpGet(t, "http://"+addr+"/readyz")
		var v struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(body), &v)
		return c == code && v.Status == status, fmt.Sprintf("%d %s", c, body)
	})
}

// httpGet returns the status and body of a GET, or 0 and the error.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func createCustomer(t *testing.T, apiAddr, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/customers", strings.NewReader(`{"email":"ada@example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /v1/customers: %v", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

// waitFor polls cond every 50 ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: still %s after %v", what, last, d)
}
