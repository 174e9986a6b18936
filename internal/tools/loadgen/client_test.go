package main

import (
	"context"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newGen prepares a generator as run does, on the fasthttp client unless
// edit says otherwise.
func newGen(t *testing.T, url string, edit func(*config)) *generator {
	t.Helper()
	c := config{url: url, method: "GET", conns: 1, duration: time.Second, timeout: 5 * time.Second, client: "fasthttp"}
	if edit != nil {
		edit(&c)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	g := &generator{cfg: c, run: "feedc0ffee00"}
	g.prepare()
	return g
}

// sendN sends n requests from one worker and returns its counters.
func sendN(t *testing.T, g *generator, n int) *worker {
	t.Helper()
	w := &worker{statuses: map[int]int64{}}
	rng := mrand.New(mrand.NewPCG(1, 2))
	for range n {
		if !g.send(context.Background(), rng, w) {
			t.Fatal("send reported an interruption")
		}
	}
	return w
}

// connCounter counts the connections a test server accepted.
func connCounter(srv *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

// TestClientsSendTheSame: for each method the server sees the same request
// line, Host, headers and body from both clients, placeholders filled in.
func TestClientsSendTheSame(t *testing.T) {
	type seen struct {
		Method, URI, Host, Body string
		Header                  http.Header
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		h.Del("Accept-Encoding") // net/http's transport asks for gzip unless told not to
		if len(b) == 0 && h.Get("Content-Length") == "0" {
			h.Del("Content-Length") // fasthttp sends it for an empty DELETE too
		}
		got <- seen{r.Method, r.RequestURI, r.Host, string(b), h}
	}))
	defer srv.Close()
	for _, method := range []string{"GET", "POST", "DELETE", "PUT"} {
		var s [2]seen
		for i, client := range []string{"fasthttp", "nethttp"} {
			g := newGen(t, srv.URL+"/a/b?x=1&y={n}", func(c *config) {
				c.client, c.method = client, method
				c.headers = headerList{"X-Lower: a", "X-Multi: 1", "X-Multi: 2", "Idempotency-Key: k-{run}-{n}"}
				if method == "PUT" {
					c.body = `{"a":{n}}`
				}
			})
			g.seq.Store(6) // {n} = 7 on both
			if w := sendN(t, g, 1); w.errors != 0 || w.statuses[200] != 1 {
				t.Fatalf("%s %s: %+v", client, method, w)
			}
			s[i] = <-got
		}
		if !reflect.DeepEqual(s[0], s[1]) {
			t.Errorf("%s: fasthttp sent\n%+v\nnet/http\n%+v", method, s[0], s[1])
		}
		if method == "PUT" && (s[0].Body != `{"a":7}` || s[0].Header.Get("Idempotency-Key") != "k-feedc0ffee00-7" || !strings.HasSuffix(s[0].URI, "y=7")) {
			t.Errorf("placeholders: got %+v", s[0])
		}
	}
}

// TestStatusesAndBodies: chunked and sized bodies are read to their end on
// one keep-alive connection, and a non-2xx answer counts as an error.
func TestStatusesAndBodies(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			for range 8 { // 12 KB in 8 flushes
				io.WriteString(w, strings.Repeat("c", 1500))
				w.(http.Flusher).Flush()
			}
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/missing":
			http.NotFound(w, r)
		default:
			io.WriteString(w, strings.Repeat("s", 500))
		}
	}))
	conns := connCounter(srv)
	srv.Start()
	defer srv.Close()
	for path, status := range map[string]int{"/chunked": 200, "/empty": 204, "/sized": 200, "/missing": 404} {
		conns.Store(0)
		w := sendN(t, newGen(t, srv.URL+path, nil), 20)
		wantErrors := int64(0)
		if status == 404 {
			wantErrors = 20
		}
		if w.count != 20 || w.errors != wantErrors || w.statuses[status] != 20 {
			t.Errorf("%s: count %d errors %d statuses %v (first error %q), want 20 × %d", path, w.count, w.errors, w.statuses, w.firstErr, status)
		}
		if got := conns.Load(); got != 1 {
			t.Errorf("%s: 20 requests took %d connections, want 1", path, got)
		}
	}
}

// TestOneConnectionPerWorker: a phase keeps to one connection per worker,
// closed and open model.
func TestOneConnectionPerWorker(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
	}))
	conns := connCounter(srv)
	srv.Start()
	defer srv.Close()
	for _, rate := range []float64{0, 2000} {
		conns.Store(0)
		g := newGen(t, srv.URL+"/x", func(c *config) { c.conns = 4; c.rate = rate })
		g.phase(context.Background(), 100*time.Millisecond, 0, false)
		res := g.phase(context.Background(), 200*time.Millisecond, 0, false)
		if res.Count < 20 || res.Errors != 0 || res.Statuses["200"] != res.Count {
			t.Fatalf("rate %g: %+v", rate, res)
		}
		if got := conns.Load(); got < 1 || got > 4 {
			t.Fatalf("rate %g: %d connections for 4 workers over two phases", rate, got)
		}
	}
}

// TestTimeoutCounted: a request past -timeout ends then and counts as an
// error.
func TestTimeoutCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Second)
	}))
	defer srv.Close()
	g := newGen(t, srv.URL+"/slow", func(c *config) { c.timeout = 100 * time.Millisecond })
	t0 := time.Now()
	w := sendN(t, g, 1)
	if d := time.Since(t0); d > 700*time.Millisecond {
		t.Errorf("timed out after %s, want about 100ms", d)
	}
	if w.count != 1 || w.errors != 1 || !strings.Contains(w.firstErr, "timeout") {
		t.Fatalf("count %d errors %d first %q", w.count, w.errors, w.firstErr)
	}
}
