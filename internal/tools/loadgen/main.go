// Command loadgen is the HTTP load generator behind `make bench`.
//
// It has two models:
//
//   - closed (-rate 0): -conns workers each send a request, wait for the
//     answer and send the next, as fast as they can. It reports throughput.
//   - open (-rate R): requests are scheduled at a constant arrival rate of R
//     per second, independent of completions. A bounded pool of -conns workers
//     (one keep-alive connection each) takes the scheduled slots in order;
//     latency is measured from a request's scheduled send time, not from the
//     moment a worker got to it, so a stalled server shows up in the
//     percentiles instead of silently lowering the rate (no coordinated
//     omission). Requests sent more than -late after their slot are counted
//     as late; slots never sent before the run ended are counted as missed
//     and enter the percentiles with the time they had waited (a lower bound).
//
// Latencies go into a log-linear histogram (under 0.8% relative error,
// a few KiB per worker), so memory stays bounded however long the run.
//
// Only loopback targets are accepted: the host must be localhost, in
// 127.0.0.0/8 or ::1, every dialled address is checked again, and redirects
// are not followed.
//
// Placeholders: {id} (in -url and -body) is replaced per request by a random
// line of the -ids file (the same one in both); a line may hold a second,
// tab-separated field, {key} (in -H values) of the same line, so that
// `-H 'Authorization: Bearer {key}'` spreads the load over the merchants
// whose keys and ids the file pairs; {n} (in -url, -body and -H values) by a per-request counter
// unique within the process; {run} by a random token fixed for the process,
// so that `-H 'Idempotency-Key: bench-{run}-{n}'` never repeats across runs.
//
// Example:
//
//	loadgen -url 'http://127.0.0.1:18080/v1/products/{id}' -ids ids.txt \
//	    -H "Authorization: Bearer $KEY" -conns 32 -duration 15s -json
//	loadgen -method POST -url http://127.0.0.1:18080/v1/products \
//	    -body '{"name":"p {n}"}' -rate 1000 -conns 128 -duration 15s
//
// -idle N opens N more keep-alive connections before the run, each sending
// one request (the same template) and then holding its connection idle until
// the end, so the server keeps N idle connections while the load runs.
//
// -client picks the HTTP client: fasthttp (the default) or nethttp. Both
// keep one keep-alive connection per worker, count the same outcomes and
// follow no redirects; fasthttp costs the generator about a third of
// net/http's CPU per request, CPU that on a shared machine goes back to the
// server measured (pgbench's C client is as cheap). nethttp is kept to
// compare the two.
//
// -timeline FILE writes the measured window second by second (by each
// request's scheduled time in the open model, its send time in the closed
// one): one CSV line per second with its Unix time, requests, requests
// over 10 ms and the slowest, so that a stall can be set beside what else
// happened then (a checkpoint in PostgreSQL's log, a GC cycle).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/bits"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

const (
	maxDuration = time.Hour
	maxRate     = 1_000_000
	maxConns    = 10_000
	maxIDs      = 10_000_000
	maxIdle     = 100_000
)

type headerList []string

func (h *headerList) String() string { return strings.Join(*h, ", ") }

func (h *headerList) Set(v string) error {
	name, _, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q: want 'Name: value'", v)
	}
	*h = append(*h, v)
	return nil
}

type config struct {
	url      string
	method   string
	body     string
	headers  headerList
	idsFile  string
	conns    int
	duration time.Duration
	rate     float64
	warmup   time.Duration
	timeout  time.Duration
	late     time.Duration
	maxReqs  int64
	name     string
	json     bool
	timeline string
	idle     int
	client   string
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "", "target URL (loopback only); {id} is replaced by a random line of -ids (also in -body)")
	flag.StringVar(&c.method, "method", "GET", "HTTP method")
	flag.StringVar(&c.body, "body", "", "request body template; {n} is a per-request unique counter, {run} a per-process token")
	flag.Var(&c.headers, "H", "request header 'Name: value' (repeatable; {n} and {run} are replaced)")
	flag.StringVar(&c.idsFile, "ids", "", "file of ids, one per line, substituted for {id}; an optional second tab-separated field for {key}")
	flag.IntVar(&c.idle, "idle", 0, "keep-alive connections opened (one request each) and held idle through the run")
	flag.IntVar(&c.conns, "conns", 32, "connections: closed model workers, or the open model's in-flight pool")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "measured duration")
	flag.Float64Var(&c.rate, "rate", 0, "0: closed model; >0: open model at this many requests per second")
	flag.DurationVar(&c.warmup, "warmup", 0, "unmeasured run before the measured one, same model")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Second, "per-request timeout (counted as an error)")
	flag.DurationVar(&c.late, "late", time.Millisecond, "open model: a request sent this long after its slot counts as late")
	flag.Int64Var(&c.maxReqs, "n", 0, "stop after this many measured requests (0: only -duration bounds the run)")
	flag.StringVar(&c.name, "name", "", "label for the results")
	flag.BoolVar(&c.json, "json", false, "print one JSON line of results on stdout")
	flag.StringVar(&c.client, "client", "fasthttp", "HTTP client: fasthttp (cheap on CPU) or nethttp (net/http's)")
	flag.StringVar(&c.timeline, "timeline", "", "write the measured window per second (CSV: unix_s,requests,over_10ms,max_ms) to this file")
	flag.Parse()

	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}

func (c *config) validate() error {
	if c.url == "" {
		return errors.New("-url is required")
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", flag.Args())
	}
	probe := strings.NewReplacer("{id}", "x", "{n}", "0", "{run}", "x").Replace(c.url)
	u, err := url.Parse(probe)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("-url: scheme %q, want http or https", u.Scheme)
	}
	if !loopbackHost(u.Hostname()) {
		return fmt.Errorf("-url: host %q is not loopback (localhost, 127.0.0.0/8, ::1): refusing", u.Hostname())
	}
	if (strings.Contains(c.url, "{id}") || strings.Contains(c.body, "{id}")) && c.idsFile == "" {
		return errors.New("-url or -body contains {id}: -ids is required")
	}
	if strings.Contains(c.headers.String(), "{key}") && c.idsFile == "" {
		return errors.New("-H contains {key}: -ids is required (its lines' second field)")
	}
	if c.idle < 0 || c.idle > maxIdle {
		return fmt.Errorf("-idle %d: want 0..%d", c.idle, maxIdle)
	}
	c.method = strings.ToUpper(c.method)
	switch {
	case c.conns < 1 || c.conns > maxConns:
		return fmt.Errorf("-conns %d: want 1..%d", c.conns, maxConns)
	case c.duration <= 0 || c.duration > maxDuration:
		return fmt.Errorf("-duration %s: want >0 and <= %s", c.duration, maxDuration)
	case c.warmup < 0 || c.warmup > maxDuration:
		return fmt.Errorf("-warmup %s: want 0..%s", c.warmup, maxDuration)
	case c.rate < 0 || c.rate > maxRate || math.IsNaN(c.rate):
		return fmt.Errorf("-rate %g: want 0..%d", c.rate, maxRate)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %s: want > 0", c.timeout)
	case c.maxReqs < 0:
		return fmt.Errorf("-n %d: want >= 0", c.maxReqs)
	case c.client != "fasthttp" && c.client != "nethttp":
		return fmt.Errorf("-client %q: want fasthttp or nethttp", c.client)
	}
	return nil
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func run(c config) error {
	if err := c.validate(); err != nil {
		return err
	}
	var ids []idLine
	if c.idsFile != "" {
		var err error
		if ids, err = readIDs(c.idsFile); err != nil {
			return err
		}
	}
	tok := make([]byte, 6)
	if _, err := rand.Read(tok); err != nil {
		return err
	}
	g := &generator{cfg: c, ids: ids, run: hex.EncodeToString(tok)}
	g.prepare()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	idle := 0
	if c.idle > 0 {
		conns, failed := g.openIdle(ctx, c.idle)
		defer func() {
			for _, conn := range conns {
				conn.Close()
			}
		}()
		idle = len(conns)
		logf(c, "idle connections open: %d (failed: %d)", idle, failed)
	}

	if c.warmup > 0 {
		logf(c, "warmup %s", c.warmup)
		g.phase(ctx, c.warmup, 0, false)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	logf(c, "measuring %s", c.duration)
	res := g.phase(ctx, c.duration, c.maxReqs, c.timeline != "")
	res.Idle = idle
	res.print(c)
	if c.timeline != "" {
		if err := res.timeline.write(c.timeline); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted: partial results")
	}
	return nil
}

func logf(c config, format string, args ...any) {
	label := c.name
	if label == "" {
		label = c.method + " " + c.url
	}
	fmt.Fprintf(os.Stderr, "loadgen [%s]: %s\n", label, fmt.Sprintf(format, args...))
}

// idLine is one line of -ids: {id} (path-escaped) and {key}.
type idLine struct{ id, key string }

func readIDs(path string) ([]idLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-ids: %w", err)
	}
	defer f.Close()
	var ids []idLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			if len(ids) == maxIDs {
				return nil, fmt.Errorf("-ids: more than %d lines", maxIDs)
			}
			id, key, _ := strings.Cut(s, "\t")
			ids = append(ids, idLine{id: url.PathEscape(strings.TrimSpace(id)), key: strings.TrimSpace(key)})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-ids: %w", err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("-ids: %s holds no ids", path)
	}
	return ids, nil
}

// dialLoopback dials addr over TCP and refuses the connection unless its
// peer is a loopback address: the URL's host was checked, and this checks
// again at connect time, so a name that resolves elsewhere is refused too.
func dialLoopback(ctx context.Context, dialer *net.Dialer, addr string) (net.Conn, error) {
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if ta, ok := conn.RemoteAddr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		conn.Close()
		return nil, fmt.Errorf("refusing non-loopback address %s", conn.RemoteAddr())
	}
	return conn, nil
}

func newClient(c config) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialLoopback(ctx, dialer, addr)
		},
		MaxIdleConns:          c.conns,
		MaxIdleConnsPerHost:   c.conns,
		MaxConnsPerHost:       c.conns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ResponseHeaderTimeout: c.timeout,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        16 << 10,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       c.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type generator struct {
	cfg    config
	ids    []idLine
	run    string
	client *http.Client         // -client nethttp
	fast   *fasthttp.HostClient // -client fasthttp
	seq    atomic.Int64         // {n}

	header     http.Header
	dynHeaders [][2]string // headers whose value holds {n} or {key}
	urlHasN    bool
	bodyHasN   bool
	bodyHasID  bool
	staticBody []byte
}

func (g *generator) prepare() {
	c := g.cfg
	r := strings.NewReplacer("{run}", g.run)
	g.cfg.url = r.Replace(c.url)
	g.cfg.body = r.Replace(c.body)
	g.urlHasN = strings.Contains(g.cfg.url, "{n}")
	g.bodyHasN = strings.Contains(g.cfg.body, "{n}")
	g.bodyHasID = g.ids != nil && strings.Contains(g.cfg.body, "{id}")
	g.staticBody = []byte(g.cfg.body)
	g.header = http.Header{}
	for _, h := range c.headers {
		name, value, _ := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), r.Replace(strings.TrimSpace(value))
		if strings.Contains(value, "{n}") || strings.Contains(value, "{key}") {
			g.dynHeaders = append(g.dynHeaders, [2]string{name, value})
			continue
		}
		g.header.Add(name, value)
	}
	if c.body != "" && g.header.Get("Content-Type") == "" {
		g.header.Set("Content-Type", "application/json")
	}
	if g.header.Get("User-Agent") == "" {
		g.header.Set("User-Agent", "paysvc-loadgen")
	}
	if c.client == "nethttp" {
		g.client = newClient(c)
	} else {
		g.fast = newFastClient(c)
	}
}

// parts holds what changes from one request to the next.
type parts struct {
	url  string
	body []byte      // nil: no body
	dyn  [][2]string // headers whose value holds {n} or {key}, filled in
}

// next fills in the next request's placeholders. rng belongs to the calling
// worker.
func (g *generator) next(rng *mrand.Rand) parts {
	n := ""
	if g.urlHasN || g.bodyHasN || len(g.dynHeaders) > 0 {
		n = strconv.FormatInt(g.seq.Add(1), 10)
	}
	p := parts{url: g.cfg.url}
	id, key := "", ""
	if g.ids != nil {
		line := g.ids[rng.IntN(len(g.ids))]
		id, key = line.id, line.key
		p.url = strings.ReplaceAll(p.url, "{id}", id)
	}
	if g.urlHasN {
		p.url = strings.ReplaceAll(p.url, "{n}", n)
	}
	if g.cfg.body != "" {
		p.body = g.staticBody
		if g.bodyHasN || g.bodyHasID {
			str := strings.ReplaceAll(g.cfg.body, "{n}", n)
			p.body = []byte(strings.ReplaceAll(str, "{id}", id))
		}
	}
	for _, h := range g.dynHeaders {
		p.dyn = append(p.dyn, [2]string{h[0], strings.NewReplacer("{n}", n, "{key}", key).Replace(h[1])})
	}
	return p
}

// request builds the next request for net/http's client.
func (g *generator) request(ctx context.Context, rng *mrand.Rand) (*http.Request, error) {
	p := g.next(rng)
	var body io.Reader
	if p.body != nil {
		body = bytes.NewReader(p.body)
	}
	req, err := http.NewRequestWithContext(ctx, g.cfg.method, p.url, body)
	if err != nil {
		return nil, err
	}
	req.Header = g.header.Clone()
	for _, h := range p.dyn {
		req.Header.Set(h[0], h[1])
	}
	return req, nil
}

// openIdle opens n keep-alive connections of their own (not the load's
// transport), sends one request on each and reads its answer, leaving the
// connection idle and open; 64 at a time. It returns the connections whose
// request got a 2xx answer and how many failed (those are closed).
func (g *generator) openIdle(ctx context.Context, n int) ([]net.Conn, int) {
	var (
		mu     sync.Mutex
		conns  []net.Conn
		failed int
		wg     sync.WaitGroup
	)
	next := make(chan int)
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	for w := range min(n, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for range next {
				conn, err := g.idleOne(ctx, dialer, rng)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					conns = append(conns, conn)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return conns, failed
}

func (g *generator) idleOne(ctx context.Context, dialer *net.Dialer, rng *mrand.Rand) (net.Conn, error) {
	req, err := g.request(ctx, rng)
	if err != nil {
		return nil, err
	}
	conn, err := dialLoopback(ctx, dialer, req.URL.Host)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(g.cfg.timeout)) //nolint:errcheck // a plain TCP conn
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && (resp.StatusCode < 200 || resp.StatusCode > 299 || resp.Close) {
			err = fmt.Errorf("status %d (close %v)", resp.StatusCode, resp.Close)
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{}) //nolint:errcheck
	return conn, nil
}

// worker holds one goroutine's counters; merged at the end of a phase.
type worker struct {
	hist     histogram
	count    int64
	errors   int64
	late     int64
	statuses map[int]int64
	firstErr string
	tl       *timeline // nil unless -timeline, in the measured phase
}

// record counts one request's latency, sent (closed) or scheduled (open) at.
func (w *worker) record(at time.Time, d time.Duration) {
	w.hist.record(d)
	if w.tl != nil {
		w.tl.record(at, d)
	}
}

// timeline is a phase's requests per second of its window: how many, how
// many over 10 ms, and the slowest.
type timeline struct {
	start time.Time
	secs  []second
}

type second struct {
	n, slow int64
	max     time.Duration
}

func (t *timeline) record(at time.Time, d time.Duration) {
	i := int(at.Sub(t.start) / time.Second)
	if i < 0 {
		i = 0
	}
	if i >= len(t.secs) {
		if i > int(maxDuration/time.Second) {
			return
		}
		t.secs = append(t.secs, make([]second, i+1-len(t.secs))...)
	}
	s := &t.secs[i]
	s.n++
	if d > 10*time.Millisecond {
		s.slow++
	}
	s.max = max(s.max, d)
}

func (t *timeline) merge(o *timeline) {
	if len(o.secs) > len(t.secs) {
		t.secs = append(t.secs, make([]second, len(o.secs)-len(t.secs))...)
	}
	for i, s := range o.secs {
		t.secs[i].n += s.n
		t.secs[i].slow += s.slow
		t.secs[i].max = max(t.secs[i].max, s.max)
	}
}

func (t *timeline) write(path string) error {
	var b bytes.Buffer
	b.WriteString("unix_s,requests,over_10ms,max_ms\n")
	for i, s := range t.secs {
		fmt.Fprintf(&b, "%d,%d,%d,%.3f\n", t.start.Unix()+int64(i), s.n, s.slow, float64(s.max)/float64(time.Millisecond))
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-timeline: %w", err)
	}
	return nil
}

// send sends one request and counts its outcome; the caller records its
// latency unless send reports false (interrupted by Ctrl-C, not counted).
func (g *generator) send(ctx context.Context, rng *mrand.Rand, w *worker) bool {
	if g.fast != nil {
		status, err := g.doFast(rng)
		return w.outcome(ctx, status, err)
	}
	req, err := g.request(ctx, rng)
	status := 0
	if err == nil {
		var resp *http.Response
		resp, err = g.client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
	}
	return w.outcome(ctx, status, err)
}

// outcome counts one request's answer (status 0: none) or error.
func (w *worker) outcome(ctx context.Context, status int, err error) bool {
	if status != 0 {
		w.statuses[status]++
		if err == nil && (status < 200 || status > 299) {
			err = fmt.Errorf("status %d", status)
		}
	}
	if err != nil && ctx.Err() != nil {
		return false
	}
	w.count++
	if err != nil {
		w.errors++
		if w.firstErr == "" {
			w.firstErr = err.Error()
		}
	}
	return true
}

// phase runs one warmup or measured period and returns its results.
func (g *generator) phase(ctx context.Context, d time.Duration, maxReqs int64, perSecond bool) *result {
	start := time.Now()
	ws := make([]*worker, g.cfg.conns)
	for i := range ws {
		ws[i] = &worker{statuses: map[int]int64{}}
		if perSecond {
			ws[i].tl = &timeline{start: start}
		}
	}
	var missed histogram
	var missedN int64
	end := start.Add(d)
	if g.cfg.rate == 0 {
		var wg sync.WaitGroup
		var started atomic.Int64
		for i, w := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := mrand.New(mrand.NewPCG(uint64(start.UnixNano()), uint64(i)))
				for ctx.Err() == nil && time.Now().Before(end) {
					if maxReqs > 0 && started.Add(1) > maxReqs {
						return
					}
					t0 := time.Now()
					if g.send(ctx, rng, w) {
						w.record(t0, time.Since(t0))
					}
				}
			}()
		}
		wg.Wait()
	} else {
		missedN = g.openLoop(ctx, ws, start, end, maxReqs, &missed)
	}
	elapsed := time.Since(start)

	res := &result{Name: g.cfg.name, Method: g.cfg.method, URL: g.cfg.url, Conns: g.cfg.conns,
		Rate: g.cfg.rate, Model: "closed", Statuses: map[string]int64{}}
	if g.cfg.rate > 0 {
		res.Model = "open"
	}
	var h histogram
	if perSecond {
		res.timeline = &timeline{start: start}
	}
	for _, w := range ws {
		h.merge(&w.hist)
		if w.tl != nil {
			res.timeline.merge(w.tl)
		}
		res.Count += w.count
		res.Errors += w.errors
		res.Late += w.late
		for code, n := range w.statuses {
			res.Statuses[fmt.Sprint(code)] += n
		}
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
	}
	res.Missed = missedN
	h.merge(&missed)
	res.DurationS = round(elapsed.Seconds(), 3)
	if elapsed > 0 {
		res.RPS = round(float64(res.Count)/elapsed.Seconds(), 1)
	}
	ms := func(v time.Duration) float64 { return round(float64(v)/float64(time.Millisecond), 3) }
	res.P50, res.P90, res.P99 = ms(h.quantile(0.50)), ms(h.quantile(0.90)), ms(h.quantile(0.99))
	res.Max, res.Mean = ms(h.max), ms(h.mean())
	return res
}

// openLoop runs the open model. One dispatcher goroutine, on its own OS
// thread, sleeps until each slot's time (nanosleep: Go's timers can fire up
// to a millisecond late on an idle runtime, which would count as latency)
// and hands the slot to the worker pool through a channel as deep as the
// pool. When every worker is busy the hand-off blocks and the following
// slots leave late: their latency, measured from the slot's time, includes
// that wait. Slots not handed off, or not started, by the end of the window
// are missed; they enter the histogram with the time they had waited when
// the window closed (a lower bound).
func (g *generator) openLoop(ctx context.Context, ws []*worker, start, end time.Time, maxReqs int64, missed *histogram) int64 {
	interval := float64(time.Second) / g.cfg.rate
	slots := int64(float64(end.Sub(start)) / interval)
	if maxReqs > 0 && slots > maxReqs {
		slots = maxReqs
	}
	slotTime := func(i int64) time.Time { return start.Add(time.Duration(float64(i) * interval)) }
	ch := make(chan time.Time, len(ws))
	var dropped atomic.Int64 // taken from ch after the window closed
	var mu sync.Mutex        // guards missed

	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(start.UnixNano()), uint64(i)))
			for at := range ch {
				now := time.Now()
				if !now.Before(end) || ctx.Err() != nil {
					dropped.Add(1)
					mu.Lock()
					missed.record(earlier(now, end).Sub(at))
					mu.Unlock()
					continue
				}
				if now.Sub(at) > g.cfg.late {
					w.late++
				}
				if g.send(ctx, rng, w) {
					w.record(at, time.Since(at))
				}
			}
		}()
	}

	var handed int64
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(ch)
		endTimer := time.NewTimer(time.Until(end))
		defer endTimer.Stop()
		for ; handed < slots; handed++ {
			at := slotTime(handed)
			if wait := time.Until(at); wait > 0 {
				ts := syscall.NsecToTimespec(int64(wait))
				for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
				}
			}
			if ctx.Err() != nil || !time.Now().Before(end) {
				return
			}
			select {
			case ch <- at:
				continue
			default:
			}
			select { // every worker busy: wait, the slot is now late
			case ch <- at:
			case <-endTimer.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	// An interrupted run (SIGINT/SIGTERM: a caller that decides when the
	// window closes) ends at the interruption: later slots were never due.
	stop := end
	if ctx.Err() != nil {
		stop = earlier(time.Now(), end)
	}
	n := dropped.Load()
	for s := handed; s < slots && slotTime(s).Before(stop); s++ {
		missed.record(stop.Sub(slotTime(s)))
		n++
	}
	return n
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type result struct {
	Name       string           `json:"name"`
	Model      string           `json:"model"`
	Method     string           `json:"method"`
	URL        string           `json:"url"`
	Conns      int              `json:"conns"`
	Rate       float64          `json:"rate"`
	DurationS  float64          `json:"duration_s"`
	Count      int64            `json:"count"`
	Errors     int64            `json:"errors"`
	Late       int64            `json:"late"`
	Missed     int64            `json:"missed"`
	RPS        float64          `json:"rps"`
	P50        float64          `json:"p50_ms"`
	P90        float64          `json:"p90_ms"`
	P99        float64          `json:"p99_ms"`
	Max        float64          `json:"max_ms"`
	Mean       float64          `json:"mean_ms"`
	Statuses   map[string]int64 `json:"statuses"`
	FirstError string           `json:"first_error,omitempty"`
	Idle       int              `json:"idle_conns,omitempty"` // -idle connections held open through the run

	timeline *timeline
}

func (r *result) print(c config) {
	if c.json {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return
	}
	label := r.Name
	if label == "" {
		label = r.Method + " " + r.URL
	}
	fmt.Printf("%s\n", label)
	if r.Model == "open" {
		fmt.Printf("  model      open, %g req/s scheduled, %d in-flight max\n", r.Rate, r.Conns)
	} else {
		fmt.Printf("  model      closed, %d connections\n", r.Conns)
	}
	fmt.Printf("  requests   %d in %.2fs, %.1f req/s\n", r.Count, r.DurationS, r.RPS)
	fmt.Printf("  errors     %d", r.Errors)
	if r.FirstError != "" {
		fmt.Printf(" (first: %s)", r.FirstError)
	}
	fmt.Println()
	if r.Model == "open" {
		fmt.Printf("  late       %d (sent > %s after their slot)\n", r.Late, c.late)
		fmt.Printf("  missed     %d (never sent)\n", r.Missed)
	}
	codes := make([]string, 0, len(r.Statuses))
	for k := range r.Statuses {
		codes = append(codes, k)
	}
	sort.Strings(codes)
	parts := make([]string, 0, len(codes))
	for _, k := range codes {
		parts = append(parts, fmt.Sprintf("%s×%d", k, r.Statuses[k]))
	}
	fmt.Printf("  statuses   %s\n", strings.Join(parts, " "))
	fmt.Printf("  latency ms p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n", r.P50, r.P90, r.P99, r.Max, r.Mean)
}

func round(v float64, digits int) float64 {
	p := math.Pow10(digits)
	return math.Round(v*p) / p
}

// histogram is a log-linear latency histogram in microseconds, HDR style:
// values below 128 µs are exact, above that each power of two is split in
// 64 buckets (relative error under 1/128). Fixed size, about 30 KiB.
type histogram struct {
	counts [subCount + 58*subHalf]int64
	total  int64
	sum    time.Duration
	max    time.Duration
}

const (
	subBits  = 7
	subCount = 1 << subBits // 128
	subHalf  = subCount / 2 // 64
)

func bucketOf(us uint64) int {
	if us < subCount {
		return int(us)
	}
	shift := bits.Len64(us) - subBits // >= 1
	top := us >> uint(shift)          // in [64, 128)
	return subCount + (shift-1)*subHalf + int(top-subHalf)
}

// bucketMid is the middle of a bucket's range, in microseconds.
func bucketMid(i int) float64 {
	if i < subCount {
		return float64(i)
	}
	shift := (i-subCount)/subHalf + 1
	top := uint64((i-subCount)%subHalf + subHalf)
	lo := top << uint(shift)
	hi := (top+1)<<uint(shift) - 1
	return (float64(lo) + float64(hi)) / 2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d/time.Microsecond))]++
	h.total++
	h.sum += d
	if d > h.max {
		h.max = d
	}
}

func (h *histogram) merge(o *histogram) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
	h.total += o.total
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

func (h *histogram) mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return h.sum / time.Duration(h.total)
}

// quantile returns the value at q (0..1); never above the exact maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			v := time.Duration(bucketMid(i) * float64(time.Microsecond))
			return min(v, h.max)
		}
	}
	return h.max
}
