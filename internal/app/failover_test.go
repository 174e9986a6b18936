package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/config"
	"paysvc/internal/postgres"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/webhook"
	"paysvc/internal/worker"
)

// TestSentinelFailoverUnderRealWork: bin/api and bin/worker on a
// redis-sentinel:// REDIS_URL (a primary, a replica, three sentinels on
// loopback), with a webhook endpoint on a local HTTPS receiver. Checkout
// payments (session, then the hosted form), partial refunds (executed by the
// worker at the sandbox) and their webhook deliveries run while the primary
// is killed. Throughout, the API answers every request (the rate limiter
// lets requests through unlimited and counts them in
// paysvc_ratelimit_unavailable_total; the after-commit enqueue fails within
// its budget). Then the relay (worker.RelayOnce, as the scheduler runs it,
// with a short grace) re-enqueues what the failover lost, and the counts
// are exact: every refund succeeded and executed at the sandbox once, one
// refund ledger entry each; the events are exactly those the payments and
// refunds make, each with one delivery, succeeded, with one successful
// attempt recorded, and each reached the receiver (by webhook-id) at least
// once. Last, with the relay stopped, a payment and a refund made on the new
// primary are executed and delivered through the queues alone.
//
// About 30 s (skipped with -short): five Redis servers, two processes, a
// failover.
func TestSentinelFailoverUnderRealWork(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries, starts five Redis servers and waits out a failover")
	}
	bin := buildBinaries(t)
	set := startSentinels(t)
	rc := newHookReceiver(t)

	apiAddr, apiAdmin, workerAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	env := append(os.Environ(),
		"DATABASE_URL="+testenv.DatabaseURL(t),
		"REDIS_URL="+set.url(),
		"API_ADDR="+apiAddr,
		"API_ADMIN_ADDR="+apiAdmin,
		"WORKER_ADMIN_ADDR="+workerAdmin,
		"PUBLIC_BASE_URL=http://"+apiAddr,
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true",
		"WEBHOOK_TLS_INSECURE=true",
		"WEBHOOK_RETRY_BASE=50ms",
		"RATE_LIMIT_PER_HOUR=1000000",
		"LOG_LEVEL=info",
	)
	merchant, key := merchantKey(t, bin, env)
	exited := map[string]<-chan struct{}{
		"api":    startProcess(t, filepath.Join(bin, "api"), []string{"serve"}, env, "api"),
		"worker": startProcess(t, filepath.Join(bin, "worker"), nil, env, "worker"),
	}
	waitReadiness(t, "api", apiAdmin, exited["api"], http.StatusOK, "ok")
	waitReadiness(t, "worker", workerAdmin, exited["worker"], http.StatusOK, "ok")

	api := &apiClient{t: t, base: "http://" + apiAddr, key: key}
	if code, body := api.do(http.MethodPost, "/v1/webhook-endpoints", map[string]any{"url": rc.srv.URL + "/hooks"}, ""); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("POST /v1/webhook-endpoints: got %d %s", code, body)
	}

	// The load: a shop selling and refunding, one after the other, and a
	// reader of its events beside it; every answer is kept.
	var mu sync.Mutex
	var refunds []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sell := func(i int) {
		cs, ok := api.ok(http.MethodPost, "/v1/payment-sessions", map[string]any{
			"line_items":  []map[string]any{{"amount": 5000, "currency": "usd", "name": "Item " + strconv.Itoa(i), "quantity": 1}},
			"success_url": "https://shop.example/thanks", "cancel_url": "https://shop.example/cart",
		}, "")
		if !ok {
			return
		}
		if !api.pay(fmt.Sprint(cs["url"])) {
			return
		}
		r, ok := api.ok(http.MethodPost, "/v1/refunds", map[string]any{"session_id": cs["id"], "amount": 100}, "refund-"+strconv.Itoa(i))
		if !ok {
			return
		}
		mu.Lock()
		refunds = append(refunds, fmt.Sprint(r["id"]))
		mu.Unlock()
	}
	// However the test ends (a Fatal below included), the load stops and
	// its goroutines return before it does: none may report afterwards.
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(halt)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			sell(i)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			api.ok(http.MethodGet, "/v1/events?limit=3", nil, "")
		}
	}()

	time.Sleep(3 * time.Second)
	limited := api.metric(apiAdmin, "paysvc_ratelimit_unavailable_total")
	killed := time.Now()
	_ = set.primaryCmd.Process.Kill()
	set.waitPromoted(t)
	promoted := time.Now()
	t.Logf("failover: the sentinels promoted the replica %v after the kill", promoted.Sub(killed).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second) // load on the new primary
	halt()
	api.report(killed, promoted)
	if d := api.metric(apiAdmin, "paysvc_ratelimit_unavailable_total") - limited; d <= 0 {
		t.Errorf("paysvc_ratelimit_unavailable_total during the failover: grew by %v, want the requests let through unlimited counted", d)
	} else {
		t.Logf("requests let through unlimited during the failover: %v", d)
	}

	// The relay, as the scheduler runs it (every 10 s, 30 s grace), here
	// every 500 ms with a 2 s grace, until the work is done.
	db := testenv.DB(t)
	store := postgres.New(db)
	opts, err := config.RedisOptions(set.url(), "")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewUniversalClient(opts)
	t.Cleanup(func() { rdb.Close() })
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	enq := &tasks.Enqueuer{Client: client, Log: slog.New(slog.DiscardHandler), Redis: rdb}
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.Get(&n, q, args...); err != nil {
			t.Fatal(err)
		}
		return n
	}
	relayed := 0
	pendingWork := func() (int, int) {
		return count(`SELECT count(*) FROM refunds WHERE merchant_id = $1 AND status = 'pending'`, merchant),
			count(`SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1 AND status = 'pending'`, merchant)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		pr, pd := pendingWork()
		if pr == 0 && pd == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("90 s after the load: %d refunds and %d deliveries still pending", pr, pd)
		}
		n, err := worker.RelayOnce(context.Background(), store, enq, time.Now(), 2*time.Second)
		if err != nil {
			t.Logf("relay: %v", err)
		}
		relayed += n
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("all work done %v after the load stopped; the relay re-enqueued %d tasks", time.Since(promoted.Add(3*time.Second)).Round(100*time.Millisecond), relayed)

	mu.Lock()
	made := slices.Clone(refunds)
	mu.Unlock()
	if len(made) < 10 {
		t.Fatalf("%d refunds made under load, want at least 10 for the test to mean anything", len(made))
	}
	checkCounts(t, count, merchant, made, rc)

	// The queues on the new primary, without the relay.
	sell(-1)
	mu.Lock()
	last := refunds[len(refunds)-1]
	mu.Unlock()
	if last == made[len(made)-1] {
		t.Fatal("the sale after the failover made no refund")
	}
	waitUntil(t, 20*time.Second, "the refund and the deliveries made after the failover, through the queues", func() bool {
		pr, pd := pendingWork()
		return pr == 0 && pd == 0
	})
	checkCounts(t, count, merchant, append(made, last), rc)
}

// checkCounts checks the merchant's refunds, events and deliveries after all
// work is done: refunds are the refunds made; every one succeeded and was
// executed at the sandbox and booked once; the events are exactly those
// the sales and refunds make; each has one succeeded delivery with one
// successful attempt, and reached the receiver.
func checkCounts(t *testing.T, count func(string, ...any) int, merchant string, refunds []string, rc *hookReceiver) {
	t.Helper()
	n := len(refunds)
	if got := count(`SELECT count(*) FROM refunds WHERE merchant_id = $1`, merchant); got != n {
		t.Errorf("refunds: got %d rows, want the %d made", got, n)
	}
	if got := count(`SELECT count(*) FROM refunds WHERE merchant_id = $1 AND status = 'succeeded' AND id = ANY($2)`, merchant, pqArray(refunds)); got != n {
		t.Errorf("refunds succeeded: got %d, want %d", got, n)
	}
	if got := count(`SELECT count(*) FROM sandbox_refunds WHERE refund_id = ANY($1)`, pqArray(refunds)); got != n {
		t.Errorf("sandbox_refunds: got %d, want %d (each refund executed once)", got, n)
	}
	if got := count(`SELECT count(*) FROM ledger_entries WHERE merchant_id = $1 AND type = 'refund'`, merchant); got != n {
		t.Errorf("refund ledger entries: got %d, want %d", got, n)
	}
	// Every sale that was refunded paid once: the refunds' sessions.
	if got := count(`SELECT count(*) FROM payment_intents WHERE merchant_id = $1 AND status = 'succeeded'`, merchant); got != n {
		t.Errorf("succeeded payments: got %d, want %d (one per refunded sale)", got, n)
	}
	for typ, want := range map[string]int{"checkout.session.completed": n, "payment_intent.succeeded": n, "charge.refunded": n} {
		if got := count(`SELECT count(*) FROM events WHERE merchant_id = $1 AND type = $2`, merchant, typ); got != want {
			t.Errorf("%s events: got %d, want %d", typ, got, want)
		}
	}
	events := count(`SELECT count(*) FROM events WHERE merchant_id = $1`, merchant)
	if events != 3*n {
		t.Errorf("events: got %d, want %d (three per refunded sale)", events, 3*n)
	}
	if got := count(`SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1`, merchant); got != events {
		t.Errorf("deliveries: got %d, want one per event (%d)", got, events)
	}
	if got := count(`SELECT count(DISTINCT event_id) FROM webhook_deliveries WHERE merchant_id = $1 AND status = 'succeeded'`, merchant); got != events {
		t.Errorf("events with a succeeded delivery: got %d, want %d", got, events)
	}
	if got := count(`SELECT count(*) FROM webhook_attempts WHERE merchant_id = $1 AND http_status = 200`, merchant); got != events {
		t.Errorf("successful attempts recorded: got %d, want one per event (%d)", got, events)
	}
	var ids []string
	got := rc.eventIDs()
	missing := 0
	var all []string
	if err := testenv.DB(t).Select(&all, `SELECT id FROM events WHERE merchant_id = $1`, merchant); err != nil {
		t.Fatal(err)
	}
	for _, id := range all {
		if got[id] == 0 {
			missing++
			ids = append(ids, id)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events never reached the receiver: %v", missing, len(all), ids)
	}
	twice := 0
	for _, c := range got {
		if c > 1 {
			twice++
		}
	}
	t.Logf("%d refunds, %d events, each delivered and recorded once; the receiver saw %d of them more than once (at least once, by webhook-id)", n, events, twice)
}

// pqArray is ids as a PostgreSQL text array literal.
func pqArray(ids []string) string { return "{" + strings.Join(ids, ",") + "}" }

// apiClient calls the API with a key and keeps every call's time, outcome
// and latency.
type apiClient struct {
	t    *testing.T
	base string
	key  string
	mu   sync.Mutex
	log  []apiCall
}

type apiCall struct {
	at     time.Time
	took   time.Duration
	status int // 0: no answer
	what   string
}

var httpClient = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// do sends a JSON request and returns the status and body (0 on no answer).
func (a *apiClient) do(method, path string, body any, idem string) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, a.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+a.key)
	req.Header.Set("Content-Type", "application/json")
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	return a.send(req, method+" "+strings.SplitN(path, "?", 2)[0])
}

func (a *apiClient) send(req *http.Request, what string) (int, []byte) {
	start := time.Now()
	res, err := httpClient.Do(req)
	call := apiCall{at: start, took: time.Since(start), what: what}
	var b []byte
	if err == nil {
		b, _ = io.ReadAll(res.Body)
		res.Body.Close()
		call.status = res.StatusCode
		call.took = time.Since(start)
	} else {
		b = []byte(err.Error())
	}
	a.mu.Lock()
	a.log = append(a.log, call)
	a.mu.Unlock()
	return call.status, b
}

// ok is do for a 2xx answer's data; any other answer fails the test.
func (a *apiClient) ok(method, path string, body any, idem string) (map[string]any, bool) {
	code, b := a.do(method, path, body, idem)
	if code/100 != 2 {
		a.t.Errorf("%s %s: got %d %s, want 2xx", method, path, code, b)
		return nil, false
	}
	var v struct {
		Data json.RawMessage `json:"data"`
	}
	var m map[string]any
	if json.Unmarshal(b, &v) != nil || json.Unmarshal(v.Data, &m) != nil {
		return nil, method == http.MethodGet // a list's data is an array
	}
	return m, true
}

// pay posts the hosted checkout form with a card that succeeds.
func (a *apiClient) pay(pageURL string) bool {
	form := url.Values{"email": {"ada@example.com"}, "name": {"Ada"}, "card_number": {"4242424242424242"},
		"exp_month": {"12"}, "exp_year": {strconv.Itoa(time.Now().Year() + 3)}, "cvc": {"123"}}
	req, _ := http.NewRequest(http.MethodPost, pageURL, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, b := a.send(req, "POST /checkout")
	if code/100 != 2 && code/100 != 3 {
		a.t.Errorf("POST %s: got %d %.300s, want the payment made", pageURL, code, b)
		return false
	}
	return true
}

// metric reads a counter from the process's admin /metrics.
func (a *apiClient) metric(admin, name string) float64 {
	_, body := httpGet(a.t, "http://"+admin+"/metrics")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		a.t.Fatalf("GET /metrics: no %s", name)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// report logs the calls' error rate and p99 before, during (kill to
// promotion, plus a second) and after the failover, and fails the test on
// a call that took over 3 s.
func (a *apiClient) report(killed, promoted time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	phases := []struct {
		name     string
		from, to time.Time
	}{
		{"before", time.Time{}, killed},
		{"failover", killed, promoted.Add(time.Second)},
		{"after", promoted.Add(time.Second), time.Now()},
	}
	for _, p := range phases {
		var took []time.Duration
		errs := 0
		for _, c := range a.log {
			if c.at.Before(p.from) || !c.at.Before(p.to) {
				continue
			}
			took = append(took, c.took)
			if c.status/100 != 2 && c.status/100 != 3 {
				errs++
			}
		}
		if len(took) == 0 {
			continue
		}
		slices.Sort(took)
		a.t.Logf("%-8s %4d calls, %d errors, p50 %v, p99 %v, max %v", p.name, len(took), errs,
			took[len(took)/2].Round(time.Millisecond), took[len(took)*99/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
		// The limiter's 150 ms and the enqueue's 300 ms bound what Redis adds.
		if slowest := took[len(took)-1]; slowest > 3*time.Second {
			a.t.Errorf("%s the failover: the slowest call took %v, want every answer within 3 s", p.name, slowest)
		}
	}
}

// hookReceiver is an HTTPS webhook receiver counting requests by webhook-id.
type hookReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	ids map[string]int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	rc := &hookReceiver{ids: map[string]int{}}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		rc.ids[r.Header.Get(webhook.StandardIDHeader)]++
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// eventIDs counts the requests by webhook-id (the event's id).
func (rc *hookReceiver) eventIDs() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.ids)
}
