package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// DialContext (webhook callbacks) keeps a run's address rules: a private
// address, named or literal, is refused unless the platform opened it.
func TestDialContextKeepsTheAddressRules(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	res := fakeResolver{"hooks.test": {netip.MustParseAddr("127.0.0.1")}, "meta.test": {netip.MustParseAddr("169.254.169.254")},
		// What a dual-stack lookup answers for a name /etc/hosts maps to 127.0.0.1.
		"mapped.test": {netip.MustParseAddr("::ffff:127.0.0.1")}}
	closed, err := New(Config{}, Options{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	open, err := New(Config{AllowCIDRs: []string{"127.0.0.1/32"}}, Options{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, addr := range []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), net.JoinHostPort("hooks.test", strconv.Itoa(port)), net.JoinHostPort("mapped.test", strconv.Itoa(port)), "meta.test:80", "[::1]:80", "bad_host!:80"} {
		if _, err := closed.DialContext(ctx, "tcp", addr); !errors.Is(err, ErrAddressDenied) {
			t.Errorf("%s without allow_cidrs: %v, want ErrAddressDenied", addr, err)
		}
	}
	for _, name := range []string{"hooks.test", "mapped.test"} {
		c, err := open.DialContext(ctx, "tcp", net.JoinHostPort(name, strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("%s in an opened range: %v", name, err)
		}
		c.Close()
	}
	if _, err := open.DialContext(ctx, "tcp", "meta.test:80"); !errors.Is(err, ErrAddressDenied) {
		t.Errorf("link-local with 127.0.0.1/32 open: %v", err)
	}
}
