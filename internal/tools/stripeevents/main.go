// Command stripeevents measures inbound Stripe events accepted per second
// (`make bench`, group stripe): it signs -events distinct Stripe events the
// way Stripe signs them (Stripe-Signature: t=…,v1=HMAC-SHA256 of
// "t.payload" under -secret) before the clock starts, then posts them to
// -url (POST /stripe/webhook of an API with PROCESSOR=stripe) over -conns
// keep-alive connections as fast as they are answered. Each event is a
// payment_intent.succeeded of connected account -account naming a payment
// of ours by metadata, which the API verifies, translates and stores in its
// inbox with the job that applies it, then answers 200. It prints one JSON
// line: events, seconds, events per second, p50/p99 of each POST, errors.
//
// Only loopback targets are accepted.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"
)

func main() {
	target := flag.String("url", "", "POST /stripe/webhook URL of the API under test (loopback only)")
	secret := flag.String("secret", "", "the endpoint's signing secret (STRIPE_WEBHOOK_SECRET)")
	account := flag.String("account", "", "the connected account the events are of (acct_…, recorded for a merchant)")
	n := flag.Int("events", 5000, "events to send")
	conns := flag.Int("conns", 32, "concurrent connections")
	flag.Parse()
	if err := run(*target, *secret, *account, *n, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "stripeevents:", err)
		os.Exit(1)
	}
}

func run(target, secret, account string, n, conns int) error {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-url %q: not an absolute URL", target)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("-url %q: only loopback targets are accepted", target)
	}
	if secret == "" || account == "" || n < 1 || conns < 1 {
		return fmt.Errorf("-secret, -account, -events ≥ 1 and -conns ≥ 1 are required")
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	payloads, sigs := make([][]byte, n), make([]string, n)
	now := time.Now()
	for i := range payloads {
		payloads[i], _ = json.Marshal(map[string]any{
			"id": "evt_bench_" + run + "_" + strconv.Itoa(i), "object": "event", "api_version": "2023-10-16",
			"created": now.Unix(), "livemode": false, "account": account, "type": "payment_intent.succeeded", "pending_webhooks": 1,
			"data": map[string]any{"object": map[string]any{"id": "pi_stripe_bench_" + strconv.Itoa(i), "object": "payment_intent",
				"status": "succeeded", "metadata": map[string]string{"paysvc_payment_intent": "pi_bench_" + run + "_" + strconv.Itoa(i)}}},
		})
		sigs[i] = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payloads[i], Secret: secret, Timestamp: now}).Header
	}
	client := &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	var next, errs atomic.Int64
	lat := make([][]time.Duration, conns)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodPost, target, bytes.NewReader(payloads[i]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Stripe-Signature", sigs[i])
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode/100 != 2 {
					errs.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	ms := func(q float64) float64 { return float64(all[int(q*float64(len(all)-1))].Microseconds()) / 1000 }
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"scenario": "inbound Stripe events (POST /stripe/webhook)", "events": n, "conns": conns, "seconds": elapsed,
		"events_per_s": float64(n-int(errs.Load())) / elapsed, "p50_ms": ms(0.5), "p99_ms": ms(0.99), "errors": errs.Load(),
	})
}
