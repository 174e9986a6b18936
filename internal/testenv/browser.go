package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

const (
	// chromiumPath is where Debian's chromium package puts the browser.
	chromiumPath = "/usr/bin/chromium"
	// StepTimeout bounds each browser test (or subtest) once the browser
	// runs (BrowserStep), and the browser's start.
	StepTimeout = 30 * time.Second
	// browserLifetime bounds a browser's whole life, start included.
	browserLifetime = 3 * time.Minute
)

// Browser starts a headless Chromium with a fresh profile and a window of
// width × height, and returns its context, closed at the end of the test.
// Without /usr/bin/chromium the test is skipped, except under CI=true where
// it fails. The flags are those this machine's closed network needs:
// without the background-networking ones, Chromium's own connections are
// refused, many at a time.
func Browser(t testing.TB, width, height int) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s is missing (%v): make test installs chromium (deploy/local/services.sh --chromium)", chromiumPath, err)
		}
		t.Skipf("%s not found: browser tests need Debian's chromium (apt-get install -y chromium); skipped because CI is not \"true\"", chromiumPath)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.IgnoreCertErrors, // the hosted pages' test shop serves TLS with a test certificate
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	life, cancelLife := context.WithTimeout(context.Background(), browserLifetime)
	alloc, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	// Cleanups run last-in first-out: the tab, then the browser (waiting for
	// it to exit), then the profile directory of t.TempDir.
	t.Cleanup(cancelLife)
	t.Cleanup(cancelAlloc)
	t.Cleanup(cancelCtx)
	// The first Do starts the browser; it must run on ctx itself, which owns
	// the browser, so a step's timeout never closes it.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(StepTimeout):
		t.Fatalf("start chromium: no answer within %s", StepTimeout)
	}
	return ctx
}

// BrowserStep returns a context for one bounded part of a test on the
// browser (StepTimeout).
func BrowserStep(t testing.TB, browser context.Context) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, StepTimeout)
	t.Cleanup(cancel)
	return ctx
}
