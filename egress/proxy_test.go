package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

func TestParseRules(t *testing.T) {
	tests := []struct {
		name    string
		entry   string
		want    Rule
		wantErr string
	}{
		{"host and port", "API.example.com:8443", Rule{Host: "api.example.com", Ports: []int{8443}}, ""},
		{"glob without port allows https and http", "*.example.com", Rule{Host: "*.example.com", Ports: []int{443, 80}}, ""},
		{"empty", "", Rule{}, "empty host"},
		{"bare star", "*", Rule{}, "leading"},
		{"inner glob", "api.*.com", Rule{}, "leading"},
		{"bad port", "a.com:99999", Rule{}, "not in 1..65535"},
		{"IPv6 literal", "[2001:DB8::1]:443", Rule{Host: "2001:db8::1", Ports: []int{443}}, ""},
		{"glob over an IP", "*.0.0.1", Rule{}, "does not start with a letter"},
		{"IPv4-mapped literal", "[::ffff:127.0.0.1]:80", Rule{}, "IPv4-mapped"},
		{"zone", "[fe80::1%eth0]:80", Rule{}, "zone"},
		{"userinfo", "a@b.com", Rule{}, "userinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := ParseRules([]string{tt.entry})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := (Rule{Host: rs[0].Host, Ports: rs[0].Ports}); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %+v, want %+v", rs[0], tt.want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	rules, err := ParseRules([]string{"*.example.com:443", "pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"a.b.example.com.", 443, true},
		{"example.com", 443, false}, // the glob needs a subdomain
		{"evilexample.com", 443, false},
		{"api.example.com", 80, false},
		{"pypi.org", 80, true},
		{"pypi.org", 22, false},
		{"PYPI.ORG", 443, true},
	}
	for _, tt := range tests {
		h, err := ParseHost(tt.host)
		if err != nil {
			t.Fatal(err)
		}
		if got := Match(rules, h, tt.port); got != tt.want {
			t.Errorf("Match(%s:%d) = %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
}

func TestIPPolicy(t *testing.T) {
	closed, _ := newIPPolicy(nil)
	opened, err := newIPPolicy([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ip       string
		closedOK bool
		openedOK bool
	}{
		{"169.254.169.254", false, false},
		{"10.1.2.3", false, false},
		{"192.168.1.1", false, false},
		{"100.64.0.1", false, false},
		{"::1", false, false},
		{"fd00::1", false, false},
		{"::ffff:169.254.169.254", false, false},
		{"127.0.0.1", false, true},
		{"127.0.0.2", false, false},
		{"93.184.216.34", true, true},
		{"2606:2800:220:1::1", true, true},
	} {
		ip := netip.MustParseAddr(tt.ip)
		if got := closed.check(ip) == ""; got != tt.closedOK {
			t.Errorf("closed policy allows %s = %v, want %v", tt.ip, got, tt.closedOK)
		}
		if got := opened.check(ip) == ""; got != tt.openedOK {
			t.Errorf("opened policy allows %s = %v, want %v", tt.ip, got, tt.openedOK)
		}
	}
	if _, err := newIPPolicy([]string{"not-a-cidr"}); err == nil || !strings.Contains(err.Error(), "not-a-cidr") {
		t.Errorf("bad CIDR should be named in the error, got %v", err)
	}
}

// fakeResolver maps test names to addresses; nothing reaches real DNS.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// loopbackDialer dials only loopback and records every address it was asked
// for; anything else is refused, so the test never sends a packet outside.
type loopbackDialer struct {
	mu    sync.Mutex
	dials []string
}

func (d *loopbackDialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, addr)
	d.mu.Unlock()
	host, _, _ := net.SplitHostPort(addr)
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("test dialer refuses non-loopback %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *loopbackDialer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.dials)
}

type proxyFixture struct {
	sess      *Session
	dialer    *loopbackDialer
	client    *http.Client
	tlsPort   string // the HTTPS backend on 127.0.0.1, allowed as api.test
	plainPort string // the HTTP backend on 127.0.0.1, allowed as api.test
	otherPort string // a listener on 127.0.0.1 that is NOT in the allow-list
}

// newProxyFixture starts an HTTPS and an HTTP backend on loopback, a proxy
// session on a unix socket allowing api.test on both backend ports (plus
// extra), and a client that reaches the proxy through the socket.
func newProxyFixture(t *testing.T, extra ...string) *proxyFixture {
	t.Helper()
	tlsBackend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s", r.URL.Path)
	}))
	t.Cleanup(tlsBackend.Close)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain %s host=%s", r.URL.Path, r.Host)
	}))
	t.Cleanup(plain.Close)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the non-allowed backend was reached: %s", r.URL)
	}))
	t.Cleanup(other.Close)
	f := &proxyFixture{dialer: &loopbackDialer{}}
	_, f.tlsPort, _ = net.SplitHostPort(tlsBackend.Listener.Addr().String())
	_, f.plainPort, _ = net.SplitHostPort(plain.Listener.Addr().String())
	_, f.otherPort, _ = net.SplitHostPort(other.Listener.Addr().String())

	p, err := New(Config{AllowCIDRs: []string{"127.0.0.1/32"}}, Options{
		Resolver: fakeResolver{
			"api.test":   {netip.MustParseAddr("127.0.0.1")},
			"meta.test":  {netip.MustParseAddr("169.254.169.254")},
			"mixed.test": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1")},
		},
		Dial: f.dialer.Dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	allow := append([]string{"api.test:" + f.tlsPort, "api.test:" + f.plainPort}, extra...)
	sockPath := filepath.Join(t.TempDir(), "egress.sock")
	s, err := p.Start(sockPath, allow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f.sess = s.(*Session)

	proxyURL, _ := url.Parse("http://proxy.invalid")
	pool := tlsBackend.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	f.client = &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(proxyURL),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sockPath)
		},
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "example.com"},
	}}
	return f
}

func (f *proxyFixture) get(t *testing.T, rawURL string) (int, string, error) {
	t.Helper()
	resp, err := f.client.Get(rawURL)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func TestSession_AllowsListedHostsOverHTTPSAndHTTP(t *testing.T) {
	f := newProxyFixture(t)
	code, body, err := f.get(t, "https://api.test:"+f.tlsPort+"/secure")
	if err != nil || code != 200 || body != "tls /secure" {
		t.Fatalf("HTTPS through CONNECT: code=%d body=%q err=%v", code, body, err)
	}
	code, body, err = f.get(t, "http://api.test:"+f.plainPort+"/plain?q=1")
	if err != nil || code != 200 || !strings.HasPrefix(body, "plain /plain host=api.test") {
		t.Fatalf("plain HTTP: code=%d body=%q err=%v", code, body, err)
	}
	got := f.sess.Attempts()
	if len(got) != 2 || !got[0].Allowed || !got[1].Allowed || got[0].IP != "127.0.0.1" {
		t.Fatalf("attempts = %+v, want two allowed to 127.0.0.1", got)
	}
}

func TestSession_DeniesAndRecords(t *testing.T) {
	tests := []struct {
		name   string
		url    string
		reason string
	}{
		{"host not in the allow-list", "http://evil.test:%s/", "not in this run's egress allow-list"},
		{"allowed host on a non-allowed port", "http://api.test:%s/", "not in this run's egress allow-list"},
		{"direct IP connect", "https://127.0.0.1:%s/", "not in this run's egress allow-list"},
		{"metadata address behind an allowed name", "http://meta.test:80/latest/meta-data", "denied by: 169.254.0.0/16"},
		{"name resolving to a private address too", "http://mixed.test:80/", "denied by: 10.0.0.0/8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newProxyFixture(t, "meta.test:80", "mixed.test:80")
			u := tt.url
			if strings.Contains(u, "%s") {
				u = fmt.Sprintf(u, f.otherPort)
			}
			code, _, err := f.get(t, u)
			if err == nil && code != http.StatusForbidden {
				t.Fatalf("want 403 or a refused tunnel, got %d", code)
			}
			got := f.sess.Attempts()
			if len(got) != 1 || got[0].Allowed || !strings.Contains(got[0].Reason, tt.reason) {
				t.Fatalf("attempts = %+v, want one denied with %q", got, tt.reason)
			}
			if n := f.dialer.count(); n != 0 {
				t.Fatalf("a denied attempt dialled %d times", n)
			}
		})
	}
}

func TestSession_CloseCutsTunnels(t *testing.T) {
	f := newProxyFixture(t)
	if err := f.sess.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.get(t, "http://api.test:"+f.plainPort+"/"); err == nil {
		t.Fatal("request through a closed session succeeded")
	}
}

func TestNew_RejectsBadUpstream(t *testing.T) {
	if _, err := New(Config{UpstreamProxy: "socks5://x:1"}, Options{}); err == nil || !strings.Contains(err.Error(), "upstream_proxy") {
		t.Fatalf("want an upstream_proxy error, got %v", err)
	}
}

func TestStartRefusesABadAllowListAsTheRunsFault(t *testing.T) {
	p, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Start(filepath.Join(t.TempDir(), "s.sock"), []string{"api.example.com", "*"})
	if !errors.Is(err, sandbox.ErrInvalidEgressAllow) || !strings.Contains(err.Error(), `"*"`) {
		t.Fatalf("got %v, want sandbox.ErrInvalidEgressAllow naming the entry", err)
	}
}
