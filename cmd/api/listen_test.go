package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
	"paysvc/internal/webhook"
)

// hookReceiver is a local receiver that verifies every request with the
// secret `api listen` printed, both ways (X-Service-Signature and the
// official Standard Webhooks library), and records the event ids.
type hookReceiver struct {
	mu     sync.Mutex
	secret string
	ids    []string
	bad    []string
}

func (rc *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id := r.Header.Get("webhook-id")
	if err := webhook.Verify(rc.secret, body, r.Header.Get(webhook.SignatureHeader)); err != nil {
		rc.bad = append(rc.bad, fmt.Sprintf("%s: X-Service-Signature: %v", id, err))
	}
	wh, err := standardwebhooks.NewWebhook(rc.secret)
	if err == nil {
		err = wh.Verify(body, r.Header)
	}
	if err != nil {
		rc.bad = append(rc.bad, fmt.Sprintf("%s: standard webhooks: %v", id, err))
	}
	if !bytes.Contains(body, []byte(id)) || r.Header.Get(webhook.EventIDHeader) != id {
		rc.bad = append(rc.bad, fmt.Sprintf("%s: body %s does not match its headers", id, body))
	}
	rc.ids = append(rc.ids, id)
	w.WriteHeader(http.StatusNoContent)
}

func (rc *hookReceiver) got() ([]string, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.ids), slices.Clone(rc.bad)
}

var secretLine = regexp.MustCompile(`signing secret is (whsec_[A-Za-z0-9+/=]+)`)

// startListen runs `api listen` until the returned stop is called, and
// waits for its Ready line; it returns the secret it printed.
func startListen(t *testing.T, out *testenv.LogBuffer, args ...string) (secret string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"listen"}, args...), out, out) }()
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel() // as Ctrl-C does (app.SignalContext)
		select {
		case code := <-done:
			return code
		case <-time.After(15 * time.Second):
			t.Fatalf("api listen did not stop within 15s of the signal; output:\n%s", out)
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-done:
			t.Fatalf("api listen exited %d before it was ready; output:\n%s", code, out)
		default:
		}
		if m := secretLine.FindStringSubmatch(out.String()); m != nil {
			return m[1], stop
		}
	}
	t.Fatalf("api listen not ready after 15s; output:\n%s", out)
	return "", nil
}

func insertListenEvent(t *testing.T, db *sqlx.DB, sc payments.Scope, typ string) string {
	t.Helper()
	id := payments.NewID("evt_")
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, $3, $4, $5, now())`,
		id, sc.MerchantID, sc.Live, typ, fmt.Sprintf(`{"id": "obj_%s", "note": "café <b>&</b>"}`, id)); err != nil {
		t.Fatalf("insert event: %v", err)
	}
	return id
}

func waitForIDs(t *testing.T, rc *hookReceiver, want []string) {
	t.Helper()
	var ids, bad []string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ids, bad = rc.got(); len(ids) >= len(want) {
			break
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("receiver got events %v, want %v", ids, want)
	}
	for _, b := range bad {
		t.Errorf("bad forwarded request: %s", b)
	}
}

// TestListenForwardsSignedEvents runs `api listen` against a real API
// server (`api serve` in its own process): it starts from now, forwards
// new events oldest first to a local receiver that verifies them with the
// secret it printed, stops cleanly on the signal, resumes where it stopped
// with the same secret, filters by --events, and keeps no key on disk.
func TestListenForwardsSignedEvents(t *testing.T) {
	useTestEnv(t)
	db := testenv.DB(t)
	api := startAPI(t, "")
	svc := payments.NewService(postgres.New(db), nil, time.Now)
	sc := payments.Scope{MerchantID: newMerchant(t, db)}
	k, err := svc.CreateKey(context.Background(), sc.MerchantID, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := insertListenEvent(t, db, sc, "charge.refunded") // exists before: not forwarded

	rc := &hookReceiver{}
	recv := httptest.NewServer(rc)
	t.Cleanup(recv.Close)
	dir := t.TempDir()
	args := []string{"--key", k.Secret, "--forward-to", recv.URL + "/hooks", "--api", api.url, "--interval", "200ms", "--state-dir", dir}

	var out testenv.LogBuffer
	secret, stop := startListen(t, &out, args...)
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()
	e1 := insertListenEvent(t, db, sc, "payment_intent.succeeded")
	e2 := insertListenEvent(t, db, sc, "charge.refunded")
	waitForIDs(t, rc, []string{e1, e2})
	if code := stop(); code != 0 {
		t.Fatalf("api listen after the signal: exit %d, want 0; output:\n%s", code, out.String())
	}
	text := out.String()
	for _, id := range []string{e1, e2} {
		if strings.Count(text, id) != 1 || !regexp.MustCompile(regexp.QuoteMeta(id)+`\s+-> 204`).MatchString(text) {
			t.Errorf("output: want one line for %s with the receiver's 204; got:\n%s", id, text)
		}
	}
	if strings.Contains(text, before) || !strings.Contains(text, "Stopped.") {
		t.Errorf("output: got %q, want no line for the older %s and a last Stopped.", text, before)
	}

	// Resumes where it stopped, with the same secret.
	e3 := insertListenEvent(t, db, sc, "charge.refunded")
	var out2 testenv.LogBuffer
	again, stop2 := startListen(t, &out2, args...)
	if again != secret {
		t.Errorf("second run: got secret %q, want the first run's", again)
	}
	waitForIDs(t, rc, []string{e1, e2, e3})
	stop2()

	// --events: only the listed types.
	var out3 testenv.LogBuffer
	_, stop3 := startListen(t, &out3, append(args, "--events", "charge.*,checkout.session.completed")...)
	skipped := insertListenEvent(t, db, sc, "payment_intent.succeeded")
	e4 := insertListenEvent(t, db, sc, "charge.dispute.created")
	waitForIDs(t, rc, []string{e1, e2, e3, e4})
	stop3()
	if strings.Contains(out3.String(), skipped) {
		t.Errorf("--events charge.*: got a line for %s (payment_intent.succeeded)", skipped)
	}

	// The state is one file per key, named by a hash: no key on disk.
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("state files: got %v, want one", files)
	}
	b, _ := os.ReadFile(files[0])
	if strings.Contains(b2s(b), k.Secret) || strings.Contains(files[0], k.Secret) {
		t.Errorf("state file %s holds the API key", files[0])
	}
	if st, _ := os.Stat(files[0]); st.Mode().Perm() != 0o600 {
		t.Errorf("state file mode: got %v, want 0600", st.Mode().Perm())
	}
	for _, o := range []string{out.String(), out2.String(), out3.String()} {
		if strings.Contains(o, k.Secret) {
			t.Errorf("output holds the API key: %s", o)
		}
	}
}

func b2s(b []byte) string { return string(b) }

func TestListenArguments(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no key", []string{"--forward-to", "http://localhost:3000/hooks"}, "--key"},
		{"not a key", []string{"--key", "sk_test_x", "--forward-to", "http://localhost:3000/hooks"}, "--key"},
		{"no forward-to", []string{"--key", "svc_test_abc"}, "--forward-to"},
		{"bad event type", []string{"--key", "svc_test_abc", "--forward-to", "http://localhost:3000/h", "--events", "charge.nope"}, "--events"},
		{"interval too short", []string{"--key", "svc_test_abc", "--forward-to", "http://localhost:3000/h", "--interval", "1ms"}, "--interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"listen"}, c.args...), &stdout, &stderr)
			if code == 0 || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "svc_test_abc") {
				t.Errorf("got exit %d, stderr %q, want a failure naming %s without echoing the key", code, stderr.String(), c.want)
			}
		})
	}
}

// TestListenBackoff: a 429 waits at least its Retry-After; other failures
// double the wait from the poll interval up to a minute.
func TestListenBackoff(t *testing.T) {
	l := &listener{interval: 5 * time.Second}
	if got := l.nextBackoff(0, rateLimited{after: 40 * time.Second}); got != 40*time.Second {
		t.Errorf("429 with Retry-After 40: got %v, want 40s", got)
	}
	if got := l.nextBackoff(0, rateLimited{after: 90 * time.Second}); got != 90*time.Second {
		t.Errorf("429 with Retry-After 90: got %v, want 90s (never sooner than asked)", got)
	}
	d := time.Duration(0)
	var seen []time.Duration
	for range 6 {
		d = l.nextBackoff(d, fmt.Errorf("connection refused"))
		seen = append(seen, d)
	}
	if want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}; !slices.Equal(seen, want) {
		t.Errorf("backoff after errors: got %v, want %v", seen, want)
	}
}
