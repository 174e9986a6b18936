package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// crashEnv names, in the environment of a re-executed test binary, the
// crash point at which the server it runs kills itself.
const (
	serveEnv = "PAYSVC_TEST_SERVE"    // "1": this process is the server of TestIdempotencyKilledAtEachPoint
	crashEnv = "PAYSVC_TEST_CRASH_AT" // the crash point, or empty for a server that never crashes
)

// TestServeForCrashTests is not a test: it is the API process of
// TestIdempotencyKilledAtEachPoint, which re-executes this test binary to
// run `api serve` in a process of its own that it can lose. It sets the
// test-only crash hook (nil in the real binary) from the environment.
func TestServeForCrashTests(t *testing.T) {
	if os.Getenv(serveEnv) != "1" {
		t.Skip("the server process of TestIdempotencyKilledAtEachPoint")
	}
	if at := os.Getenv(crashEnv); at != "" {
		crashHook = func(point string) {
			if point != at {
				return
			}
			fmt.Fprintf(os.Stderr, "crash point %s reached: killing the process\n", point)
			// SIGKILL: no deferred function, no graceful close; the kernel
			// drops the database connection mid-transaction, as in a crash.
			syscall.Kill(os.Getpid(), syscall.SIGKILL) //nolint:errcheck // we are gone either way
			select {}
		}
	}
	os.Exit(run(context.Background(), []string{"serve"}, os.Stdout, os.Stderr))
}

// apiProcess is a running `api serve` in a child process.
type apiProcess struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process is gone; err is then set
	err    error
	stderr *bytes.Buffer // read only once exited is closed
}

// startAPI runs `api serve` in a child process that kills itself at crashAt
// (never when empty) and waits until it answers. A child that could not
// bind its addresses (another process took a port FreeAddr handed out) is
// started again on new ones.
func startAPI(t *testing.T, crashAt string) *apiProcess {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, up := tryStartAPI(t, crashAt)
		if up {
			return p
		}
		if !strings.Contains(p.stderr.String(), "address already in use") || attempt == 3 {
			t.Fatalf("api exited (%v) before it answered; stderr:\n%s", p.err, p.stderr)
		}
	}
}

// tryStartAPI starts the child and reports whether it answered; when it
// did not, the child has exited.
func tryStartAPI(t *testing.T, crashAt string) (*apiProcess, bool) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeForCrashTests$", "-test.count=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan when the test is killed
	cmd.Env = append(os.Environ(),
		serveEnv+"=1", crashEnv+"="+crashAt,
		"DATABASE_URL="+testenv.DatabaseURL(t), "REDIS_URL="+testenv.RedisURL(t),
		"API_ADDR="+addr, "ADMIN_ADDR="+testenv.FreeAddr(t),
		"PUBLIC_BASE_URL=http://"+addr, "LOG_LEVEL=error",
	)
	p := &apiProcess{url: "http://" + addr, cmd: cmd, exited: make(chan struct{}), stderr: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = io.Discard, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	// Every path waits on the closed channel, so none of them can take
	// the exit from another: a cleanup waiting on a channel the start-up
	// had drained hung the package until go test's timeout.
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // it may be gone already
		<-p.exited
	})
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.exited:
			return p, false
		default:
		}
		res, err := client.Get(p.url + "/v1/openapi.yaml")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, true
			}
		}
	}
	cmd.Process.Kill() //nolint:errcheck // to read its stderr
	<-p.exited
	t.Fatalf("api did not answer within 20s; stderr:\n%s", p.stderr)
	return nil, false
}

// waitKilled waits for the process to die of its crash point's SIGKILL.
func (p *apiProcess) waitKilled(t *testing.T, point string) {
	t.Helper()
	select {
	case <-p.exited:
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("api ended with %v, want killed at %s; stderr:\n%s", p.err, point, p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "crash point "+point+" reached") {
			t.Fatalf("api was killed, but not at its crash point %s; stderr:\n%s", point, p.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("api still running 20s after the request, want it killed at %s", point)
	}
}

type crashResponse struct {
	status   int
	replayed string
	body     []byte
}

func post(t *testing.T, url, key, idem string, body []byte) (crashResponse, error) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem)
	client := &http.Client{Timeout: 60 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		return crashResponse{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return crashResponse{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed"), body: b}, err
}

// TestIdempotencyKilledAtEachPoint kills the API process at each point of
// an idempotent POST that matters — the change made but its response not
// stored, the response stored but not committed, committed but the answer
// not sent — restarts it and retries with the same key and body. Exactly
// one object must exist afterwards (a refund too, whatever its own record
// of the key does), and the retry must be a fresh creation
// when the process died before the commit, the replay of the committed one
// when it died after.
func TestIdempotencyKilledAtEachPoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dozen API processes")
	}
	useTestEnv(t)
	db := testenv.DB(t)
	ctx := context.Background()
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(sandbox.New(db, "http://sandbox.invalid")))
	mch := newMerchant(t, db)
	key, err := svc.CreateKey(ctx, mch, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A paid payment to refund a little of at each point.
	amount, usd := int64(10000), "usd"
	in, err := svc.CreateIntent(ctx, payments.Scope{MerchantID: mch}, payments.IntentInput{Amount: &amount, Currency: &usd})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := sandbox.New(db, "http://sandbox.invalid").Cards(svc).ConfirmPayment(ctx, in.PaymentIntentID, in.PublishableKey, in.ClientSecret, sandbox.CardSuccess); err != nil || !o.Succeeded {
		t.Fatalf("pay: got %+v, %v, want succeeded", o, err)
	}

	resources := []struct {
		name, path, table, idField string
		body                       string
	}{
		{"customer", "/v1/customers", "customers", "id", `{"email":"crash@example.com","name":"Crash"}`},
		{"product", "/v1/products", "products", "id", `{"name":"Crash mug","price":{"amount":1200,"currency":"usd"}}`},
		{"payment session", "/v1/payment-sessions", "checkout_sessions", "id",
			`{"line_items":[{"amount":1500,"currency":"usd","name":"Mug","quantity":2}],` +
				`"success_url":"https://shop.example/ok","cancel_url":"https://shop.example/cancel"}`},
		{"payment intent", "/v1/payment-intents", "payment_intents", "payment_intent_id", `{"amount":2500,"currency":"usd"}`},
		{"refund", "/v1/refunds", "refunds", "id", `{"payment_intent":"` + in.PaymentIntentID + `","amount":100}`},
	}
	points := []struct {
		name      string
		committed bool // the change was committed when the process died
	}{
		{httpapi.CrashAfterChange, false},
		{httpapi.CrashAfterStore, false},
		{httpapi.CrashAfterCommit, true},
	}
	survivor := startAPI(t, "") // serves the retries
	for _, res := range resources {
		for _, pt := range points {
			t.Run(res.name+"/"+pt.name, func(t *testing.T) {
				idem := "crash-" + res.table + "-" + pt.name
				before := countObjects(t, db, res.table, mch)

				victim := startAPI(t, pt.name)
				if r, err := post(t, victim.url+res.path, key.Secret, idem, []byte(res.body)); err == nil {
					t.Fatalf("got %d %s from the process that should have died at %s", r.status, r.body, pt.name)
				}
				victim.waitKilled(t, pt.name)

				retry, err := post(t, survivor.url+res.path, key.Secret, idem, []byte(res.body))
				if err != nil {
					t.Fatalf("retry: %v", err)
				}
				if retry.status != http.StatusOK {
					t.Fatalf("retry: got %d %s, want 200", retry.status, retry.body)
				}
				if got := countObjects(t, db, res.table, mch) - before; got != 1 {
					t.Errorf("got %d new %s after the crash and the retry, want exactly 1", got, res.table)
				}
				switch {
				case pt.committed && retry.replayed != "true":
					t.Errorf("retry: got Idempotent-Replayed %q, want the replay of the committed %s", retry.replayed, res.name)
				case !pt.committed && retry.replayed != "":
					t.Errorf("retry: got Idempotent-Replayed %q, want a fresh creation (nothing was committed)", retry.replayed)
				}
				var env struct {
					Data map[string]any `json:"data"`
				}
				if err := json.Unmarshal(retry.body, &env); err != nil {
					t.Fatalf("retry body %s: %v", retry.body, err)
				}
				id, _ := env.Data[res.idField].(string)
				if !objectExists(t, db, res.table, mch, id) {
					t.Errorf("retry answered %s %q, which is not in %s", res.idField, id, res.table)
				}
				// And the key now replays that answer.
				again, err := post(t, survivor.url+res.path, key.Secret, idem, []byte(res.body))
				if err != nil || again.replayed != "true" || !bytes.Equal(again.body, retry.body) {
					t.Errorf("second retry: got %+v, %v, want the replay of %s", again, err, retry.body)
				}
			})
		}
	}
}

func countObjects(t *testing.T, db *sqlx.DB, table, merchant string) int {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, merchant); err != nil {
		t.Fatal(err)
	}
	return n
}

func objectExists(t *testing.T, db *sqlx.DB, table, merchant, id string) bool {
	t.Helper()
	if !strings.Contains(id, "_") {
		return false
	}
	var ok bool
	if err := db.Get(&ok, `SELECT EXISTS (SELECT 1 FROM `+table+` WHERE merchant_id = $1 AND id = $2)`, merchant, id); err != nil {
		t.Fatal(err)
	}
	return ok
}
