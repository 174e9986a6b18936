package app_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"paysvc/internal/testenv"
)

// TestAPISigtermFailsReadinessThenDrains: bin/api serve as a process gets
// SIGTERM (as the kubelet sends it): /readyz answers 503 at once while the
// public API still serves, for API_SHUTDOWN_DELAY (2 s here); then the
// listener closes and the process exits 0. (cmd/api's
// TestServeFailsReadinessThenDrains checks the same in-process; this one
// checks the signal's wiring.)
func TestAPISigtermFailsReadinessThenDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bin := buildBinaries(t)
	apiAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	cmd := exec.Command(filepath.Join(bin, "api"), "serve")
	dieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+testenv.DatabaseURL(t),
		"REDIS_URL="+testenv.RedisURL(t),
		"API_ADDR="+apiAddr, "API_ADMIN_ADDR="+adminAddr,
		"API_SHUTDOWN_DELAY=2s",
	)
	logs := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done, exited := make(chan error, 1), make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("api output:\n%s", logs.String())
		}
	})
	waitReadiness(t, "api", adminAddr, exited, http.StatusOK, "ok")

	stoppedAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "/readyz 503 after SIGTERM", func() (bool, string) {
		code, body := httpGet(t, "http://"+adminAddr+"/readyz")
		return code == http.StatusServiceUnavailable, body
	})
	if code, body := httpGet(t, "http://"+apiAddr+"/v1/products"); code != http.StatusUnauthorized {
		t.Errorf("public API while draining: got %d %s, want it still serving (401 without a key)", code, body)
	}
	select {
	case err := <-done:
		took := time.Since(stoppedAt)
		if err != nil {
			t.Errorf("api after SIGTERM: got %v, want exit 0", err)
		}
		if took < 2*time.Second {
			t.Errorf("api exited %v after SIGTERM, want after API_SHUTDOWN_DELAY (2 s)", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("api still running 15 s after SIGTERM")
	}
	if code, _ := httpGet(t, "http://"+apiAddr+"/v1/products"); code != 0 {
		t.Errorf("public API after the exit: got %d, want the listener closed", code)
	}
}
