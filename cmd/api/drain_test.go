package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"paysvc/internal/testenv"
)

// TestServeFailsReadinessThenDrains: on SIGTERM (ctx cancelled) the API's
// /readyz answers 503 at once while the public listener still serves, for
// API_SHUTDOWN_DELAY; then the listener closes and serve returns cleanly.
func TestServeFailsReadinessThenDrains(t *testing.T) {
	useTestEnv(t)
	apiAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	t.Setenv("API_ADDR", apiAddr)
	t.Setenv("API_ADMIN_ADDR", adminAddr)
	t.Setenv("API_SHUTDOWN_DELAY", "2s")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx) }()
	testenv.WaitReady(t, adminAddr, done)

	status := func(url string) int {
		res, err := (&http.Client{Timeout: time.Second}).Get(url)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if got := status("http://" + adminAddr + "/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before the stop: got %d, want 200", got)
	}
	stoppedAt := time.Now()
	cancel()
	time.Sleep(200 * time.Millisecond)
	if got := status("http://" + adminAddr + "/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: got %d, want 503", got)
	}
	if got := status("http://" + apiAddr + "/v1/products"); got != http.StatusUnauthorized {
		t.Errorf("public API while draining: got %d, want it still serving (401 without a key)", got)
	}
	if err := testenv.WaitRun(t, done); err != nil {
		t.Errorf("serve after the stop: got %v, want nil", err)
	}
	if took := time.Since(stoppedAt); took < 2*time.Second {
		t.Errorf("serve returned %v after the stop, want after API_SHUTDOWN_DELAY (2s)", took)
	}
	if got := status("http://" + apiAddr + "/v1/products"); got != 0 {
		t.Errorf("public API after serve returned: got %d, want the listener closed", got)
	}
}
