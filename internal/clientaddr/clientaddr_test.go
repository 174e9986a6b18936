package clientaddr_test

import (
	"net/http"
	"strings"
	"testing"

	"paysvc/internal/clientaddr"
)

func TestOf(t *testing.T) {
	t.Parallel()
	none, err := clientaddr.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	proxied, err := clientaddr.New([]string{"10.0.0.0/8", "192.0.2.7", "fd00::/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    *clientaddr.Resolver
		peer string
		xff  []string // X-Forwarded-For lines
		want string
	}{
		{"no proxy: the peer", none, "203.0.113.5:4711", nil, "203.0.113.5"},
		{"no proxy: X-Forwarded-For is the client's to forge", none, "203.0.113.5:4711", []string{"198.51.100.1"}, "203.0.113.5"},
		{"a nil resolver: the peer", nil, "203.0.113.5:4711", []string{"198.51.100.1"}, "203.0.113.5"},
		{"trusted proxy: its client", proxied, "10.1.2.3:80", []string{"198.51.100.1"}, "198.51.100.1"},
		{"trusted proxies in a chain", proxied, "10.1.2.3:80", []string{"198.51.100.1, 192.0.2.7", "10.9.9.9"}, "198.51.100.1"},
		{"what the client put in front is not trusted", proxied, "10.1.2.3:80", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"an untrusted peer cannot name another client", proxied, "203.0.113.5:4711", []string{"198.51.100.1"}, "203.0.113.5"},
		{"a trusted peer without the header: itself", proxied, "10.1.2.3:80", nil, "10.1.2.3"},
		{"every hop trusted: the peer", proxied, "10.1.2.3:80", []string{"10.4.4.4"}, "10.1.2.3"},
		{"garbage in the header: the peer", proxied, "10.1.2.3:80", []string{"not an address"}, "10.1.2.3"},
		{"IPv6: its /64", none, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"IPv6 behind a proxy: its /64", proxied, "[fd00::1]:443", []string{"2001:db8:1:2::99"}, "2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6: the IPv4 address", none, "[::ffff:203.0.113.5]:80", nil, "203.0.113.5"},
		{"IPv4-mapped in the header: the IPv4 address", proxied, "10.1.2.3:80", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
		{"an address with a port in the header", proxied, "10.1.2.3:80", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"an IPv6 zone: its /64", none, "[fe80::1:2:3:4%eth0]:80", nil, "fe80::/64"},
		{"a long header: its rightmost untrusted address", proxied, "10.1.2.3:80", []string{strings.Repeat("192.0.2.99, ", 1000) + "198.51.100.1"}, "198.51.100.1"},
		{"a Unix socket's peer: as it is", proxied, "@", []string{"198.51.100.1"}, "@"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
			for _, v := range c.xff {
				req.Header.Add("X-Forwarded-For", v)
			}
			if got := c.r.Of(req); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestNewRejectsBadRanges(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"lb.internal", "10.0.0.0/33", "10.0.0"} {
		if _, err := clientaddr.New([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
