package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// controlRecorder is Options.Control for tests: it runs only after the
// proxy's own check passed, records the socket address, and refuses anything
// but loopback, so no test ever sends a packet off the host.
type controlRecorder struct {
	mu    sync.Mutex
	addrs []string
}

func (c *controlRecorder) control(_, address string, _ syscall.RawConn) error {
	c.mu.Lock()
	c.addrs = append(c.addrs, address)
	c.mu.Unlock()
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().IsLoopback() {
		return fmt.Errorf("test control refuses non-loopback %s", address)
	}
	return nil
}

func (c *controlRecorder) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

// spellingFixture is a proxy session with the real dialer (its Control hook
// chained to a controlRecorder), allow_cidrs 127.0.0.1/32 like the tests of
// every other package, and an HTTP backend on 127.0.0.1:port.
type spellingFixture struct {
	sess    *Session
	ctl     *controlRecorder
	sock    string
	port    string
	backend *httptest.Server
}

func newSpellingFixture(t *testing.T, allow func(port string) []string) *spellingFixture {
	t.Helper()
	f := &spellingFixture{ctl: &controlRecorder{}}
	f.backend = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "backend")
	}))
	t.Cleanup(f.backend.Close)
	_, f.port, _ = net.SplitHostPort(f.backend.Listener.Addr().String())
	lo := netip.MustParseAddr("127.0.0.1")
	p, err := New(Config{AllowCIDRs: []string{"127.0.0.1/32"}}, Options{
		Resolver: fakeResolver{
			"api.test":                   {lo},
			"www.example.com":            {lo},
			"xn--bcher-kva.example.com":  {lo},
			"private.example.com":        {netip.MustParseAddr("10.0.0.5")},
			"meta.example.com":           {netip.MustParseAddr("169.254.169.254")},
			"mapped.example.com":         {netip.MustParseAddr("::ffff:127.0.0.1")},
			"mapped-private.example.com": {netip.MustParseAddr("::ffff:10.0.0.5")},
			"mapped-other.example.com":   {netip.MustParseAddr("::ffff:127.0.0.2")},
			"nat64.example.com":          {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
			"ula.example.com":            {netip.MustParseAddr("fd12:3456::1")},
			"zoned.example.com":          {netip.MustParseAddr("fe80::1%lo")},
			"public.example.com":         {netip.MustParseAddr("93.184.215.14")},
		},
		Control:        f.ctl.control,
		ConnectTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.sock = filepath.Join(t.TempDir(), "egress.sock")
	s, err := p.Start(f.sock, allow(f.port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.sess = s.(*Session)
	return f
}

// send writes one raw request to the proxy's socket and returns the status
// code of the answer (0 if there was none).
func (f *spellingFixture) send(t *testing.T, req string) int {
	t.Helper()
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return 0
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0
	}
	var code int
	fmt.Sscanf(line, "HTTP/1.1 %d", &code)
	return code
}

// connect speaks CONNECT target to the proxy.
func (f *spellingFixture) connect(t *testing.T, target string) int {
	return f.send(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
}

// get speaks an absolute-form GET for http://authority/ to the proxy.
func (f *spellingFixture) get(t *testing.T, authority string) int {
	return f.send(t, "GET http://"+authority+"/ HTTP/1.1\r\nHost: proxy.test\r\n\r\n")
}

// attempts waits until n attempts are recorded (the ones refused by net/http
// itself are recorded when the connection closes) and returns them.
func (f *spellingFixture) attempts(t *testing.T, n int) []attemptView {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := f.sess.Attempts()
		if len(got)+f.sess.Dropped() >= n || time.Now().After(deadline) {
			out := make([]attemptView, len(got))
			for i, a := range got {
				out[i] = attemptView{a.Host, a.Port, a.Allowed, a.Reason, a.IP}
			}
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type attemptView struct {
	Host    string
	Port    int
	Allowed bool
	Reason  string
	IP      string
}

// The host spellings of issue #10 class 1 and their relatives. Every one goes
// through the real proxy on a real socket, as CONNECT and as plain HTTP, and
// must come out allowed or denied for the stated reason. allow_cidrs opens
// 127.0.0.1/32 (so allowed cases reach the loopback backend), and the
// allow-list names the IPv6 literals below, so what refuses them is the
// address check and not the list.
func TestSession_HostSpellings(t *testing.T) {
	allow := func(p string) []string {
		list := []string{"*.example.com:" + p, "api.test:" + p, "127.0.0.1:" + p, "0.0.0.0:" + p}
		for _, ip := range []string{"::1", "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "2001:0:4136:e378:8000:63bf:80ff:fffe",
			"fd00::1", "fe80::1", "ff02::1", "2001:db8::1", "::", "100::1"} {
			list = append(list, "["+ip+"]:"+p)
		}
		return list
	}
	const (
		ok       = http.StatusOK
		bad      = http.StatusBadRequest
		denied   = http.StatusForbidden
		notList  = "not in this run's egress allow-list"
		notV6GU  = "outside of the IPv6 Global Unicast range"
		preParse = "request refused before parsing"
	)
	long := strings.Repeat("a", 63) + "."
	tests := []struct {
		name      string
		authority string // {p} is the backend port
		code      int
		reason    string // substring of the recorded reason; "" when allowed
		// httpCode/httpReason override code/reason for plain HTTP, where
		// net/url refuses some spellings before the proxy sees them.
		httpCode   int
		httpReason string
		wantIP     string // the address recorded (checked or dialled), if any
	}{
		// Allowed: canonical and harmless variants of allowed names.
		{name: "an allowed name", authority: "api.test:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "upper case", authority: "API.Test:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "a trailing dot", authority: "api.test.:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "a glob match", authority: "www.example.com:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "a glob match in upper case with a trailing dot", authority: "WWW.EXAMPLE.COM.:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "punycode under the glob", authority: "xn--bcher-kva.example.com:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "an allowed IPv4 literal opened by allow_cidrs", authority: "127.0.0.1:{p}", code: ok, wantIP: "127.0.0.1"},
		{name: "a name resolving to IPv4-mapped loopback, which allow_cidrs opens as 127.0.0.1", authority: "mapped.example.com:{p}", code: ok, wantIP: "127.0.0.1"},

		// Malformed: refused with a reason before any rule matches.
		{name: "IPv6 zone built to end in the glob's suffix", authority: "[::1%25.example.com]:{p}", code: bad, reason: "zone"},
		{name: "raw IPv6 zone", authority: "[fe80::1%lo]:{p}", code: bad, reason: preParse},
		{name: "percent-escaped dot", authority: "api%2etest:{p}", code: bad, reason: preParse},
		{name: "percent-escaped dot under the glob", authority: "www%2Eexample.com:{p}", code: bad, reason: preParse},
		{name: "a percent escape net/url lets through", authority: "www%C3%BC.example.com:{p}", code: bad, reason: `character '%'`},
		{name: "userinfo", authority: "a@api.test:{p}", code: bad, reason: "userinfo"},
		{name: "userinfo naming an allowed host", authority: "api.test@evil.test:{p}", code: bad, reason: "userinfo"},
		{name: "unicode IDN", authority: "bücher.example.com:{p}", code: bad, reason: "punycode"},
		{name: "decimal IPv4", authority: "2130706433:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "hex IPv4", authority: "0x7f000001:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "octal IPv4", authority: "0177.0.0.1:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "dotted hex IPv4", authority: "0x7f.0.0.1:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "short IPv4", authority: "127.1:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "IPv4 with a trailing dot", authority: "127.0.0.1.:{p}", code: bad, reason: "last label does not start with a letter"},
		{name: "IPv4-mapped IPv6 literal", authority: "[::ffff:127.0.0.1]:{p}", code: bad, reason: "IPv4-mapped"},
		{name: "IPv4-mapped IPv6 literal in hex", authority: "[::ffff:7f00:1]:{p}", code: bad, reason: "IPv4-mapped"},
		{name: "unbracketed IPv6", authority: "::1:{p}", code: bad, reason: preParse},
		{name: "junk after the IPv6 literal", authority: "[::1]x:{p}", code: bad, reason: preParse},
		{name: "port zero", authority: "api.test:0", code: bad, reason: "not in 1..65535"},
		{name: "port over 65535", authority: "api.test:65536", code: bad, reason: "not in 1..65535"},
		{name: "signed port", authority: "api.test:+{p}", code: bad, reason: preParse},
		{name: "trailing junk after the port", authority: "api.test:{p}x", code: bad, reason: preParse},
		{name: "a port of six digits", authority: "api.test:000443", code: bad, reason: "decimal digits"},
		{name: "empty port", authority: "api.test:", code: bad, reason: "empty port"},
		{name: "empty host", authority: ":{p}", code: bad, reason: "empty host"},
		{name: "empty label", authority: "api..test:{p}", code: bad, reason: "empty label"},
		{name: "leading hyphen", authority: "-api.test:{p}", code: bad, reason: "hyphen"},
		{name: "underscore", authority: "a_b.example.com:{p}", code: bad, reason: `character '_'`},
		{name: "a star", authority: "*.example.com:{p}", code: bad, reason: `character '*'`},
		{name: "a label over 63 bytes", authority: strings.Repeat("a", 64) + ".example.com:{p}", code: bad, reason: "over 63"},
		{name: "a name over 253 bytes", authority: strings.Repeat(long, 3) + strings.Repeat("b", 50) + ".example.com:{p}", code: bad, reason: "254 bytes, over the 253"},
		{name: "an authority over a host and port", authority: strings.Repeat(long, 4) + "example.com:{p}", code: bad, reason: "over the 261"},

		// Well-formed but not on the list.
		{name: "the glob's own domain", authority: "example.com:{p}", code: denied, reason: notList},
		{name: "a suffix without the dot", authority: "evilexample.com:{p}", code: denied, reason: notList},
		{name: "an allowed name on another port", authority: "api.test:1", code: denied, reason: notList},
		{name: "a loopback literal off the list", authority: "127.0.0.2:{p}", code: denied, reason: notList},
		{name: "an unknown name under the glob", authority: "nowhere.example.com:{p}", code: denied, reason: "resolving the name failed"},

		// On the list, refused by the address check.
		{name: "IPv6 loopback", authority: "[::1]:{p}", code: denied, reason: notV6GU, wantIP: "::1"},
		{name: "IPv4-compatible loopback", authority: "[::127.0.0.1]:{p}", code: denied, reason: notV6GU, wantIP: "::7f00:1"},
		{name: "NAT64 loopback", authority: "[64:ff9b::7f00:1]:{p}", code: denied, reason: notV6GU, wantIP: "64:ff9b::7f00:1"},
		{name: "6to4 embedding loopback", authority: "[2002:7f00:1::]:{p}", code: denied, reason: "denied by: 2002::/16", wantIP: "2002:7f00:1::"},
		{name: "Teredo embedding loopback", authority: "[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}", code: denied, reason: "denied by: 2001::/23"},
		{name: "unique local", authority: "[fd00::1]:{p}", code: denied, reason: notV6GU},
		{name: "link-local", authority: "[fe80::1]:{p}", code: denied, reason: notV6GU},
		{name: "multicast", authority: "[ff02::1]:{p}", code: denied, reason: notV6GU},
		{name: "IPv6 documentation", authority: "[2001:db8::1]:{p}", code: denied, reason: "denied by: 2001:db8::/32"},
		{name: "IPv6 unspecified", authority: "[::]:{p}", code: denied, reason: notV6GU},
		{name: "IPv6 discard-only", authority: "[100::1]:{p}", code: denied, reason: notV6GU},
		{name: "IPv4 this-network", authority: "0.0.0.0:{p}", code: denied, reason: "denied by: 0.0.0.0/8"},
		{name: "a name resolving to a private address", authority: "private.example.com:{p}", code: denied, reason: "denied by: 10.0.0.0/8", wantIP: "10.0.0.5"},
		{name: "a name resolving to the metadata address", authority: "meta.example.com:{p}", code: denied, reason: "denied by: 169.254.0.0/16", wantIP: "169.254.169.254"},
		{name: "a name resolving to an IPv4-mapped private address is judged as that IPv4 address", authority: "mapped-private.example.com:{p}", code: denied, reason: "denied by: 10.0.0.0/8", wantIP: "10.0.0.5"},
		{name: "a name resolving to IPv4-mapped loopback the platform did not open", authority: "mapped-other.example.com:{p}", code: denied, reason: "denied by: 127.0.0.0/8", wantIP: "127.0.0.2"},
		{name: "a name resolving to NAT64 metadata", authority: "nat64.example.com:{p}", code: denied, reason: notV6GU},
		{name: "a name resolving to a unique local address", authority: "ula.example.com:{p}", code: denied, reason: notV6GU},
		{name: "a name resolving to a zoned link-local address", authority: "zoned.example.com:{p}", code: denied, reason: "zone"},
		// A public address passes the proxy's checks and reaches the dialer's
		// Control hook, where the test's recorder refuses it before connect.
		{name: "a name resolving to a public address is dialled by address", authority: "public.example.com:{p}", code: denied, reason: "test control refuses non-loopback 93.184.215.14", wantIP: "93.184.215.14"},
	}
	for _, mode := range []string{"CONNECT", "HTTP"} {
		for _, tt := range tests {
			t.Run(mode+"/"+tt.name, func(t *testing.T) {
				f := newSpellingFixture(t, allow)
				authority := strings.ReplaceAll(tt.authority, "{p}", f.port)
				code, reason := tt.code, tt.reason
				var got int
				if mode == "CONNECT" {
					got = f.connect(t, authority)
				} else {
					got = f.get(t, authority)
					if tt.httpCode != 0 {
						code, reason = tt.httpCode, tt.httpReason
					}
				}
				if tt.code == denied && got == http.StatusBadGateway {
					got = denied // a dial refused by the test recorder
				}
				if got != code {
					t.Errorf("status %d, want %d", got, code)
				}
				as := f.attempts(t, 1)
				if len(as) != 1 {
					t.Fatalf("attempts = %+v, want exactly one", as)
				}
				a := as[0]
				if a.Allowed != (code == ok) {
					t.Errorf("attempt %+v: allowed = %t, want %t", a, a.Allowed, code == ok)
				}
				if !strings.Contains(a.Reason, reason) {
					t.Errorf("attempt %+v: reason does not contain %q", a, reason)
				}
				if tt.wantIP != "" && a.IP != tt.wantIP {
					t.Errorf("attempt %+v: ip = %q, want %q", a, a.IP, tt.wantIP)
				}
				for _, addr := range f.ctl.seen() {
					if code != ok && addr != "93.184.215.14:"+f.port {
						t.Errorf("a refused attempt reached the dialer's Control hook with %s", addr)
					}
				}
			})
		}
	}
}

// The dialer's Control hook decides on the socket address itself: handed a
// denied address directly (as a redirect, a resolver answer or a spelling
// the checks before it missed would hand it), it refuses before connect,
// and allow_cidrs still opens exactly what it names.
func TestProxy_ControlHookRefusesDeniedSocketAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	tests := []struct {
		name       string
		allowCIDRs []string
		addr       string
		wantOK     bool
	}{
		{"loopback, closed", nil, "127.0.0.1:" + port, false},
		{"loopback opened by allow_cidrs", []string{"127.0.0.1/32"}, "127.0.0.1:" + port, true},
		{"another loopback address, not opened", []string{"127.0.0.1/32"}, "127.0.0.2:" + port, false},
		{"IPv4-mapped private address (the socket is IPv4)", []string{"127.0.0.1/32"}, "[::ffff:10.0.0.1]:80", false},
		{"private", []string{"127.0.0.1/32"}, "10.0.0.1:80", false},
		{"metadata", []string{"127.0.0.1/32"}, "169.254.169.254:80", false},
		{"IPv6 loopback", []string{"127.0.0.1/32"}, "[::1]:" + port, false},
		{"NAT64 of an opened address", []string{"127.0.0.1/32"}, "[64:ff9b::7f00:1]:" + port, false},
		{"zoned link-local", []string{"127.0.0.1/32"}, "[fe80::1%lo]:80", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl := &controlRecorder{}
			p, err := New(Config{AllowCIDRs: tt.allowCIDRs}, Options{Control: ctl.control, ConnectTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.dial(context.Background(), "tcp", tt.addr)
			if tt.wantOK {
				if err != nil {
					t.Fatalf("dial %s: %v", tt.addr, err)
				}
				c.Close()
				select {
				case <-accepted:
				case <-time.After(10 * time.Second):
					t.Fatal("the listener never saw the allowed connection")
				}
				return
			}
			var d *addrDeniedError
			if err == nil {
				c.Close()
			}
			if !errors.As(err, &d) {
				t.Fatalf("dial %s: got %v, want the Control hook's refusal", tt.addr, err)
			}
			if seen := ctl.seen(); len(seen) != 0 {
				t.Fatalf("the refused address reached the next hook (connect would follow): %v", seen)
			}
		})
	}
	select {
	case <-accepted:
		t.Fatal("a refused dial reached the listener")
	default:
	}
}

// allow_cidrs cannot open an IPv4 range under an IPv6 spelling: IPv6 entries
// overlapping the ranges that embed IPv4 addresses are refused at start-up.
func TestNew_RefusesAllowCIDRsThatEmbedIPv4(t *testing.T) {
	for _, c := range []string{"::/0", "::ffff:0:0/96", "::ffff:127.0.0.1/128", "64:ff9b::/96", "2002::/16", "2001::/32", "::/64"} {
		if _, err := New(Config{AllowCIDRs: []string{c}}, Options{}); err == nil || !strings.Contains(err.Error(), "open IPv4 ranges as IPv4") {
			t.Errorf("allow_cidrs %s: got %v, want a refusal", c, err)
		}
	}
	for _, c := range []string{"127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8"} {
		if _, err := New(Config{AllowCIDRs: []string{c}}, Options{}); err != nil {
			t.Errorf("allow_cidrs %s: %v", c, err)
		}
	}
}
