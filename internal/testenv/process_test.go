package testenv

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsBelowEphemeralRange: the ports handed out are free and lie
// below the kernel's ephemeral range, where no outgoing connection can take
// them before the test's server binds them.
func TestFreePortsBelowEphemeralRange(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	for range 20 {
		base := FreePorts(t, 3)
		if base < lo || base+3 > hi {
			t.Fatalf("FreePorts(3) = %d, want [%d, %d) within [%d, %d)", base, base, base+3, lo, hi)
		}
		for p := base; p < base+3; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d of FreePorts(3) = %d: %v", p, base, err)
			}
			l.Close()
		}
	}
	addr := FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	if p, _ := strconv.Atoi(port); p < lo || p >= hi {
		t.Errorf("FreeAddr = %s, want a port in [%d, %d)", addr, lo, hi)
	}
}
