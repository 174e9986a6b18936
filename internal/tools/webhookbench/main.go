// Command webhookbench measures webhook delivery through the real service:
// it runs HTTPS receivers in-process, registers them as endpoints through the
// API, creates payments through the API and the sandbox's confirm endpoint
// (each success is one event, fanned out to every receiver), and reports
//
//   - throughput: deliveries per second while -events events drain, and
//   - latency: event-to-receipt p50/p99 at a steady -rate events per second,
//     counted from each confirm's scheduled send time.
//
// The API and a worker must run with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true and
// (worker) WEBHOOK_TLS_INSECURE=true. Loopback only.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

type intent struct {
	ID, Secret, PK string
}

type receipts struct {
	mu   sync.Mutex
	at   map[string][]time.Time // payment id → receipt times (one per endpoint)
	n    atomic.Int64
	want atomic.Int64
	done chan struct{}
}

func (r *receipts) record(pi string, t time.Time) {
	r.mu.Lock()
	r.at[pi] = append(r.at[pi], t)
	r.mu.Unlock()
	if r.n.Add(1) == r.want.Load() {
		close(r.done)
	}
}

func main() {
	api := flag.String("api", "http://127.0.0.1:18080", "API base URL (loopback)")
	key := flag.String("key", os.Getenv("BENCH_KEY"), "test-mode API key")
	nRecv := flag.Int("receivers", 5, "receivers (one endpoint each)")
	events := flag.Int("events", 10000, "events for the throughput run")
	rate := flag.Float64("rate", 200, "events per second for the latency run")
	dur := flag.Duration("duration", 15*time.Second, "latency run length")
	conns := flag.Int("conns", 32, "concurrent API clients")
	asJSON := flag.Bool("json", false, "print results as one JSON line")
	flag.Parse()
	if u, err := url.Parse(*api); err != nil || !loopback(u.Hostname()) {
		fail("-api must be a loopback URL")
	}
	if *key == "" {
		fail("-key (or BENCH_KEY) is required")
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *conns * 2}}

	rec := &receipts{at: map[string][]time.Time{}, done: make(chan struct{})}
	for i := 0; i < *nRecv; i++ {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := time.Now()
			var ev struct {
				Data struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			body, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(body, &ev)
			w.WriteHeader(http.StatusNoContent)
			rec.record(ev.Data.ID, now)
		}))
		defer srv.Close()
		var out struct{ Data struct{ ID string } }
		call(hc, *api, *key, "POST", "/v1/webhook-endpoints", map[string]any{"url": srv.URL + "/hook", "events": []string{"payment_intent.succeeded"}}, &out)
		defer call(hc, *api, *key, "DELETE", "/v1/webhook-endpoints/"+out.Data.ID, nil, nil)
	}

	// Throughput: confirm -events payments as fast as the API takes them.
	pis := createIntents(hc, *api, *key, *events, *conns)
	rec.want.Store(int64(*events * *nRecv))
	start := time.Now()
	parallel(len(pis), *conns, func(i int) { confirm(hc, *api, pis[i]) })
	confirmed := time.Since(start)
	select {
	case <-rec.done:
	case <-time.After(5 * time.Minute):
		fail(fmt.Sprintf("only %d of %d deliveries arrived in 5 minutes", rec.n.Load(), rec.want.Load()))
	}
	elapsed := time.Since(start)
	throughput := float64(rec.want.Load()) / elapsed.Seconds()

	// Latency: a steady rate, counted from each confirm's scheduled time.
	nLat := int(*rate * dur.Seconds())
	lpis := createIntents(hc, *api, *key, nLat, *conns)
	rec.mu.Lock()
	rec.at = map[string][]time.Time{}
	rec.mu.Unlock()
	rec.n.Store(0)
	rec.want.Store(int64(nLat * *nRecv))
	rec.done = make(chan struct{})
	sched := make(map[string]time.Time, nLat)
	interval := time.Duration(float64(time.Second) / *rate)
	t0 := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for i, pi := range lpis {
		at := t0.Add(time.Duration(i) * interval)
		sched[pi.ID] = at
		time.Sleep(time.Until(at))
		wg.Add(1)
		go func() { defer wg.Done(); confirm(hc, *api, pi) }()
	}
	wg.Wait()
	select {
	case <-rec.done:
	case <-time.After(2 * time.Minute):
		fail(fmt.Sprintf("latency run: only %d of %d deliveries arrived", rec.n.Load(), rec.want.Load()))
	}
	var lat []float64
	rec.mu.Lock()
	for id, ts := range rec.at {
		for _, t := range ts {
			lat = append(lat, float64(t.Sub(sched[id]).Microseconds())/1000)
		}
	}
	rec.mu.Unlock()
	slices.Sort(lat)
	p := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }

	res := map[string]any{
		"events": *events, "receivers": *nRecv, "deliveries": *events * *nRecv,
		"confirm_s": confirmed.Seconds(), "drain_s": elapsed.Seconds(), "deliveries_per_s": throughput,
		"rate": *rate, "latency_events": nLat, "p50_ms": p(0.50), "p99_ms": p(0.99), "max_ms": lat[len(lat)-1],
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("throughput: %d events × %d receivers = %d deliveries in %.1fs (confirms took %.1fs): %.0f deliveries/s\n",
		*events, *nRecv, *events**nRecv, elapsed.Seconds(), confirmed.Seconds(), throughput)
	fmt.Printf("latency at %.0f events/s for %s: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", *rate, *dur, p(0.5), p(0.99), lat[len(lat)-1])
}

func createIntents(hc *http.Client, api, key string, n, conns int) []intent {
	out := make([]intent, n)
	parallel(n, conns, func(i int) {
		var r struct {
			Data struct {
				ID     string `json:"payment_intent_id"`
				Secret string `json:"client_secret"`
				PK     string `json:"publishable_key"`
			}
		}
		call(hc, api, key, "POST", "/v1/payment-intents", map[string]any{"amount": 1000 + i%1000, "currency": "usd"}, &r)
		out[i] = intent{ID: r.Data.ID, Secret: r.Data.Secret, PK: r.Data.PK}
	})
	return out
}

func confirm(hc *http.Client, api string, pi intent) {
	b, _ := json.Marshal(map[string]string{"publishable_key": pi.PK, "client_secret": pi.Secret, "card_number": "4242424242424242"})
	resp, err := hc.Post(api+"/sandbox/v1/payment_intents/"+pi.ID+"/confirm", "application/json", bytes.NewReader(b))
	if err != nil {
		fail(err.Error())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Sprintf("confirm %s: %d", pi.ID, resp.StatusCode))
	}
}

func call(hc *http.Client, api, key, method, path string, body, out any) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, api+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		fail(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, b))
	}
	if out != nil {
		_ = json.Unmarshal(b, out)
	}
}

func parallel(n, conns int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "webhookbench:", msg)
	os.Exit(1)
}
