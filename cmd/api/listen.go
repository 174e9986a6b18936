package main

// api listen: webhooks on a laptop. A client of the public Events API only
// (any merchant can run it against the service): it polls GET /v1/events
// with the merchant's key, and forwards each new event to a local URL,
// signed exactly like a real delivery (webhook.SignHeaders) with a secret
// of its own that it prints at start. So a developer builds a receiver
// without a public https URL or the private-network settings.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/webhook"
)

// Polling. The key's limit is 1,000 requests an hour, shared with whatever
// else uses the key: one poll every 5 s is 720 an hour, leaving the rest.
const (
	defaultPollInterval = 5 * time.Second
	minPollInterval     = 100 * time.Millisecond // tests; below it a key's hour runs out in minutes
	// listenLookback: each poll asks again for the last seconds, so that an
	// event whose transaction committed after a newer one (created earlier,
	// listed later) is not missed; ids already forwarded are skipped.
	listenLookback = 10 * time.Second
	maxBackoff     = time.Minute
	pageLimit      = 100
)

// listenState is what `api listen` keeps between runs, one file per key in
// the state directory, named by a hash of the key (never the key itself):
// the signing secret it prints, and where it stopped.
type listenState struct {
	Secret string `json:"secret"`
	// Cursor is the created time (Unix seconds) of the newest event seen;
	// Seen the ids seen since Cursor minus the lookback.
	Cursor  int64            `json:"cursor"`
	Seen    map[string]int64 `json:"seen"` // id → created
	Started bool             `json:"started"`
}

type listenEvent struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Created int64  `json:"created"`
	raw     []byte // the event as the API returned it: forwarded and signed as is
}

type listener struct {
	key, api, forwardTo string
	types               []string // exact types, or prefixes ending in "*"; empty: all
	interval            time.Duration
	statePath           string
	state               listenState
	client              *http.Client
	out                 io.Writer
}

func listen(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, never echoed with the flag values
	key := fs.String("key", "", "API key (svc_test_… or svc_live_…)")
	forwardTo := fs.String("forward-to", "", "local URL to POST events to, e.g. http://localhost:3000/hooks")
	events := fs.String("events", "", "comma-separated event types to forward (charge.refunded, charge.*); default all")
	api := fs.String("api", "", "base URL of the API (default PUBLIC_BASE_URL, else http://localhost:8080)")
	interval := fs.Duration("interval", defaultPollInterval, "time between polls")
	stateDir := fs.String("state-dir", "", "where to keep the state (default the user config dir, paysvc/listen)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -h, --help: the flags, on stdout
			printUsage(stdout, "listen")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return err
		}
		msg := err.Error()
		if *key != "" {
			msg = strings.ReplaceAll(msg, *key, "…") // never echo the key
		}
		return errors.New("listen: " + msg)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("listen: unexpected arguments: %d", fs.NArg())
	}
	if !strings.HasPrefix(*key, "svc_test_") && !strings.HasPrefix(*key, "svc_live_") {
		return errors.New("listen: --key must be an API key (svc_test_… or svc_live_…)")
	}
	if u, err := url.Parse(*forwardTo); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("listen: --forward-to must be an http:// or https:// URL")
	}
	if *interval < minPollInterval {
		return fmt.Errorf("listen: --interval must be at least %v", minPollInterval)
	}
	l := &listener{key: *key, forwardTo: *forwardTo, interval: *interval, out: stdout,
		client: &http.Client{Timeout: webhook.Timeout}}
	l.api = strings.TrimRight(*api, "/")
	if l.api == "" {
		l.api = strings.TrimRight(os.Getenv("PUBLIC_BASE_URL"), "/")
	}
	if l.api == "" {
		l.api = "http://localhost:8080"
	}
	if *events != "" {
		for _, t := range strings.Split(*events, ",") {
			t = strings.TrimSpace(t)
			if _, err := payments.ParseEventType(t); err != nil {
				return fmt.Errorf("listen: --events: %q is not an event type or a prefix such as charge.*", t)
			}
			l.types = append(l.types, t)
		}
	}
	dir := *stateDir
	if dir == "" {
		base, err := os.UserConfigDir()
		if err != nil {
			return fmt.Errorf("listen: no state directory (set --state-dir): %w", err)
		}
		dir = filepath.Join(base, "paysvc", "listen")
	}
	sum := sha256.Sum256([]byte(*key))
	l.statePath = filepath.Join(dir, hex.EncodeToString(sum[:8])+".json")
	return l.run(ctx)
}

func (l *listener) run(ctx context.Context) error {
	if err := l.load(); err != nil {
		return err
	}
	if !l.state.Started {
		// The first run starts from now, as Stripe's CLI does: the newest
		// existing event is the cursor, nothing older is forwarded.
		evs, _, err := l.page(ctx, 0, "", 1)
		for errors.Is(err, errRateLimited) && ctx.Err() == nil {
			l.wait(ctx, l.backoffOf(err))
			evs, _, err = l.page(ctx, 0, "", 1)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		l.state.Seen = map[string]int64{}
		for _, e := range evs {
			l.state.Cursor = e.Created
			l.state.Seen[e.ID] = e.Created
		}
		l.state.Started = true
		if err := l.save(); err != nil {
			return err
		}
	}
	fmt.Fprintf(l.out, "Ready! Forwarding the events of %s to %s (polling %s every %v; Ctrl-C to stop)\n",
		keyHint(l.key), l.forwardTo, l.api, l.interval)
	fmt.Fprintf(l.out, "Your webhook signing secret is %s (verify deliveries with it; kept in %s)\n", l.state.Secret, l.statePath)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		err := l.poll(ctx)
		switch {
		case ctx.Err() != nil:
		case err == nil:
			backoff = 0
			l.wait(ctx, l.interval)
		default:
			backoff = l.nextBackoff(backoff, err)
			fmt.Fprintf(l.out, "%s  %v; retrying in %v\n", time.Now().Format(time.DateTime), err, backoff.Round(time.Second))
			l.wait(ctx, backoff)
		}
	}
	fmt.Fprintln(l.out, "Stopped.")
	return nil
}

// poll fetches the events since the cursor (less the lookback), newest
// first, page by page, and forwards the new ones oldest first, saving the
// state after each so that a restart resumes after the last one forwarded.
func (l *listener) poll(ctx context.Context) error {
	since := max(l.state.Cursor-int64(listenLookback/time.Second), 0)
	var fresh []listenEvent
	after := ""
	for {
		evs, more, err := l.page(ctx, since, after, pageLimit)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if _, seen := l.state.Seen[e.ID]; !seen {
				fresh = append(fresh, e)
			}
		}
		if !more || len(evs) == 0 {
			break
		}
		after = evs[len(evs)-1].ID
	}
	slices.Reverse(fresh)
	for _, e := range fresh {
		if ctx.Err() != nil {
			return nil // not marked: forwarded again on the next run
		}
		if l.wanted(e.Type) {
			l.forward(ctx, e)
		}
		l.state.Seen[e.ID] = e.Created
		l.state.Cursor = max(l.state.Cursor, e.Created)
		if err := l.save(); err != nil {
			return err
		}
	}
	return nil
}

func (l *listener) wanted(typ string) bool {
	if len(l.types) == 0 {
		return true
	}
	for _, t := range l.types {
		if p, ok := strings.CutSuffix(t, "*"); ok && strings.HasPrefix(typ, p) || t == typ {
			return true
		}
	}
	return false
}

var errRateLimited = errors.New("rate limited by the API")

// rateLimited carries the API's Retry-After.
type rateLimited struct{ after time.Duration }

func (e rateLimited) Error() string {
	return fmt.Sprintf("%v (Retry-After %v)", errRateLimited, e.after)
}
func (e rateLimited) Unwrap() error { return errRateLimited }

// page is one GET /v1/events: created[gte] since (0: no bound), after the
// starting_after id, at most limit events.
func (l *listener) page(ctx context.Context, since int64, after string, limit int) ([]listenEvent, bool, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if since > 0 {
		q.Set("created[gte]", strconv.FormatInt(since, 10))
	}
	if after != "" {
		q.Set("starting_after", after)
	}
	if len(l.types) == 1 { // one filter: let the API apply it
		q.Set("type", l.types[0])
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.api+"/v1/events?"+q.Encode(), nil)
	if err != nil {
		return nil, false, fmt.Errorf("build request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+l.key)
	req.Header.Set("User-Agent", "paysvc-listen/1")
	resp, err := l.client.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("GET /v1/events: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, false, fmt.Errorf("GET /v1/events: %v", err)
	}
	var env struct {
		Data struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		} `json:"data"`
		Error *struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &env)
	if resp.StatusCode == http.StatusTooManyRequests {
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return nil, false, rateLimited{after: time.Duration(max(ra, 1)) * time.Second}
	}
	if resp.StatusCode != http.StatusOK {
		if env.Error != nil {
			if resp.StatusCode == http.StatusUnauthorized {
				return nil, false, fmt.Errorf("the API refused the key: %s", env.Error.Code)
			}
			return nil, false, fmt.Errorf("GET /v1/events: %d %s: %s", resp.StatusCode, env.Error.Code, env.Error.Message)
		}
		return nil, false, fmt.Errorf("GET /v1/events: %d", resp.StatusCode)
	}
	out := make([]listenEvent, 0, len(env.Data.Data))
	for _, raw := range env.Data.Data {
		var e listenEvent
		if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
			return nil, false, fmt.Errorf("GET /v1/events: an event that does not decode")
		}
		e.raw = raw
		out = append(out, e)
	}
	return out, env.Data.HasMore, nil
}

// forward POSTs the event to the local URL, signed like a real delivery,
// and prints one line. A failure is printed and not retried: the receiver
// is on the developer's desk, and resend exists. A forward that has started
// runs to its answer (or the delivery timeout) even after Ctrl-C, which
// poll checks between events: the receiver may already be acting on it, so
// cutting it off would only print an error for an event that arrived.
func (l *listener) forward(ctx context.Context, e listenEvent) {
	start := time.Now()
	line := fmt.Sprintf("%s  %-40s %s  -> ", start.Format(time.DateTime), e.Type, e.ID)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webhook.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.forwardTo, bytes.NewReader(e.raw))
	if err != nil {
		fmt.Fprintf(l.out, "%serror: %v\n", line, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paysvc-listen/1")
	webhook.SignHeaders(req.Header, []string{l.state.Secret}, e.ID, e.Type, start, e.raw)
	resp, err := l.client.Do(req)
	if err != nil {
		fmt.Fprintf(l.out, "%serror: %v\n", line, err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	fmt.Fprintf(l.out, "%s%d (%d ms)\n", line, resp.StatusCode, time.Since(start).Milliseconds())
}

// backoffOf is the wait an error asks for: the API's Retry-After on 429.
func (l *listener) backoffOf(err error) time.Duration {
	var rl rateLimited
	if errors.As(err, &rl) {
		return max(rl.after, l.interval)
	}
	return l.interval
}

// nextBackoff doubles the wait after each failed poll up to a minute; a
// 429 waits at least its Retry-After.
func (l *listener) nextBackoff(prev time.Duration, err error) time.Duration {
	d := min(max(2*prev, l.interval), maxBackoff)
	return max(d, l.backoffOf(err))
}

func (l *listener) wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (l *listener) load() error {
	b, err := os.ReadFile(l.statePath)
	if errors.Is(err, os.ErrNotExist) {
		l.state = listenState{Secret: newListenSecret(), Seen: map[string]int64{}}
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen: read state: %w", err)
	}
	if err := json.Unmarshal(b, &l.state); err != nil || !strings.HasPrefix(l.state.Secret, "whsec_") {
		return fmt.Errorf("listen: state file %s is damaged; delete it to start afresh", l.statePath)
	}
	if l.state.Seen == nil {
		l.state.Seen = map[string]int64{}
	}
	return nil
}

// save writes the state atomically (a temporary file renamed over it),
// readable by the user only: it holds the signing secret. Ids older than
// the lookback are dropped first.
func (l *listener) save() error {
	for id, c := range l.state.Seen {
		if c < l.state.Cursor-int64(listenLookback/time.Second) {
			delete(l.state.Seen, id)
		}
	}
	b, err := json.Marshal(l.state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.statePath), 0o700); err != nil {
		return fmt.Errorf("listen: state directory: %w", err)
	}
	tmp := l.statePath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("listen: write state: %w", err)
	}
	if err := os.Rename(tmp, l.statePath); err != nil {
		return fmt.Errorf("listen: write state: %w", err)
	}
	return nil
}

// newListenSecret is a secret of the form endpoints get (whsec_ and the
// base64 of 32 random bytes), so receivers verify forwarded events with the
// same code and libraries as real deliveries.
func newListenSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// keyHint names a key without revealing it: its mode prefix and last four.
func keyHint(key string) string {
	prefix := "svc_test_"
	if strings.HasPrefix(key, "svc_live_") {
		prefix = "svc_live_"
	}
	if len(key) < len(prefix)+4 {
		return prefix + "…"
	}
	return prefix + "…" + key[len(key)-4:]
}
