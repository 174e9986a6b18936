package webhook

import (
	"context"
	"crypto/tls"
	"errors"
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

// blocked are the networks webhooks may not reach outside development:
// loopback, private, link-local (cloud metadata at 169.254.169.254),
// carrier-grade NAT, unspecified, multicast and reserved ranges.
var blocked = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "64:ff9b::/96",
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// ErrForbiddenAddress is a destination on a network webhooks may not reach.
var ErrForbiddenAddress = errors.New("webhook: destination resolves to a loopback, private, link-local or reserved address")

// Forbidden reports whether ip is on a blocked network.
func Forbidden(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap() // a zone (%eth0) would make every Contains false
	for _, p := range blocked {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Options configure the delivery client.
type Options struct {
	AllowPrivateNetworks bool // development and tests only
	InsecureTLS          bool // development and tests only
}

// NewClient returns the HTTP client that delivers webhooks: 10 s timeout, no
// redirects followed, and (unless allowed) a dialer that refuses blocked
// addresses at connect time, after DNS resolution, so a name that resolved
// to a public address at registration and later to a private one (DNS
// rebinding) is refused too.
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
		MaxIdleConnsPerHost: 16,
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

// CheckURL is the registration check of an endpoint URL: https with a host
// whose every address is allowed (unless private networks are allowed).
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
