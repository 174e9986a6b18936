package worker_test

// End-to-end webhook delivery: payments write events and deliveries in their
// transaction, the store's after-commit hook enqueues the tasks, a real
// asynq server runs worker.Deliverer, and real HTTPS receivers
// (httptest TLS servers) record every request.
//
// These tests are not parallel at the top level: every asynq server of this
// test binary shares one Redis database and its queues, so a server started
// by another test would take tasks it has no handler for (and retry them),
// and the Redis-loss test flushes that database. Each test starts from an
// empty Redis database; go test runs the package's parallel tests after
// these have finished.
//
// The exceptions are the tests that kill a worker process and wait about a
// minute for asynq's recoverer (TestAfterWorkerKilled's subtests): they run
// in parallel, each on a PostgreSQL database and a Redis database of its own
// (newDeliveryStackOn with testenv.OwnDatabaseURL and OwnRedisURL), so no
// other test's server takes their tasks and no other test's worker relays
// their rows, nor theirs the others'. They pass the worker its environment
// through startWorkerProcess, as a parallel test may not call t.Setenv.

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/secrets"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/webhook"
	"paysvc/internal/worker"
)

// deliveryBase is WEBHOOK_RETRY_BASE in these tests: ten failed attempts
// take about 5 s (20, 20, 40, … 2560 ms).
const deliveryBase = 20 * time.Millisecond

// deliveryStack is the service, its store with the enqueue-after-commit
// hook, and the Redis side, as cmd/api and cmd/worker wire them.
type deliveryStack struct {
	dbURL    string
	redisURL string
	db       *sqlx.DB
	store    *postgres.Store
	svc      *payments.Service
	box      *secrets.Box
	key      []byte
	redisOpt asynq.RedisConnOpt
	enq      *tasks.Enqueuer
	insp     *asynq.Inspector
	log      *slog.Logger
}

// newDeliveryStack builds the stack on this test binary's database and
// Redis database, which it flushes.
func newDeliveryStack(t testing.TB) *deliveryStack {
	t.Helper()
	return newDeliveryStackOn(t, testenv.DatabaseURL(t), testenv.RedisURL(t))
}

// newDeliveryStackOn builds the stack on the database at dbURL and the
// Redis database at redisURL, which it flushes.
func newDeliveryStackOn(t testing.TB, dbURL, redisURL string) *deliveryStack {
	t.Helper()
	rdb := testenv.RedisOn(t, redisURL)
	if err := rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush the test Redis database: %v", err)
	}
	db := testenv.DBOn(t, dbURL)
	store := postgres.New(db)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	box, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	svc := payments.NewService(store, nil, time.Now,
		payments.WithProcessor(sandbox.New(db, "http://checkout.test")), payments.WithSecrets(box))
	redisOpt := testenv.RedisOptOn(t, redisURL)
	client := asynq.NewClient(redisOpt)
	t.Cleanup(func() { client.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	enq := &tasks.Enqueuer{Client: client, Log: log, Redis: rdb}
	store.OnCommit(func(ctx context.Context, jobs []payments.Job) { // as app.Env.Enqueuer
		enq.Enqueue(context.WithoutCancel(ctx), tasks.ForJobs(jobs))
	})
	insp := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { insp.Close() })
	return &deliveryStack{dbURL: dbURL, redisURL: redisURL, db: db, store: store, svc: svc, box: box, key: key, redisOpt: redisOpt, enq: enq, insp: insp, log: log}
}

// startWorker runs an asynq server with the delivery handler until the test ends.
func (s *deliveryStack) startWorker(t *testing.T) {
	t.Helper()
	srv := asynq.NewServer(s.redisOpt, asynq.Config{
		Concurrency:    10,
		Queues:         tasks.Queues,
		RetryDelayFunc: tasks.RetryDelay(deliveryBase),
		// asynq moves due retries to their queue on this tick, 5 s by
		// default, which would dwarf the 20 ms base.
		DelayedTaskCheckInterval: 10 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		LogLevel:                 asynq.FatalLevel, // failed attempts are expected here
	})
	mux := asynq.NewServeMux()
	(&worker.Deliverer{
		Store:     s.store,
		Sealer:    s.box,
		Client:    webhook.NewClient(webhook.Options{AllowPrivateNetworks: true, InsecureTLS: true}),
		RetryBase: deliveryBase,
		Log:       s.log,
		Now:       time.Now,
		Enqueuer:  s.enq,
	}).Register(mux)
	if err := srv.Start(mux); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

func (s *deliveryStack) merchant(t testing.TB, name string) string {
	t.Helper()
	m, err := s.svc.CreateMerchant(context.Background(), name, "", payments.PlanFree)
	if err != nil {
		t.Fatalf("create merchant: %v", err)
	}
	return m.ID
}

// endpoint registers url for events (nil: the default, every type).
func (s *deliveryStack) endpoint(t testing.TB, sc payments.Scope, url string, events ...string) payments.EndpointObject {
	t.Helper()
	e, err := s.svc.CreateEndpoint(context.Background(), sc, payments.EndpointInput{URL: &url, Events: events})
	if err != nil {
		t.Fatalf("create endpoint %s: %v", url, err)
	}
	if !strings.HasPrefix(e.Secret, "whsec_") {
		t.Fatalf("create endpoint: got secret %q, want whsec_…", e.Secret)
	}
	return e
}

// pay creates an embedded payment and confirms it with card: one
// payment_intent.succeeded or payment_intent.payment_failed event.
func (s *deliveryStack) pay(t testing.TB, sc payments.Scope, card string, metadata map[string]string) string {
	t.Helper()
	ctx := context.Background()
	amount, cur := int64(1500), "usd"
	created, err := s.svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur, Metadata: metadata})
	if err != nil {
		t.Fatalf("create intent: %v", err)
	}
	if _, err := sandbox.New(s.db, "http://checkout.test").Cards(s.svc).ConfirmPayment(ctx, created.PaymentIntentID, created.PublishableKey, created.ClientSecret, card); err != nil {
		t.Fatalf("record outcome of %s: %v", created.PaymentIntentID, err)
	}
	return created.PaymentIntentID
}

// eventOf returns the id of the one event about object id.
func (s *deliveryStack) eventOf(t *testing.T, id string) string {
	t.Helper()
	var ids []string
	if err := s.db.Select(&ids, `SELECT id FROM events WHERE data->>'id' = $1`, id); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 {
		t.Fatalf("events about %s: got %v, want one", id, ids)
	}
	return ids[0]
}

// storedPayloads maps the scope's event ids to the bytes delivery sends.
func (s *deliveryStack) storedPayloads(t *testing.T, sc payments.Scope) map[string][]byte {
	t.Helper()
	events, err := s.store.Events(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range events {
		out[e.ID] = e.Payload
	}
	return out
}

type deliveryRow struct {
	ID         string         `db:"id"`
	EventID    string         `db:"event_id"`
	Status     string         `db:"status"`
	Attempts   int            `db:"attempts"`
	LastStatus sql.NullInt64  `db:"last_status"`
	LastError  sql.NullString `db:"last_error"`
}

func (s *deliveryStack) deliveries(t *testing.T, endpointID string) []deliveryRow {
	t.Helper()
	var rows []deliveryRow
	const q = `SELECT id, event_id, status, attempts, last_status, last_error FROM webhook_deliveries
	WHERE endpoint_id = $1 ORDER BY created_at, id`
	if err := s.db.Select(&rows, q, endpointID); err != nil {
		t.Fatal(err)
	}
	return rows
}

// delivery returns the one delivery of event to endpoint.
func (s *deliveryStack) delivery(t *testing.T, endpointID, eventID string) deliveryRow {
	t.Helper()
	var found []deliveryRow
	for _, r := range s.deliveries(t, endpointID) {
		if r.EventID == eventID {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("deliveries of %s to %s: got %+v, want one", eventID, endpointID, found)
	}
	return found[0]
}

// settled waits until the delivery is no longer pending and returns it.
func (s *deliveryStack) settled(t *testing.T, endpointID, eventID string, within time.Duration) deliveryRow {
	t.Helper()
	var row deliveryRow
	waitUntil(t, within, "delivery of "+eventID+" settled", func() (bool, string) {
		row = s.delivery(t, endpointID, eventID)
		return row.Status != "pending", fmt.Sprintf("%+v", row)
	})
	return row
}

func (s *deliveryStack) failures(t *testing.T, endpointID string) int {
	t.Helper()
	var n int
	if err := s.db.Get(&n, `SELECT consecutive_failures FROM webhook_endpoints WHERE id = $1`, endpointID); err != nil {
		t.Fatal(err)
	}
	return n
}

// endpointStatus reads the endpoint through the service, as GET does; "" when not listed.
func (s *deliveryStack) endpointStatus(t *testing.T, sc payments.Scope, id string) string {
	t.Helper()
	es, err := s.svc.Endpoints(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.ID == id {
			return e.Status
		}
	}
	return ""
}

// taskState waits until the task of id reaches one of want; it fails on a
// deadline and returns the task.
func (s *deliveryStack) taskState(t *testing.T, id string, within time.Duration, want ...asynq.TaskState) *asynq.TaskInfo {
	t.Helper()
	var info *asynq.TaskInfo
	waitUntil(t, within, fmt.Sprintf("task %s in state %v", id, want), func() (bool, string) {
		var err error
		info, err = s.insp.GetTaskInfo(tasks.QueueDefault, id)
		if err != nil {
			return false, err.Error()
		}
		for _, st := range want {
			if info.State == st {
				return true, ""
			}
		}
		return false, fmt.Sprintf("state %v, retried %d, last error %q", info.State, info.Retried, info.LastErr)
	})
	return info
}

// waitUntil polls cond every 10 ms; after within it fails the test with the
// last state cond described.
func waitUntil(t *testing.T, within time.Duration, want string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: got %s, want %s", within, state, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// received is one request a receiver got.
type received struct {
	Body   []byte
	Header http.Header
}

// receiver is an HTTPS webhook receiver that records every request and
// answers what answer returns for the n-th request (1-based; 200 if nil).
// answer may block.
type receiver struct {
	srv    *httptest.Server
	URL    string
	answer func(n int, r *http.Request) int
	mu     sync.Mutex
	got    []received
}

func newReceiver(t testing.TB, answer func(n int, r *http.Request) int) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the sender went away mid-body
		}
		rc.mu.Lock()
		rc.got = append(rc.got, received{Body: body, Header: r.Header.Clone()})
		n := len(rc.got)
		rc.mu.Unlock()
		status := http.StatusOK
		if rc.answer != nil {
			status = rc.answer(n, r)
		}
		w.WriteHeader(status)
	}))
	rc.URL = rc.srv.URL + "/hooks"
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

// waitCount waits until the receiver has at least n requests.
func (rc *receiver) waitCount(t *testing.T, n int, within time.Duration) {
	t.Helper()
	waitUntil(t, within, fmt.Sprintf("at least %d requests", n), func() (bool, string) {
		got := rc.count()
		return got >= n, fmt.Sprintf("%d requests", got)
	})
}

// stays checks that the receiver gets no request beyond n during window.
func (rc *receiver) stays(t *testing.T, n int, window time.Duration) {
	t.Helper()
	deadline := time.Now().Add(window)
	for time.Now().Before(deadline) {
		if got := rc.count(); got != n {
			t.Fatalf("got %d requests, want exactly %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventIDs returns the X-Service-Event-Id of each request, in order.
func (rc *receiver) eventIDs() []string {
	var ids []string
	for _, r := range rc.requests() {
		ids = append(ids, r.Header.Get(webhook.EventIDHeader))
	}
	return ids
}

var eventIDPattern = regexp.MustCompile(`^evt_[0-9A-Za-z]{20,}$`)
var signaturePattern = regexp.MustCompile(`^sha256=[0-9a-f]{64}$`)

func TestWebhookSignatureOverRawBytes(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	rc := newReceiver(t, nil)
	sc := payments.Scope{MerchantID: s.merchant(t, "Signature shop")}
	ep := s.endpoint(t, sc, rc.URL)
	// Non-ASCII and characters JSON encoders escape differently: the
	// signature must cover the bytes as sent, not a re-encoding.
	meta := map[string]string{"order_id": "ord_42", "note": `café "quoted" <b>&</b> ✓`}
	pi := s.pay(t, sc, sandbox.CardSuccess, meta)
	start := time.Now()

	rc.waitCount(t, 1, 15*time.Second)
	req := rc.requests()[0]
	if err := webhook.Verify(ep.Secret, req.Body, req.Header.Get(webhook.SignatureHeader)); err != nil {
		t.Errorf("webhook.Verify with the endpoint's secret over the raw body: got %v, want nil (header %q)",
			err, req.Header.Get(webhook.SignatureHeader))
	}
	tampered := append(bytes.Clone(req.Body), ' ')
	if err := webhook.Verify(ep.Secret, tampered, req.Header.Get(webhook.SignatureHeader)); !errors.Is(err, webhook.ErrMismatch) {
		t.Errorf("webhook.Verify over the body plus one space: got %v, want ErrMismatch", err)
	}

	var body struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Created  *int64 `json:"created"`
		Livemode *bool  `json:"livemode"`
		Data     struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		} `json:"data"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		t.Fatalf("body %s: %v", req.Body, err)
	}
	eventID := s.eventOf(t, pi)
	checks := []struct {
		what      string
		got, want any
	}{
		{"signature header shape", signaturePattern.MatchString(req.Header.Get(webhook.SignatureHeader)), true},
		{"Content-Type", req.Header.Get("Content-Type"), "application/json"},
		{"X-Service-Event-Id", req.Header.Get(webhook.EventIDHeader), body.ID},
		{"X-Service-Event-Type", req.Header.Get(webhook.EventTypeHeader), body.Type},
		{"body id is the stored event's", body.ID, eventID},
		{"body id shape evt_…", eventIDPattern.MatchString(body.ID), true},
		{"body type", body.Type, payments.EventPaymentSucceeded},
		{"body has created", body.Created != nil, true},
		{"body has livemode", body.Livemode != nil, true},
		{"data.id", body.Data.ID, pi},
		{"data.metadata", body.Data.Metadata, meta},
		{"body is the stored event's bytes", string(req.Body), string(s.storedPayloads(t, sc)[eventID])},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if body.Livemode != nil && *body.Livemode {
		t.Errorf("livemode: got true, want false for a test-mode event")
	}
	if body.Created != nil {
		if c := time.Unix(*body.Created, 0); c.Before(start.Add(-time.Minute)) || c.After(time.Now().Add(time.Minute)) {
			t.Errorf("created: got %v, want about %v", c, start)
		}
	}

	row := s.settled(t, ep.ID, eventID, 10*time.Second)
	if row.Status != "succeeded" || row.Attempts != 1 || row.LastStatus.Int64 != 200 {
		t.Errorf("delivery row: got %+v, want succeeded after 1 attempt with status 200", row)
	}
}

func TestWebhookFanOutByEndpointModeAndMerchant(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	a := s.merchant(t, "Fan-out shop")
	aTest, aLive := payments.Scope{MerchantID: a}, payments.Scope{MerchantID: a, Live: true}
	bTest := payments.Scope{MerchantID: s.merchant(t, "Other shop")}

	type ep struct {
		name string
		sc   payments.Scope
		only []string
		rc   *receiver
		obj  payments.EndpointObject
	}
	eps := []*ep{
		{name: "first test endpoint", sc: aTest},
		{name: "second test endpoint", sc: aTest},
		{name: "test endpoint for payment_failed only", sc: aTest, only: []string{payments.EventPaymentFailed}},
		{name: "live endpoint", sc: aLive},
		{name: "other merchant's test endpoint", sc: bTest},
	}
	for _, e := range eps {
		e.rc = newReceiver(t, nil)
		e.obj = s.endpoint(t, e.sc, e.rc.URL, e.only...)
	}
	if eps[0].obj.Secret == eps[1].obj.Secret {
		t.Fatalf("two endpoints got the same secret %q, want their own", eps[0].obj.Secret)
	}

	succeeded := s.eventOf(t, s.pay(t, aTest, sandbox.CardSuccess, nil))
	failed := s.eventOf(t, s.pay(t, aTest, sandbox.CardDeclined, nil))
	live := s.eventOf(t, s.pay(t, aLive, sandbox.CardSuccess, nil))
	want := [][]string{
		{succeeded, failed},
		{succeeded, failed},
		{failed},
		{live},
		nil,
	}

	// Every delivery row that exists is for an expected pair, and once all
	// are settled no more requests can come.
	for i, e := range eps {
		var got []string
		for _, r := range s.deliveries(t, e.obj.ID) {
			got = append(got, r.EventID)
		}
		if !sameSet(got, want[i]) {
			t.Errorf("%s: got deliveries of %v, want %v", e.name, got, want[i])
		}
	}
	for i, e := range eps {
		for _, ev := range want[i] {
			if row := s.settled(t, e.obj.ID, ev, 15*time.Second); row.Status != "succeeded" {
				t.Errorf("%s, delivery of %s: got %+v, want succeeded", e.name, ev, row)
			}
		}
	}
	for i, e := range eps {
		if got := e.rc.eventIDs(); !sameSet(got, want[i]) {
			t.Errorf("%s: received events %v, want %v", e.name, got, want[i])
		}
	}

	// Each delivery is signed with its own endpoint's secret only.
	for i, e := range eps[:2] {
		other := eps[1-i]
		for _, r := range e.rc.requests() {
			sig := r.Header.Get(webhook.SignatureHeader)
			if err := webhook.Verify(e.obj.Secret, r.Body, sig); err != nil {
				t.Errorf("%s, event %s: verify with its own secret: got %v, want nil", e.name, r.Header.Get(webhook.EventIDHeader), err)
			}
			if err := webhook.Verify(other.obj.Secret, r.Body, sig); !errors.Is(err, webhook.ErrMismatch) {
				t.Errorf("%s, event %s: verify with the %s's secret: got %v, want ErrMismatch", e.name,
					r.Header.Get(webhook.EventIDHeader), other.name, err)
			}
		}
	}
	// Independent deliveries of one event carry the same bytes.
	byEvent := func(rc *receiver) map[string][]byte {
		m := map[string][]byte{}
		for _, r := range rc.requests() {
			m[r.Header.Get(webhook.EventIDHeader)] = r.Body
		}
		return m
	}
	first, second := byEvent(eps[0].rc), byEvent(eps[1].rc)
	for _, ev := range want[0] {
		if !bytes.Equal(first[ev], second[ev]) {
			t.Errorf("event %s: got different bodies at the two endpoints:\n%s\n%s", ev, first[ev], second[ev])
		}
	}
	for _, r := range eps[3].rc.requests() {
		var body struct{ Livemode bool }
		if err := json.Unmarshal(r.Body, &body); err != nil || !body.Livemode {
			t.Errorf("live endpoint: got body %s, want livemode true", r.Body)
		}
	}
}

func sameSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			return false
		}
		seen[w]--
	}
	return true
}

func TestDeliverRetriesUntilSuccess(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	cases := []struct {
		name     string
		failures int // answered 500 before a 200
	}{
		{"three failures then success", 3},
		{"one failure then success", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := payments.Scope{MerchantID: s.merchant(t, "Retry shop")}
			// The failure count the endpoint has when the successful attempt
			// arrives; read by the receiver, so -1 until then.
			var mu sync.Mutex
			countBeforeSuccess := -1
			var epID string
			rc := newReceiver(t, func(n int, _ *http.Request) int {
				if n <= c.failures {
					return http.StatusInternalServerError
				}
				if n == c.failures+1 {
					var got int
					_ = s.db.Get(&got, `SELECT consecutive_failures FROM webhook_endpoints WHERE id = $1`, epID)
					mu.Lock()
					countBeforeSuccess = got
					mu.Unlock()
				}
				return http.StatusOK
			})
			ep := s.endpoint(t, sc, rc.URL)
			epID = ep.ID
			ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))

			row := s.settled(t, ep.ID, ev, 30*time.Second)
			if row.Status != "succeeded" || row.Attempts != c.failures+1 || row.LastStatus.Int64 != 200 {
				t.Errorf("delivery row: got %+v, want succeeded after %d attempts, last status 200", row, c.failures+1)
			}
			mu.Lock()
			if countBeforeSuccess != c.failures {
				t.Errorf("consecutive_failures when the successful attempt arrived: got %d, want %d", countBeforeSuccess, c.failures)
			}
			mu.Unlock()
			if got := s.failures(t, ep.ID); got != 0 {
				t.Errorf("consecutive_failures after the success: got %d, want 0", got)
			}
			// No attempt after the success: the task is done.
			s.taskState(t, row.ID, 10*time.Second, asynq.TaskStateCompleted)
			rc.stays(t, c.failures+1, 200*time.Millisecond)
			payload := s.storedPayloads(t, sc)[ev]
			for i, r := range rc.requests() {
				if got := r.Header.Get(webhook.EventIDHeader); got != ev || !bytes.Equal(r.Body, payload) {
					t.Errorf("attempt %d: got event %s with body %s, want event %s with its stored bytes", i+1, got, r.Body, ev)
				}
				if err := webhook.Verify(ep.Secret, r.Body, r.Header.Get(webhook.SignatureHeader)); err != nil {
					t.Errorf("attempt %d: signature: got %v, want valid", i+1, err)
				}
			}
			if st := s.endpointStatus(t, sc, ep.ID); st != payments.EndpointEnabled {
				t.Errorf("endpoint status: got %q, want %q", st, payments.EndpointEnabled)
			}
		})
	}
}

// TestEventTaskMakesFirstAttempts: an event's one task makes the first
// attempt to each of its endpoints; a failed one is retried by the
// delivery's own task, the successes have none; every receiver gets the
// same event id and bytes. A resend is a delivery of its own, never one of
// the event's first attempts, so the event's task run again sends nothing.
func TestEventTaskMakesFirstAttempts(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Fan-out shop")}
	ok1, ok2 := newReceiver(t, nil), newReceiver(t, nil)
	flaky := newReceiver(t, func(n int, _ *http.Request) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	eps := []payments.EndpointObject{s.endpoint(t, sc, ok1.URL), s.endpoint(t, sc, flaky.URL), s.endpoint(t, sc, ok2.URL)}
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))

	wantAttempts := []int{1, 2, 1}
	var rows []deliveryRow
	for i, ep := range eps {
		row := s.settled(t, ep.ID, ev, 30*time.Second)
		if row.Status != payments.DeliverySucceeded || row.Attempts != wantAttempts[i] {
			t.Errorf("delivery to endpoint %d: got %+v, want succeeded after %d attempts", i+1, row, wantAttempts[i])
		}
		var recorded int
		if err := s.db.Get(&recorded, `SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1`, row.ID); err != nil {
			t.Fatal(err)
		}
		if recorded != wantAttempts[i] {
			t.Errorf("attempts kept of the delivery to endpoint %d: got %d, want %d", i+1, recorded, wantAttempts[i])
		}
		if got := s.failures(t, ep.ID); got != 0 {
			t.Errorf("endpoint %d consecutive_failures: got %d, want 0", i+1, got)
		}
		var last sql.NullTime
		if err := s.db.Get(&last, `SELECT last_delivery_at FROM webhook_endpoints WHERE id = $1`, ep.ID); err != nil || !last.Valid {
			t.Errorf("endpoint %d last_delivery_at: got %v, %v, want set", i+1, last, err)
		}
		rows = append(rows, row)
	}
	s.taskState(t, ev, 10*time.Second, asynq.TaskStateCompleted)
	s.taskState(t, rows[1].ID, 10*time.Second, asynq.TaskStateCompleted) // the retry
	for _, i := range []int{0, 2} {
		if info, err := s.insp.GetTaskInfo(tasks.QueueDefault, rows[i].ID); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("delivery to endpoint %d: got task %+v, %v, want none of its own (its event's task sent it)", i+1, info, err)
		}
	}
	payload := s.storedPayloads(t, sc)[ev]
	for i, rc := range []*receiver{ok1, flaky, ok2} {
		rc.stays(t, wantAttempts[i], 200*time.Millisecond)
		for _, r := range rc.requests() {
			if r.Header.Get(webhook.EventIDHeader) != ev || r.Header.Get(webhook.StandardIDHeader) != ev || !bytes.Equal(r.Body, payload) {
				t.Errorf("receiver %d: got event %s (webhook-id %s) with body %s, want %s with its stored bytes",
					i+1, r.Header.Get(webhook.EventIDHeader), r.Header.Get(webhook.StandardIDHeader), r.Body, ev)
			}
			if err := webhook.Verify(eps[i].Secret, r.Body, r.Header.Get(webhook.SignatureHeader)); err != nil {
				t.Errorf("receiver %d: signature: got %v, want valid", i+1, err)
			}
		}
	}

	// A resend has a task of its own and is never one of the event's first
	// attempts, not even while it is pending and unattempted (made so
	// below once its own task has sent it).
	d, err := s.svc.ResendEvent(ctx, sc, ev, payments.ResendInput{Endpoint: &eps[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	s.taskState(t, d.ID, 10*time.Second, asynq.TaskStateCompleted)
	ok1.waitCount(t, 2, 10*time.Second)
	if _, err := s.db.ExecContext(ctx, `UPDATE webhook_deliveries SET status = 'pending', attempts = 0 WHERE id = $1`, d.ID); err != nil {
		t.Fatal(err)
	}
	if first, err := s.store.FirstDeliveries(ctx, sc, ev); err != nil || len(first) != 0 {
		t.Errorf("FirstDeliveries with an unattempted resend: got %+v, %v, want none", first, err)
	}
}

// TestDeliverLastRunOfTaskIsFinal: when asynq runs a delivery's task for
// the last time (its own retry count, which runs that recorded nothing
// also use up), a failure there fails the delivery, whatever the row's
// attempt count: it does not stay pending with its task archived.
func TestDeliverLastRunOfTaskIsFinal(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Last run shop")}
	rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
	ep := s.endpoint(t, sc, rc.URL)
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	if err := s.insp.DeleteTask(tasks.QueueDefault, ev); err != nil { // the event's task, not run
		t.Fatal(err)
	}
	id := s.delivery(t, ep.ID, ev).ID
	payload, _ := json.Marshal(tasks.DeliverWebhook{MerchantID: sc.MerchantID, DeliveryID: id})
	if _, err := s.enq.Client.EnqueueContext(ctx, asynq.NewTask(tasks.TypeDeliverWebhook, payload, asynq.TaskID(id),
		asynq.Queue(tasks.QueueDefault), asynq.MaxRetry(0))); err != nil {
		t.Fatal(err)
	}
	s.startWorker(t)
	row := s.settled(t, ep.ID, ev, 10*time.Second)
	if row.Status != payments.DeliveryFailed || row.Attempts != 1 {
		t.Errorf("delivery: got %+v, want failed after its task's only run", row)
	}
	s.taskState(t, id, 10*time.Second, asynq.TaskStateArchived)
}

// TestRecordSuccessesConcurrently: the successes of events recorded at
// once, whose deliveries share endpoints, all commit and are each recorded
// once, and every endpoint ends with no failures and a last_delivery_at
// among the attempts' (a success that finds the row held skips it, so not
// necessarily the latest).
func TestRecordSuccessesConcurrently(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Busy endpoints shop")}
	var eps []string
	for i := range 5 {
		eps = append(eps, s.endpoint(t, sc, fmt.Sprintf("https://hooks%d.example/", i)).ID)
	}
	const n = 120
	var events [][]payments.Delivery
	for range n {
		dels, err := s.store.FirstDeliveries(ctx, sc, s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil)))
		if err != nil || len(dels) != len(eps) {
			t.Fatalf("FirstDeliveries: got %d, %v, want %d", len(dels), err, len(eps))
		}
		events = append(events, dels)
	}
	base := time.Now().Truncate(time.Second)
	errs := make(chan error, n)
	start := make(chan struct{})
	for i, dels := range events {
		go func() {
			<-start
			var err error
			for j := range dels {
				del := dels[(i+j)%len(dels)]
				if i%2 == 1 {
					del = dels[len(dels)-1-(i+j)%len(dels)]
				}
				// A second of its own, so every statement writes the endpoints.
				att := payments.DeliveryAttempt{ID: payments.NewID("wha_"), At: base.Add(time.Duration(i) * time.Second), HTTPStatus: 200}
				if _, e := s.store.RecordAttempt(ctx, del, att, payments.DisableReason); e != nil {
					err = e
				}
			}
			errs <- err
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("RecordAttempt: %v", err)
		}
	}
	var rows []struct {
		Succeeded int          `db:"succeeded"`
		Attempts  int          `db:"attempts"`
		Failures  int          `db:"consecutive_failures"`
		Last      sql.NullTime `db:"last_delivery_at"`
	}
	const q = `SELECT (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = we.id AND d.status = 'succeeded' AND d.attempts = 1) AS succeeded,
		(SELECT count(*) FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = we.id) AS attempts,
		we.consecutive_failures, we.last_delivery_at FROM webhook_endpoints we WHERE we.id = ANY($1)`
	if err := s.db.Select(&rows, q, pq.Array(eps)); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		last := r.Last.Time.Sub(base)
		if r.Succeeded != n || r.Attempts != n || r.Failures != 0 || !r.Last.Valid || last < 0 || last > (n-1)*time.Second || last%time.Second != 0 {
			t.Errorf("endpoint: got %d succeeded deliveries, %d attempts, %d failures, last delivery at base+%v; want %d, %d, 0, one of the attempts' times",
				r.Succeeded, r.Attempts, r.Failures, last, n, n)
		}
	}
}

func TestDeliverDisablesEndpointAfterTenFailures(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)

	t.Run("ten consecutive failures", func(t *testing.T) {
		t.Parallel()
		sc := payments.Scope{MerchantID: s.merchant(t, "Failing shop")}
		rc := newReceiver(t, func(int, *http.Request) int { return http.StatusInternalServerError })
		ep := s.endpoint(t, sc, rc.URL)
		ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))

		row := s.settled(t, ep.ID, ev, 60*time.Second)
		if row.Status != "failed" || row.Attempts != 10 || row.LastStatus.Int64 != 500 {
			t.Errorf("delivery row: got %+v, want failed after 10 attempts, last status 500", row)
		}
		if st := s.endpointStatus(t, sc, ep.ID); st != payments.EndpointDisabled {
			t.Errorf("endpoint status: got %q, want %q", st, payments.EndpointDisabled)
		}
		if got := s.failures(t, ep.ID); got != 10 {
			t.Errorf("consecutive_failures: got %d, want 10", got)
		}
		// The event's task made the first attempt; the delivery's own task
		// the nine others.
		info := s.taskState(t, row.ID, 10*time.Second, asynq.TaskStateArchived)
		if info.Retried != 8 {
			t.Errorf("archived task: got %d retries, want 8 (9 attempts after the event's first)", info.Retried)
		}
		archived, err := s.insp.ListArchivedTasks(tasks.QueueDefault, asynq.PageSize(1000))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(archived, func(ti *asynq.TaskInfo) bool { return ti.ID == row.ID }) {
			t.Errorf("archived tasks of queue %s: got %d without %s, want it there", tasks.QueueDefault, len(archived), row.ID)
		}

		// A disabled endpoint gets no delivery of a new event.
		next := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
		for _, r := range s.deliveries(t, ep.ID) {
			if r.EventID == next {
				t.Errorf("new event %s: got delivery %+v to the disabled endpoint, want none", next, r)
			}
		}
		rc.stays(t, 10, time.Second)
	})

	t.Run("a success resets the count", func(t *testing.T) {
		t.Parallel()
		sc := payments.Scope{MerchantID: s.merchant(t, "Flaky shop")}
		// Nine failures then a success for the first event; one failure
		// then a success for the second. Without the reset, the second
		// event's failure would be the tenth in a row.
		rc := newReceiver(t, func(n int, _ *http.Request) int {
			if n <= 9 || n == 11 {
				return http.StatusInternalServerError
			}
			return http.StatusOK
		})
		ep := s.endpoint(t, sc, rc.URL)
		first := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
		if row := s.settled(t, ep.ID, first, 60*time.Second); row.Status != "succeeded" || row.Attempts != 10 {
			t.Fatalf("first delivery: got %+v, want succeeded after 10 attempts", row)
		}
		if got := s.failures(t, ep.ID); got != 0 {
			t.Errorf("consecutive_failures after 9 failures and a success: got %d, want 0", got)
		}
		second := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
		if row := s.settled(t, ep.ID, second, 30*time.Second); row.Status != "succeeded" || row.Attempts != 2 {
			t.Errorf("second delivery: got %+v, want succeeded after 2 attempts", row)
		}
		if st := s.endpointStatus(t, sc, ep.ID); st != payments.EndpointEnabled {
			t.Errorf("endpoint status: got %q, want %q", st, payments.EndpointEnabled)
		}
		if got := s.failures(t, ep.ID); got != 0 {
			t.Errorf("consecutive_failures at the end: got %d, want 0", got)
		}
	})
}

func TestDeliverStopsWhenEndpointDeleted(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Deleting shop")}
	// The fourth attempt is held until the endpoint is deleted, so the
	// deletion lands while retries are pending and no attempt can slip in
	// between; every attempt fails.
	const held = 4
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == held {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return http.StatusInternalServerError
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	ep := s.endpoint(t, sc, rc.URL)
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))

	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatalf("got %d requests after 15s, want %d", rc.count(), held)
	}
	del, err := s.svc.DeleteEndpoint(context.Background(), sc, ep.ID)
	if err != nil || !del.Deleted {
		t.Fatalf("delete endpoint: got %+v, %v, want deleted", del, err)
	}
	if row := s.delivery(t, ep.ID, ev); row.Status != "failed" {
		t.Errorf("delivery right after the deletion: got %+v, want failed", row)
	}
	releaseOnce.Do(func() { close(release) })

	// Watch the receiver and the row until the task has settled (no retry
	// left scheduled), then a little longer: the row, once failed, must
	// stay failed, and no attempt may reach the receiver.
	row := s.delivery(t, ep.ID, ev)
	seen := []string{row.Status}
	settled := time.Time{}
	deadline := time.Now().Add(15 * time.Second)
	for settled.IsZero() || time.Since(settled) < 300*time.Millisecond {
		if got := rc.count(); got != held {
			t.Fatalf("after the deletion: got %d requests, want %d", got, held)
		}
		if row = s.delivery(t, ep.ID, ev); seen[len(seen)-1] != row.Status {
			seen = append(seen, row.Status)
		}
		if settled.IsZero() {
			info, err := s.insp.GetTaskInfo(tasks.QueueDefault, row.ID)
			if err != nil {
				t.Fatal(err)
			}
			if info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived {
				settled = time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery task of %s still not completed or archived after 15s", row.ID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(seen) != 1 || seen[0] != "failed" {
		t.Errorf("delivery status from the deletion on: went through %v, want failed throughout", seen)
	}
	if row.Status != "failed" || row.LastError.String != "endpoint deleted" {
		t.Errorf("delivery at the end: got status %q, last error %q, want failed, \"endpoint deleted\"", row.Status, row.LastError.String)
	}
	if st := s.endpointStatus(t, sc, ep.ID); st != "" {
		t.Errorf("GET endpoints after delete: got %s listed with status %q, want it gone", ep.ID, st)
	}
}

func TestRelayRedeliversAfterRedisFlush(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	rc := newReceiver(t, nil)
	sc := payments.Scope{MerchantID: s.merchant(t, "Flushed shop")}
	ep := s.endpoint(t, sc, rc.URL)
	const n = 20
	want := map[string]bool{}
	var ids []string
	for i := range n {
		card := sandbox.CardSuccess
		if i%4 == 3 {
			card = sandbox.CardDeclined
		}
		want[s.eventOf(t, s.pay(t, sc, card, map[string]string{"i": fmt.Sprint(i)}))] = true
	}
	for _, r := range s.deliveries(t, ep.ID) {
		ids = append(ids, r.ID)
	}
	if len(ids) != n || len(want) != n {
		t.Fatalf("got %d deliveries of %d events, want %d of %d", len(ids), len(want), n, n)
	}
	// An event's first attempts are one task: TaskID = event id.
	queued := s.pendingTasks(t, tasks.QueueDefault)
	for id := range want {
		if !queued[id] {
			t.Fatalf("before the flush: event %s has no pending task, want one enqueued after commit", id)
		}
	}

	if err := testenv.Redis(t).FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.pendingTasks(t, tasks.QueueDefault); len(got) != 0 {
		t.Fatalf("after FlushDB: got %d pending tasks, want 0", len(got))
	}

	enqueued, err := worker.RelayOnce(ctx, s.store, s.enq, time.Now(), 0)
	if err != nil {
		t.Fatalf("RelayOnce: %v", err)
	}
	if enqueued < n {
		t.Errorf("RelayOnce: got %d enqueued, want at least %d", enqueued, n)
	}
	queued = s.pendingTasks(t, tasks.QueueDefault)
	for id := range want {
		if !queued[id] {
			t.Errorf("after RelayOnce: event %s has no pending task, want one", id)
		}
	}
	for _, id := range ids {
		if queued[id] {
			t.Errorf("after RelayOnce: delivery %s has a task of its own, want its event's only (no second send)", id)
		}
	}
	// A task still queued is not queued twice (TaskID = event id).
	if again, err := worker.RelayOnce(ctx, s.store, s.enq, time.Now(), 0); err != nil || again != 0 {
		t.Errorf("second RelayOnce: got %d enqueued, %v, want 0, nil", again, err)
	}
	if got := rc.count(); got != 0 {
		t.Fatalf("before any worker ran: got %d requests, want 0", got)
	}

	s.startWorker(t)
	waitUntil(t, 30*time.Second, fmt.Sprintf("all %d events received", n), func() (bool, string) {
		seen := map[string]bool{}
		for _, id := range rc.eventIDs() {
			seen[id] = true
		}
		var missing []string
		for id := range want {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d missing: %v", len(missing), missing)
	})
	payloads := s.storedPayloads(t, sc)
	first := map[string][]byte{}
	for _, r := range rc.requests() {
		id := r.Header.Get(webhook.EventIDHeader)
		if !want[id] {
			t.Errorf("got event %s, want only this test's events", id)
			continue
		}
		if prev, ok := first[id]; ok && !bytes.Equal(prev, r.Body) {
			t.Errorf("duplicate of %s: got body %s, want the same bytes as before: %s", id, r.Body, prev)
		}
		first[id] = r.Body
		if !bytes.Equal(r.Body, payloads[id]) {
			t.Errorf("event %s: got body %s, want the stored event %s", id, r.Body, payloads[id])
		}
		if err := webhook.Verify(ep.Secret, r.Body, r.Header.Get(webhook.SignatureHeader)); err != nil {
			t.Errorf("event %s: signature: got %v, want valid", id, err)
		}
	}
	t.Logf("%d requests for %d events", rc.count(), n)
	for _, r := range s.deliveries(t, ep.ID) {
		if row := s.settled(t, ep.ID, r.EventID, 10*time.Second); row.Status != "succeeded" {
			t.Errorf("delivery %s: got %+v, want succeeded", r.ID, row)
		}
	}
}

func TestDeliverSkipsRetryForUnknownDelivery(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	client := asynq.NewClient(s.redisOpt)
	defer client.Close()
	sc := payments.Scope{MerchantID: s.merchant(t, "Orphan shop")}
	rc := newReceiver(t, nil)
	ep := s.endpoint(t, sc, rc.URL)

	// With no worker running: a delivery whose row is deleted after its
	// event's task was enqueued, and a retry's task queued for it.
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	deleted := s.delivery(t, ep.ID, ev).ID
	if _, err := s.db.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id = $1`, deleted); err != nil {
		t.Fatal(err)
	}
	raw := func(typ, id string, payload []byte) *asynq.Task {
		return asynq.NewTask(typ, payload, asynq.TaskID(id), asynq.Queue(tasks.QueueDefault),
			asynq.MaxRetry(tasks.DeliveryMaxRetry), asynq.Retention(time.Hour))
	}
	unknown := payments.NewID("whd_")
	cases := []struct {
		name string
		id   string
		task *asynq.Task
	}{
		{"delivery row deleted", deleted, tasks.NewDeliverWebhook(tasks.DeliverWebhook{MerchantID: sc.MerchantID, DeliveryID: deleted})},
		{"unknown delivery id", unknown, tasks.NewDeliverWebhook(tasks.DeliverWebhook{MerchantID: sc.MerchantID, DeliveryID: unknown})},
		{"payload is not JSON", "bad-json", raw(tasks.TypeDeliverWebhook, "bad-json", []byte("{not json"))},
		{"payload without a delivery id", "no-id", raw(tasks.TypeDeliverWebhook, "no-id", []byte(`{"merchant_id":"`+sc.MerchantID+`","livemode":false}`))},
		{"event payload is not JSON", "bad-event-json", raw(tasks.TypeDeliverEvent, "bad-event-json", []byte("{not json"))},
		{"event payload without an event id", "no-event-id", raw(tasks.TypeDeliverEvent, "no-event-id", []byte(`{"merchant_id":"`+sc.MerchantID+`","livemode":false}`))},
	}
	for _, c := range cases {
		if _, err := client.EnqueueContext(ctx, c.task); err != nil {
			t.Fatalf("%s: enqueue: %v", c.name, err)
		}
	}
	s.startWorker(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := s.taskState(t, c.id, 10*time.Second, asynq.TaskStateArchived)
			if info.Retried != 0 || info.LastErr == "" {
				t.Errorf("archived task: got %d retries, last error %q, want 0 retries and an error", info.Retried, info.LastErr)
			}
		})
	}
	// The event's task finds nothing left to send and completes.
	s.taskState(t, ev, 10*time.Second, asynq.TaskStateCompleted)
	if got := rc.count(); got != 0 {
		t.Errorf("receiver: got %d requests, want none", got)
	}
}

// buildWorker builds cmd/worker into a temporary directory of the test.
func buildWorker(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "worker")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/worker")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, out)
	}
	return bin
}

// workerProcess is cmd/worker run as a child process.
type workerProcess struct {
	cmd  *exec.Cmd
	logs *testenv.LogBuffer
	done chan struct{}
}

// startWorkerProcess runs the worker binary against the stack's database and
// Redis database, with env (KEY=value) added to this process's environment,
// and waits until its /readyz answers 200. At the end of the test it is
// stopped if still running; its logs are shown if the test failed.
func startWorkerProcess(t *testing.T, s *deliveryStack, bin, name string, env ...string) *workerProcess {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+s.dbURL,
		"REDIS_URL="+s.redisURL,
		"WORKER_ADMIN_ADDR="+admin,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"WEBHOOK_TLS_INSECURE=true",
		"WEBHOOK_RETRY_BASE=50ms",
		"SECRETS_KEY="+base64.StdEncoding.EncodeToString(s.key),
		"LOG_LEVEL=debug",
	)
	cmd.Env = append(cmd.Env, env...)
	// The worker dies with the test binary: one left behind by a killed
	// `go test` keeps taking this Redis database's tasks, against a
	// database that is gone, and fails the next run's delivery tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w := &testenv.LogBuffer{}
	p := &workerProcess{cmd: cmd, logs: w, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, w.String())
		}
	})
	client := &http.Client{Timeout: time.Second}
	waitUntil(t, 30*time.Second, name+" /readyz answering 200", func() (bool, string) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready: %v\n%s", name, cmd.ProcessState, w.String())
		default:
		}
		res, err := client.Get("http://" + admin + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *workerProcess) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker still running 10s after SIGKILL")
	}
}

// TestAfterWorkerKilled runs the tests that kill a worker mid-task, all at
// once: each spends about a minute waiting for asynq's recoverer. As
// parallel tests, -parallel (GOMAXPROCS by default: 2 on a 2-core machine)
// would run only two at a time; subtests started from goroutines without
// t.Parallel do not count against it.
func TestAfterWorkerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("waits about a minute for asynq's lease recovery")
	}
	t.Parallel()
	var wg sync.WaitGroup
	for name, test := range map[string]func(*testing.T){
		"Refund":   refundExactlyOnceAfterWorkerKilled,
		"Delivery": deliverRecoversAfterWorkerKilled,
		"Renewal":  renewalExactlyOnceAfterWorkerKilled,
	} {
		wg.Go(func() { t.Run(name, test) })
	}
	wg.Wait()
}

// deliverRecoversAfterWorkerKilled: a worker killed while its delivery's
// request is in flight; the next worker delivers it once the lease ends.
func deliverRecoversAfterWorkerKilled(t *testing.T) {
	bin := buildWorker(t)
	s := newDeliveryStackOn(t, testenv.OwnDatabaseURL(t), testenv.OwnRedisURL(t))
	sc := payments.Scope{MerchantID: s.merchant(t, "Crash shop")}
	// The first request is held until its sender dies; later ones succeed.
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			close(arrived)
			select {
			case <-release:
			case <-r.Context().Done(): // the worker died
			}
		}
		return http.StatusOK
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	ep := s.endpoint(t, sc, rc.URL)

	first := startWorkerProcess(t, s, bin, "first worker")
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("first worker: no request after 30s, want the delivery of %s", ev)
	}
	first.kill(t)
	killedAt := time.Now()
	releaseOnce.Do(func() { close(release) })
	row := s.delivery(t, ep.ID, ev)
	if row.Status != "pending" || row.Attempts != 0 {
		t.Fatalf("delivery after the kill: got %+v, want pending with no attempt recorded", row)
	}

	startWorkerProcess(t, s, bin, "second worker")
	// asynq's recoverer (every minute) re-queues an active task whose lease
	// (30 s, extended by heartbeats) expired over 30 s ago.
	rc.waitCount(t, 2, 90*time.Second)
	t.Logf("redelivered %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))

	reqs := rc.requests()
	if got := reqs[1].Header.Get(webhook.EventIDHeader); got != ev || !bytes.Equal(reqs[1].Body, reqs[0].Body) {
		t.Errorf("redelivery: got event %s, body %s, want event %s with the first attempt's bytes %s", got, reqs[1].Body, ev, reqs[0].Body)
	}
	if err := webhook.Verify(ep.Secret, reqs[1].Body, reqs[1].Header.Get(webhook.SignatureHeader)); err != nil {
		t.Errorf("redelivery signature: got %v, want valid", err)
	}
	if row := s.settled(t, ep.ID, ev, 10*time.Second); row.Status != "succeeded" {
		t.Errorf("delivery row: got %+v, want succeeded", row)
	}
}

// TestDeliverExactlyOnceAfterWorkerStopped: SIGTERM while a delivery waits
// on a receiver that takes 5 s to answer, past WORKER_SHUTDOWN_TIMEOUT (1 s
// here). The worker stops within the timeout, handing the task straight
// back to the queue (no lease to wait out); the next worker delivers the
// event again with the same webhook-id and bytes, and the delivery is
// recorded once: one succeeded row, one attempt (the cut-off request got no
// answer the worker could record), no third request.
func TestDeliverExactlyOnceAfterWorkerStopped(t *testing.T) {
	bin := buildWorker(t)
	s := newDeliveryStack(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Stopped delivery shop")}
	arrived := make(chan struct{})
	rc := newReceiver(t, func(n int, r *http.Request) int {
		if n == 1 {
			close(arrived)
			time.Sleep(5 * time.Second) // past the shutdown timeout, whatever the sender does
		}
		return http.StatusOK
	})
	ep := s.endpoint(t, sc, rc.URL)

	t.Setenv("WORKER_SHUTDOWN_TIMEOUT", "1s")
	first := startWorkerProcess(t, s, bin, "first worker")
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("first worker: no request after 30s, want the delivery of %s", ev)
	}
	stoppedAt := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	case <-time.After(4 * time.Second):
		t.Fatal("worker still running 4 s after SIGTERM with WORKER_SHUTDOWN_TIMEOUT=1s (the receiver answers after 5 s)")
	}
	t.Logf("worker stopped %v after SIGTERM", time.Since(stoppedAt).Round(100*time.Millisecond))
	row := s.delivery(t, ep.ID, ev)
	if row.Status != payments.DeliveryPending || row.Attempts != 0 {
		t.Fatalf("delivery after the stop: got %+v, want pending with no attempt recorded", row)
	}
	if info, err := s.insp.GetTaskInfo(tasks.QueueDefault, ev); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("the event's task after the stop: got %+v, %v; want it pending again", info, err)
	}

	startWorkerProcess(t, s, bin, "second worker")
	if row := s.settled(t, ep.ID, ev, 30*time.Second); row.Status != payments.DeliverySucceeded || row.Attempts != 1 {
		t.Errorf("delivery after the second worker: got %+v, want succeeded after 1 recorded attempt", row)
	}
	t.Logf("delivered %v after SIGTERM", time.Since(stoppedAt).Round(100*time.Millisecond))
	rc.stays(t, 2, time.Second)
	reqs := rc.requests()
	for i, r := range reqs {
		if id := r.Header.Get(webhook.StandardIDHeader); id != reqs[0].Header.Get(webhook.StandardIDHeader) || r.Header.Get(webhook.EventIDHeader) != ev || !bytes.Equal(r.Body, reqs[0].Body) {
			t.Errorf("request %d: got webhook-id %s, event %s, want one webhook-id for event %s and the same bytes", i+1, id, r.Header.Get(webhook.EventIDHeader), ev)
		}
	}
	var attempts int
	if err := s.db.Get(&attempts, `SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1`, row.ID); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 {
		t.Errorf("webhook_attempts of the delivery: got %d, want 1", attempts)
	}
}

// BenchmarkDeliver is one successful attempt of the delivery handler, run
// through asynq's mux as the worker runs it: the delivery read, the signed
// POST to a local HTTPS receiver, the attempt recorded. The delivery is
// made pending again between iterations, untimed. Its allocs/op do not
// depend on the machine's load, unlike its ns/op.
func BenchmarkDeliver(b *testing.B) {
	s := newDeliveryStack(b)
	rc := newReceiver(b, nil)
	sc := payments.Scope{MerchantID: s.merchant(b, "Bench")}
	ep := s.endpoint(b, sc, rc.URL)
	s.pay(b, sc, "4242424242424242", nil)
	var id string
	if err := s.db.Get(&id, `SELECT id FROM webhook_deliveries WHERE endpoint_id = $1`, ep.ID); err != nil {
		b.Fatal(err)
	}
	mux := asynq.NewServeMux()
	(&worker.Deliverer{
		Store:     s.store,
		Sealer:    s.box,
		Client:    webhook.NewClient(webhook.Options{AllowPrivateNetworks: true, InsecureTLS: true}),
		RetryBase: deliveryBase,
		Log:       s.log,
		Now:       time.Now,
		Enqueuer:  s.enq,
	}).Register(mux)
	task := tasks.NewDeliverWebhook(tasks.DeliverWebhook{MerchantID: sc.MerchantID, Live: sc.Live, DeliveryID: id})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := mux.ProcessTask(ctx, task); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := s.db.Exec(`UPDATE webhook_deliveries SET status = 'pending' WHERE id = $1`, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if got := rc.count(); got != b.N {
		b.Fatalf("receiver got %d requests, want %d", got, b.N)
	}
}
