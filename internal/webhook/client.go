package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Timeout is how long a receiver has to answer.
const Timeout = 10 * time.Second

// Options configure the delivery client.
type Options struct {
	// AllowPrivateNetworks turns the address check off (development and
	// tests only): loopback, private, link-local and every reserved range.
	AllowPrivateNetworks bool
	InsecureTLS          bool // development and tests only
}

// NewClient returns the HTTP client that delivers webhooks: 10 s timeout, no
// redirects followed, and (unless allowed) a dialer that refuses every
// address that is not Global at connect time, after DNS resolution, so a
// name that resolved to a public address at registration and later to a
// private one (DNS rebinding) is refused too.
func NewClient(o Options) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !o.AllowPrivateNetworks {
		dialer.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || Forbidden(ap.Addr()) {
				return ErrForbiddenAddress
			}
			return nil
		}
	}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		// At least the worker's concurrency (50): when every running
		// delivery goes to one busy endpoint over HTTP/1.1, connections
		// beyond the idle limit are closed after each request and the next
		// ones pay a new TLS handshake.
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: o.InsecureTLS}, //nolint:gosec // WEBHOOK_TLS_INSECURE, development only
	}
	return &http.Client{
		Timeout:   Timeout,
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a 3xx is a failed delivery
		},
	}
}

// CheckURL is the registration check of an endpoint URL: a host whose every
// address is Global (unless allowPrivate, which skips the address check).
// It returns ErrForbiddenAddress for a host that is not.
func CheckURL(ctx context.Context, raw string, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("not a valid URL")
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials")
	}
	if allowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if Forbidden(ip) {
			return ErrForbiddenAddress
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return fmt.Errorf("host %q does not resolve", host)
	}
	for _, a := range addrs {
		if Forbidden(a) {
			return ErrForbiddenAddress
		}
	}
	return nil
}
