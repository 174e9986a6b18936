package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"paysvc/internal/webhook"
)

const (
	vectorSecret = "whsec_0123456789abcdefghijABCDEFGHIJ"
	vectorBody   = `{"id":"evt_1","type":"payment_intent.succeeded","created":1735689600,"livemode":false,"data":{"id":"pi_1"}}`
)

// independentHMAC is the test's own HMAC-SHA256, not webhook.Sign.
func independentHMAC(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// TestSignKnownAnswers checks Sign against digests computed outside Go
// (Python's hmac module; the first is RFC 4231 test case 2).
func TestSignKnownAnswers(t *testing.T) {
	cases := []struct {
		name, secret, body, want string
	}{
		{"RFC 4231 case 2", "Jefe", "what do ya want for nothing?",
			"sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{"event payload", vectorSecret, vectorBody,
			"sha256=6bd1a1db7580b220a72faa3fa58384d59f8d0fbac545bcc42fd032844607b785"},
		{"empty body", vectorSecret, "",
			"sha256=11325bdbee6a98d4ca80081b9fcd218672917a2d1eb3262e4f31c55f2be81669"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := "sha256=" + independentHMAC(c.secret, []byte(c.body)); got != c.want {
				t.Fatalf("vector is wrong: independent HMAC got %s, want %s", got, c.want)
			}
			if got := webhook.Sign(c.secret, []byte(c.body)); got != c.want {
				t.Errorf("got Sign = %s, want %s", got, c.want)
			}
			if err := webhook.Verify(c.secret, []byte(c.body), c.want); err != nil {
				t.Errorf("got Verify = %v, want nil", err)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	body := []byte(vectorBody)
	good := webhook.Sign(vectorSecret, body)
	digest := strings.TrimPrefix(good, "sha256=")

	// The same JSON, re-encoded: what a receiver gets by decoding and
	// encoding the body again before verifying.
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	reencoded, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(reencoded, body) {
		t.Fatal("re-encoded body is byte-identical; the case would prove nothing")
	}
	// One byte changed: "pi_1" → "pi_2".
	changed := bytes.Replace(body, []byte(`"pi_1"`), []byte(`"pi_2"`), 1)
	if diff := countDiff(body, changed); diff != 1 {
		t.Fatalf("changed body differs in %d bytes, want 1", diff)
	}

	cases := []struct {
		name   string
		secret string
		body   []byte
		header string
		want   error
	}{
		{"right header", vectorSecret, body, good, nil},
		{"empty header", vectorSecret, body, "", webhook.ErrMissingSignature},
		{"missing prefix", vectorSecret, body, digest, webhook.ErrMalformed},
		{"uppercase prefix", vectorSecret, body, "SHA256=" + digest, webhook.ErrMalformed},
		{"other algorithm prefix", vectorSecret, body, "sha1=" + digest, webhook.ErrMalformed},
		{"prefix only", vectorSecret, body, "sha256=", webhook.ErrMalformed},
		{"63 hex characters", vectorSecret, body, good[:len(good)-1], webhook.ErrMalformed},
		{"65 hex characters", vectorSecret, body, good + "0", webhook.ErrMalformed},
		{"non-hex", vectorSecret, body, "sha256=" + strings.Repeat("zz", 32), webhook.ErrMalformed},
		{"non-hex last character", vectorSecret, body, good[:len(good)-1] + "g", webhook.ErrMalformed},
		{"leading space", vectorSecret, body, " " + good, webhook.ErrMalformed},
		{"wrong secret", "whsec_other", body, good, webhook.ErrMismatch},
		{"body changed by one byte", vectorSecret, changed, good, webhook.ErrMismatch},
		{"re-encoded JSON body", vectorSecret, reencoded, good, webhook.ErrMismatch},
		{"signature of the re-encoded body", vectorSecret, body, webhook.Sign(vectorSecret, reencoded), webhook.ErrMismatch},
		{"digest of another body", vectorSecret, body, "sha256=" + independentHMAC(vectorSecret, changed), webhook.ErrMismatch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := webhook.Verify(c.secret, c.body, c.header)
			if !errors.Is(got, c.want) || (c.want == nil) != (got == nil) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// countDiff is the number of positions where a and b (of equal length) differ.
func countDiff(a, b []byte) int {
	if len(a) != len(b) {
		return -1
	}
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestForbidden walks both IANA special-purpose address registries (IPv4
// and IPv6), the first and last address of each block that is not globally
// reachable, the IPv4 embeddings a translator or tunnel maps onto them, and
// global addresses that must stay allowed.
func TestForbidden(t *testing.T) {
	cases := []struct {
		addr string
		want bool
		why  string
	}{
		// IPv4 Special-Purpose Address Registry.
		{"0.0.0.0", true, "this network"},
		{"0.255.255.255", true, "this network"},
		{"10.0.0.0", true, "private-use"},
		{"10.255.255.255", true, "private-use"},
		{"100.64.0.0", true, "shared address space"},
		{"100.127.255.255", true, "shared address space"},
		{"127.0.0.1", true, "loopback"},
		{"127.255.255.254", true, "loopback"},
		{"169.254.0.1", true, "link local"},
		{"169.254.169.254", true, "cloud metadata"},
		{"172.16.0.1", true, "private-use"},
		{"172.31.255.255", true, "private-use"},
		{"192.0.0.0", true, "IETF protocol assignments"},
		{"192.0.0.8", true, "IPv4 dummy address"},
		{"192.0.0.9", true, "PCP anycast (refused: not a receiver)"},
		{"192.0.0.10", true, "TURN anycast (refused: not a receiver)"},
		{"192.0.0.170", true, "NAT64/DNS64 discovery"},
		{"192.0.0.255", true, "IETF protocol assignments"},
		{"192.0.2.1", true, "TEST-NET-1"},
		{"192.0.2.255", true, "TEST-NET-1"},
		{"192.88.99.1", true, "deprecated 6to4 relay anycast"},
		{"192.168.0.1", true, "private-use"},
		{"192.168.255.255", true, "private-use"},
		{"198.18.0.1", true, "benchmarking"},
		{"198.19.255.255", true, "benchmarking"},
		{"198.51.100.7", true, "TEST-NET-2"},
		{"203.0.113.9", true, "TEST-NET-3"},
		{"240.0.0.1", true, "reserved"},
		{"255.255.255.255", true, "limited broadcast"},
		{"224.0.0.1", true, "multicast"},
		{"239.255.255.255", true, "multicast"},

		// IPv6 Special-Purpose Address Registry.
		{"::1", true, "loopback"},
		{"::", true, "unspecified"},
		{"::ffff:127.0.0.1", true, "IPv4-mapped loopback"},
		{"::ffff:10.0.0.1", true, "IPv4-mapped private"},
		{"::ffff:169.254.169.254", true, "IPv4-mapped metadata"},
		{"::ffff:192.0.2.1", true, "IPv4-mapped documentation"},
		{"64:ff9b::7f00:1", true, "NAT64 well-known prefix, 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", true, "NAT64 well-known prefix, 169.254.169.254"},
		{"64:ff9b::a00:1", true, "NAT64 well-known prefix, 10.0.0.1"},
		{"64:ff9b:1::a9fe:a9fe", true, "local-use NAT64, 169.254.169.254"},
		{"64:ff9b:1::808:808", true, "local-use NAT64 (not globally reachable whatever it embeds)"},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", true, "local-use NAT64"},
		{"100::1", true, "discard-only"},
		{"100::ffff:ffff:ffff:ffff", true, "discard-only"},
		{"100:0:0:1::1", true, "dummy IPv6 prefix"},
		{"2001::1", true, "Teredo"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", true, "Teredo"},
		{"2001:1::1", true, "PCP anycast (refused: not a receiver)"},
		{"2001:2::1", true, "benchmarking"},
		{"2001:3::1", true, "AMT (refused: inside 2001::/23)"},
		{"2001:20::1", true, "ORCHIDv2"},
		{"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", true, "IETF protocol assignments"},
		{"2001:db8::1", true, "documentation"},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true, "documentation"},
		{"2002:7f00:1::", true, "6to4 of 127.0.0.1"},
		{"2002:a9fe:a9fe::1", true, "6to4 of 169.254.169.254"},
		{"2002:c0a8:101::1", true, "6to4 of 192.168.1.1"},
		{"2002::", true, "6to4 of 0.0.0.0"},
		{"3fff::1", true, "documentation"},
		{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", true, "documentation"},
		{"5f00::1", true, "SRv6 SIDs"},
		{"fc00::1", true, "unique-local"},
		{"fd12:3456:789a::1", true, "unique-local"},
		{"fe80::1", true, "link-local"},
		{"febf::1", true, "link-local"},
		// Outside 2000::/3: not global unicast.
		{"::127.0.0.1", true, "IPv4-compatible loopback"},
		{"::8.8.8.8", true, "IPv4-compatible (deprecated) of a global address"},
		{"::ffff:0:127.0.0.1", true, "SIIT IPv4-translated loopback"},
		{"::ffff:0:8.8.8.8", true, "SIIT IPv4-translated of a global address"},
		{"fec0::1", true, "site-local (deprecated)"},
		{"ff02::1", true, "multicast"},
		{"4000::1", true, "unassigned, outside 2000::/3"},
		{"e000::1", true, "unassigned, outside 2000::/3"},
		// A zone does not change the address.
		{"fe80::1%eth0", true, "zoned link-local"},
		{"::1%lo", true, "zoned loopback"},

		// Global: allowed.
		{"8.8.8.8", false, "global IPv4"},
		{"1.1.1.1", false, "global IPv4"},
		{"172.15.255.255", false, "just below 172.16.0.0/12"},
		{"172.32.0.1", false, "just above 172.16.0.0/12"},
		{"100.63.255.255", false, "just below 100.64.0.0/10"},
		{"100.128.0.1", false, "just above 100.64.0.0/10"},
		{"192.169.0.1", false, "just above 192.168.0.0/16"},
		{"192.0.1.255", false, "between 192.0.0.0/24 and 192.0.2.0/24"},
		{"192.31.196.1", false, "AS112-v4 (globally reachable)"},
		{"192.175.48.1", false, "AS112 direct delegation (globally reachable)"},
		{"223.255.255.255", false, "just below multicast"},
		{"::ffff:8.8.8.8", false, "IPv4-mapped global"},
		{"2606:4700::1111", false, "global IPv6"},
		{"2606:4700::1", false, "global IPv6"},
		{"2001:4860:4860::8888", false, "global IPv6 (2001:4860::, outside 2001::/23)"},
		{"2001:200::1", false, "global IPv6 just above 2001::/23"},
		{"2620:4f:8000::1", false, "AS112-v6 direct delegation (globally reachable)"},
		{"64:ff9b::808:808", false, "NAT64 well-known prefix, 8.8.8.8"},
		{"2002:808:808::1", false, "6to4 of 8.8.8.8"},
		{"3ffe::1", false, "global unicast below 3fff::/20"},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			ip, err := netip.ParseAddr(c.addr)
			if err != nil {
				t.Fatal(err)
			}
			if got := webhook.Forbidden(ip); got != c.want {
				t.Errorf("got Forbidden(%s) = %v, want %v (%s)", c.addr, got, c.want, c.why)
			}
			if got := webhook.Global(ip); got == c.want {
				t.Errorf("got Global(%s) = %v, want %v (%s)", c.addr, got, !c.want, c.why)
			}
		})
	}
	if webhook.Global(netip.Addr{}) {
		t.Error("got Global(zero Addr) = true, want false")
	}
}

func TestCheckURL(t *testing.T) {
	blocked := []string{
		"https://127.0.0.1/hook",
		"https://127.0.0.1:8443/hook",
		"https://[::1]/",
		"https://10.1.2.3/",
		"https://172.16.5.4/",
		"https://192.168.1.1/",
		"https://169.254.169.254/latest/meta-data",
		"https://100.64.0.1/",
		"https://[fc00::1]/",
		"https://[fe80::1]/",
		"https://[::ffff:127.0.0.1]/",
		"https://0.0.0.0/",
		"https://localhost/hook",      // resolves to loopback
		"https://localhost:8443/hook", // with a port
		"https://[fe80::1%25eth0]/",   // zoned link-local
		"https://[::1%25lo]/",         // zoned loopback
		// Translated and reserved addresses (issue 10).
		"https://[64:ff9b:1::a9fe:a9fe]/", // 169.254.169.254 via local-use NAT64
		"https://[64:ff9b::a9fe:a9fe]/",   // 169.254.169.254 via well-known NAT64
		"https://[2002:7f00:1::]/",        // 127.0.0.1 via 6to4
		"https://[::127.0.0.1]/",          // IPv4-compatible
		"https://[::ffff:0:127.0.0.1]/",   // SIIT
		"https://[fec0::1]/",              // site-local
		"https://[100::1]/",               // discard-only
		"https://192.0.2.1/",              // documentation
		"https://[2001:db8::1]/",          // documentation
		"https://[2001::1]/",              // Teredo
		"https://255.255.255.255/",        // limited broadcast
	}
	public := []string{
		"https://8.8.8.8/hook",
		"https://[2606:4700::1]/hook",
		"https://1.1.1.1:8443/",
		"https://[2606:4700::1111]/",
		"https://[64:ff9b::808:808]/", // 8.8.8.8 via NAT64
	}
	ctx := context.Background()
	for _, u := range blocked {
		t.Run("blocked "+u, func(t *testing.T) {
			if err := webhook.CheckURL(ctx, u, false); !errors.Is(err, webhook.ErrForbiddenAddress) {
				t.Errorf("got CheckURL(%s, false) = %v, want %v", u, err, webhook.ErrForbiddenAddress)
			}
			if err := webhook.CheckURL(ctx, u, true); err != nil {
				t.Errorf("got CheckURL(%s, allowPrivate) = %v, want nil", u, err)
			}
		})
	}
	for _, u := range public {
		t.Run("allowed "+u, func(t *testing.T) {
			for _, allow := range []bool{false, true} {
				if err := webhook.CheckURL(ctx, u, allow); err != nil {
					t.Errorf("got CheckURL(%s, %v) = %v, want nil", u, allow, err)
				}
			}
		})
	}
	refused := map[string]string{
		"credentials":        "https://user:pass@example.com/hook",
		"user only":          "https://user@8.8.8.8/hook",
		"no host":            "https:///hook",
		"not a URL":          "://nope",
		"relative":           "/hook",
		"unresolvable host":  "https://nonexistent.invalid/hook",
		"empty host at port": "https://:8443/hook",
	}
	for name, u := range refused {
		t.Run("refused "+name, func(t *testing.T) {
			start := time.Now()
			err := webhook.CheckURL(ctx, u, false)
			if err == nil {
				t.Errorf("got CheckURL(%s) = nil, want an error", u)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("got CheckURL taking %v, want at most its 3 s lookup timeout", d)
			}
		})
	}
	// Credentials are refused even where private networks are allowed.
	if err := webhook.CheckURL(ctx, "https://user:pass@127.0.0.1/", true); err == nil {
		t.Error("got credentials accepted with allowPrivate, want refused")
	}
}

// receiver is an HTTPS test server on loopback that counts its requests.
func receiver(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &hits
}

func TestNewClientDialCheck(t *testing.T) {
	srv, hits := receiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]

	// A zoned loopback literal; skipped where the machine has no IPv6 loopback.
	var v6 string
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		s6 := httptest.NewUnstartedServer(srv.Config.Handler)
		s6.Config.ErrorLog = srv.Config.ErrorLog
		s6.Listener.Close()
		s6.Listener = l
		s6.StartTLS()
		t.Cleanup(s6.Close)
		v6 = s6.URL
	}

	type dialCase struct {
		name      string
		url       string
		opts      webhook.Options
		forbidden bool // want ErrForbiddenAddress and no request received
		wantErr   bool
	}
	cases := []dialCase{
		{"loopback refused at connect", srv.URL, webhook.Options{InsecureTLS: true}, true, true},
		// "localhost" is a name: the check runs on the address it resolves to,
		// at dial time (the DNS-rebinding defence).
		{"name resolving to loopback refused at connect", "https://localhost:" + port + "/", webhook.Options{InsecureTLS: true}, true, true},
		{"allowed private networks", srv.URL, webhook.Options{AllowPrivateNetworks: true, InsecureTLS: true}, false, false},
		{"allowed private networks verify TLS", srv.URL, webhook.Options{AllowPrivateNetworks: true}, false, true},
	}
	// Translated and reserved literals: the dialer refuses them before
	// connecting (without the check they would fail otherwise, or not at all).
	for _, host := range []string{
		"[64:ff9b::7f00:1]", "[64:ff9b:1::a9fe:a9fe]", "[2002:7f00:1::]", "[::127.0.0.1]",
		"[::ffff:0:127.0.0.1]", "[fec0::1]", "[100::1]", "192.0.2.1", "[2001:db8::1]",
	} {
		cases = append(cases, dialCase{"translated or reserved " + host + " refused at connect",
			"https://" + host + ":" + port + "/", webhook.Options{InsecureTLS: true}, true, true})
	}
	if v6 != "" {
		p6 := v6[strings.LastIndex(v6, ":")+1:]
		cases = append(cases,
			dialCase{"IPv6 loopback refused at connect", v6, webhook.Options{InsecureTLS: true}, true, true},
			// The zone must not hide the loopback address from the check.
			dialCase{"zoned IPv6 loopback refused at connect", "https://[::1%25lo]:" + p6 + "/", webhook.Options{InsecureTLS: true}, true, true},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := hits.Load()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.url, strings.NewReader(vectorBody))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := webhook.NewClient(c.opts).Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			if (err != nil) != c.wantErr {
				t.Fatalf("got error %v, want error %v", err, c.wantErr)
			}
			if c.forbidden {
				if !errors.Is(err, webhook.ErrForbiddenAddress) {
					t.Errorf("got %v, want an error wrapping %v", err, webhook.ErrForbiddenAddress)
				}
				if n := hits.Load() - before; n != 0 {
					t.Errorf("got %d requests at the receiver, want 0", n)
				}
			}
			if !c.wantErr && resp.StatusCode != http.StatusNoContent {
				t.Errorf("got status %d, want 204", resp.StatusCode)
			}
		})
	}
}

func TestNewClientNoRedirects(t *testing.T) {
	target, targetHits := receiver(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			src, srcHits := receiver(t, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, target.URL+"/elsewhere", status)
			})
			c := webhook.NewClient(webhook.Options{AllowPrivateNetworks: true, InsecureTLS: true})
			resp, err := c.Post(src.URL, "application/json", strings.NewReader(vectorBody))
			if err != nil {
				t.Fatalf("got %v, want the %d response itself", err, status)
			}
			resp.Body.Close()
			if resp.StatusCode != status {
				t.Errorf("got status %d, want %d", resp.StatusCode, status)
			}
			if got := resp.Header.Get("Location"); got != target.URL+"/elsewhere" {
				t.Errorf("got Location %q, want %q", got, target.URL+"/elsewhere")
			}
			if n := srcHits.Load(); n != 1 {
				t.Errorf("got %d requests at the receiver, want 1", n)
			}
			if n := targetHits.Load(); n != 0 {
				t.Errorf("got %d requests at the redirect target, want 0", n)
			}
		})
	}
}

func TestNewClientTimeout(t *testing.T) {
	if webhook.Timeout != 10*time.Second {
		t.Errorf("got Timeout %v, want 10s", webhook.Timeout)
	}
	for _, o := range []webhook.Options{{}, {AllowPrivateNetworks: true, InsecureTLS: true}} {
		if got := webhook.NewClient(o).Timeout; got != 10*time.Second {
			t.Errorf("got NewClient(%+v).Timeout = %v, want 10s", o, got)
		}
	}
}
