package egress

import (
	"strings"
	"testing"
)

// Whatever the input, a host ParseHost accepts is one of its two shapes, in
// canonical form: a name that re-parses to itself and carries nothing but
// lower-case LDH labels, or an IP literal without a zone that is not an
// IPv4-mapped address. The seeds are the spellings of issue #10.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{
		"api.example.com", "API.Example.COM.", "xn--bcher-kva.example", "[::1%25.example.com]", "[fe80::1%eth0]",
		"api%2eexample.com", "a@b", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "127.1", "127.0.0.1", "127.0.0.1.",
		"[::ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "::1", "[::1]x", "bücher.example",
		"-a.example", "a..b", strings.Repeat("a", 64) + ".example", strings.Repeat("a.", 127) + "b", "", ".", "[", "[]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			if len(err.Error()) > 200 {
				t.Fatalf("reason of %d bytes (must not quote the host): %.80q", len(err.Error()), err.Error())
			}
			return
		}
		c := h.String()
		if h.IsIP() {
			ip := h.IP()
			if ip.Zone() != "" || ip.Is4In6() {
				t.Fatalf("%q accepted as %v", s, ip)
			}
			return
		}
		if c == "" || len(c) > maxNameBytes || strings.Trim(c, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" ||
			strings.HasSuffix(c, ".") || c[len(c)-1] == '-' {
			t.Fatalf("%q accepted as name %q", s, c)
		}
		again, err := ParseHost(c)
		if err != nil || again != h {
			t.Fatalf("canonical %q of %q does not re-parse to itself: %v %v", c, s, again, err)
		}
	})
}
