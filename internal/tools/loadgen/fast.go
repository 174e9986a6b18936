package main

import (
	"context"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"time"

	"github.com/valyala/fasthttp"
)

// newFastClient returns the -client fasthttp client of c's host: at most
// -conns connections (one per worker, which sends one request at a time),
// dialled to loopback addresses only, and no retries, so that every failure
// is counted.
func newFastClient(c config) *fasthttp.HostClient {
	u, _ := url.Parse(c.url) // validated
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: u.Scheme == "https",
		Dial: func(addr string) (net.Conn, error) {
			return dialLoopback(context.Background(), dialer, addr)
		},
		MaxConns:                  c.conns,
		MaxConnWaitTimeout:        c.timeout,
		MaxIdemponentCallAttempts: 1,
		ReadTimeout:               c.timeout,
		WriteTimeout:              c.timeout,
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
		ReadBufferSize:            16 << 10,
		WriteBufferSize:           16 << 10,
	}
}

// doFast sends the next request through the fasthttp client and returns its
// status (0 when there was no answer).
func (g *generator) doFast(rng *mrand.Rand) (int, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	p := g.next(rng)
	req.Header.SetMethod(g.cfg.method)
	req.SetRequestURI(p.url)
	for name, values := range g.header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	for _, h := range p.dyn {
		req.Header.Set(h[0], h[1])
	}
	if p.body != nil {
		req.SetBodyRaw(p.body)
	}
	if err := g.fast.DoTimeout(req, resp, g.cfg.timeout); err != nil {
		return 0, err
	}
	return resp.StatusCode(), nil
}
