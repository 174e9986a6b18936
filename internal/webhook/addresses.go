package webhook

import (
	"errors"
	"net/netip"
)

// ErrForbiddenAddress is a destination webhooks may not reach: anything but
// a global unicast address.
var ErrForbiddenAddress = errors.New("webhook: destination resolves to an address that is not global unicast (loopback, private, link-local, reserved or special-purpose)")

// notGlobal is every block a webhook may not reach, as data. It follows the
// IANA special-purpose address registries (RFC 6890, updated by RFC 8190):
//
//	https://www.iana.org/assignments/iana-ipv4-special-registry (as of 2024-10)
//	https://www.iana.org/assignments/iana-ipv6-special-registry (as of 2024-10)
//
// An entry is here when the registry says it is not globally reachable, or
// says "N/A" (the 6to4 relay anycast block), plus the multicast and
// reserved space those registries do not list. Stricter than the registry:
// 192.0.0.0/24 and 2001::/23 are refused whole, including the few anycast
// and identifier blocks inside them that it marks global (PCP and TURN
// anycast, AMT, AS112-v6, ORCHIDv2, DRIP): none is a webhook receiver.
//
// Outside this table, Global also refuses IPv6 outside 2000::/3 (the only
// global unicast space of the IPv6 Address Space registry: that rules out
// IPv4-compatible ::a.b.c.d, SIIT ::ffff:0:a.b.c.d, site-local fec0::/10 and
// the rest of ::/8), and decodes the IPv4 address of IPv4-mapped, NAT64
// 64:ff9b::/96 and 6to4 2002::/16 addresses before checking it here.
var notGlobal = func() []netip.Prefix {
	var out []netip.Prefix
	for _, e := range []struct{ block, name string }{
		// IPv4 Special-Purpose Address Registry.
		{"0.0.0.0/8", `"This network", RFC 791`},
		{"10.0.0.0/8", "Private-Use, RFC 1918"},
		{"100.64.0.0/10", "Shared Address Space (carrier-grade NAT), RFC 6598"},
		{"127.0.0.0/8", "Loopback, RFC 1122"},
		{"169.254.0.0/16", "Link Local (cloud metadata 169.254.169.254), RFC 3927"},
		{"172.16.0.0/12", "Private-Use, RFC 1918"},
		{"192.0.0.0/24", "IETF Protocol Assignments, RFC 6890 (with 192.0.0.0/29 Service Continuity, .8 dummy, .9 PCP and .10 TURN anycast, .170-.171 NAT64 discovery)"},
		{"192.0.2.0/24", "Documentation (TEST-NET-1), RFC 5737"},
		{"192.88.99.0/24", "Deprecated 6to4 Relay Anycast, RFC 7526"},
		{"192.168.0.0/16", "Private-Use, RFC 1918"},
		{"198.18.0.0/15", "Benchmarking, RFC 2544"},
		{"198.51.100.0/24", "Documentation (TEST-NET-2), RFC 5737"},
		{"203.0.113.0/24", "Documentation (TEST-NET-3), RFC 5737"},
		{"240.0.0.0/4", "Reserved, RFC 1112 (with 255.255.255.255/32 Limited Broadcast, RFC 919)"},
		// Not unicast (IPv4 Multicast Address Space registry).
		{"224.0.0.0/4", "Multicast, RFC 5771"},

		// IPv6 Special-Purpose Address Registry. Entries outside 2000::/3
		// are refused by that rule as well; they are listed to show the
		// registry whole. 64:ff9b::/96 (globally reachable) and 2002::/16
		// carry an IPv4 address that is decoded and checked instead.
		{"::1/128", "Loopback Address, RFC 4291"},
		{"::/128", "Unspecified Address, RFC 4291"},
		{"::ffff:0:0/96", "IPv4-mapped Address, RFC 4291 (decoded first; listed for a mapping that is not)"},
		{"64:ff9b:1::/48", "IPv4-IPv6 Translat. (local-use NAT64), RFC 8215"},
		{"100::/64", "Discard-Only Address Block, RFC 6666"},
		{"100:0:0:1::/64", "Dummy IPv6 Prefix, RFC 9780"},
		{"2001::/23", "IETF Protocol Assignments, RFC 2928 (with Teredo 2001::/32, Benchmarking 2001:2::/48, ORCHIDv2 2001:20::/28)"},
		{"2001:db8::/32", "Documentation, RFC 3849"},
		{"3fff::/20", "Documentation, RFC 9637"},
		{"5f00::/16", "Segment Routing (SRv6) SIDs, RFC 9602"},
		{"fc00::/7", "Unique-Local, RFC 4193"},
		{"fe80::/10", "Link-Local Unicast, RFC 4291"},
		// Not unicast, or deprecated (IPv6 Address Space registry).
		{"fec0::/10", "Site-Local (deprecated), RFC 3879"},
		{"ff00::/8", "Multicast, RFC 4291"},
	} {
		out = append(out, netip.MustParsePrefix(e.block))
	}
	return out
}()

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")      // IPv6 Address Space registry: Global Unicast
	nat64          = netip.MustParsePrefix("64:ff9b::/96")  // RFC 6052 well-known prefix: IPv4 in the last 32 bits
	sixToFour      = netip.MustParsePrefix("2002::/16")     // RFC 3056: IPv4 in bits 16-47
	mapped         = netip.MustParsePrefix("::ffff:0:0/96") // RFC 4291: IPv4 in the last 32 bits
)

// Global reports whether webhooks may reach ip: a global unicast address by
// the IANA special-purpose registries (see notGlobal). An IPv6 address that
// a translator or tunnel maps onto an IPv4 address (IPv4-mapped, NAT64's
// well-known prefix, 6to4) is judged by that IPv4 address, so
// 64:ff9b::a9fe:a9fe (169.254.169.254 through NAT64) and 2002:7f00:1::
// (127.0.0.1 through 6to4) are refused. A zone (%eth0) is ignored.
func Global(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	ip = ip.WithZone("")
	if v4, ok := embeddedIPv4(ip); ok {
		ip = v4
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return false
	}
	for _, p := range notGlobal {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// Forbidden reports whether ip is an address webhooks may not reach: the
// opposite of Global.
func Forbidden(ip netip.Addr) bool { return !Global(ip) }

// embeddedIPv4 returns the IPv4 address that an IPv4-mapped, NAT64
// (well-known prefix) or 6to4 address stands for.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case mapped.Contains(ip), nat64.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}
