// Package clientaddr names the client of a request by its address, for
// the limits kept per client (unknown API keys, dashboard sign-ins).
//
// Behind a reverse proxy or load balancer every connection's peer is the
// proxy, so those limits would be shared by every client behind it. With
// the proxies' addresses listed (API_TRUSTED_PROXIES), the client is the
// rightmost address of X-Forwarded-For that is not a trusted proxy, and
// only when the connection itself comes from a trusted proxy: a client
// that reaches the server directly cannot name itself someone else. Only
// proxies that append to X-Forwarded-For may be listed, and nothing else
// in their ranges: whatever connects from a trusted address can name any
// client.
package clientaddr

import (
	"fmt"
	"net"
	"net/http"

	"github.com/realclientip/realclientip-go"
)

// Resolver finds a request's client address.
type Resolver struct {
	trusted []net.IPNet
	xff     realclientip.Strategy // nil when no proxy is trusted
}

// New returns a resolver that trusts the proxies at the given addresses
// and CIDR ranges; with none, a request's client is its connection's peer.
func New(trustedProxies []string) (*Resolver, error) {
	if len(trustedProxies) == 0 {
		return &Resolver{}, nil
	}
	nets, err := realclientip.AddressesAndRangesToIPNets(trustedProxies...)
	if err != nil {
		return nil, fmt.Errorf("trusted proxies: %w", err)
	}
	xff, err := realclientip.NewRightmostTrustedRangeStrategy("X-Forwarded-For", nets)
	if err != nil {
		return nil, err
	}
	return &Resolver{trusted: nets, xff: xff}, nil
}

// Of is req's client: an IPv4 address, or the /64 network of an IPv6 one,
// since one IPv6 host is usually given a whole /64 to choose from (a
// holder of a /48 has 65,536 of them: the limits do not bound that).
func (r *Resolver) Of(req *http.Request) string {
	peer := realclientip.RemoteAddrStrategy{}.ClientIP(nil, req.RemoteAddr)
	addr := peer
	if r != nil && r.xff != nil && peer != "" && r.isTrusted(peer) {
		// "" when every address is a trusted proxy's, or the rightmost
		// untrusted one is not an address: then the proxy is the client.
		if a := r.xff.ClientIP(req.Header, req.RemoteAddr); a != "" {
			addr = a
		}
	}
	if addr == "" {
		return req.RemoteAddr // not an IP address (a Unix socket's peer)
	}
	return network(addr)
}

func (r *Resolver) isTrusted(addr string) bool {
	ip, err := realclientip.ParseIPAddr(addr)
	if err != nil {
		return false
	}
	for _, n := range r.trusted {
		if n.Contains(ip.IP) {
			return true
		}
	}
	return false
}

// network is an IPv4 address as it is, and an IPv6 one as its /64.
func network(addr string) string {
	ip, err := realclientip.ParseIPAddr(addr)
	if err != nil {
		return addr
	}
	if v4 := ip.IP.To4(); v4 != nil {
		return v4.String()
	}
	return (&net.IPNet{IP: ip.IP.Mask(net.CIDRMask(64, 128)), Mask: net.CIDRMask(64, 128)}).String()
}
