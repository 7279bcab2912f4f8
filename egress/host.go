package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Host is a destination host as the proxy decides on it: either a DNS name
// (lower-case ASCII letters, digits and hyphens in dot-separated labels, no
// trailing dot) or an IP literal, never both. Only ParseHost makes one, so a
// Host is always one of the two well-formed shapes.
type Host struct {
	name string     // "" for an IP literal
	ip   netip.Addr // invalid for a name
}

// IsIP reports whether h is an IP literal.
func (h Host) IsIP() bool { return h.ip.IsValid() }

// IP returns the literal address, or the zero Addr for a name.
func (h Host) IP() netip.Addr { return h.ip }

// String is the canonical spelling: the name, or the address.
func (h Host) String() string {
	if h.IsIP() {
		return h.ip.String()
	}
	return h.name
}

// maxNameBytes is the longest DNS name in presentation form (RFC 1035 §2.3.4:
// 255 octets on the wire, 253 characters written out without the final dot).
const maxNameBytes = 253

// ErrBadHost is wrapped by every ParseHost and splitAuthority error; the
// message is the reason and never quotes the host itself (which may be
// huge), only at most one offending character.
var ErrBadHost = errors.New("bad host")

func badHost(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadHost, fmt.Sprintf(format, args...))
}

// ParseHost checks s, a host as written in a CONNECT target or URL authority
// without its port, and returns it canonical. It accepts exactly:
//
//   - a DNS name: ASCII labels of 1–63 letters, digits and inner hyphens,
//     at most 253 bytes, one optional trailing dot, any case (lower-cased),
//     and a last label that starts with a letter, so numeric spellings of
//     IPv4 addresses ("2130706433", "0x7f.1", "127.1") are not names;
//     internationalised names must be written in punycode ("xn--…");
//   - a dotted-decimal IPv4 address ("127.0.0.1"; no leading zeros);
//   - an IPv6 address in brackets ("[2001:db8::1]"), without a zone, and not
//     an IPv4-mapped address (write the IPv4 address instead).
//
// Everything else is refused before any rule is consulted: zones, percent
// escapes, userinfo, spaces, empty labels, non-ASCII, over-long input.
func ParseHost(s string) (Host, error) {
	switch {
	case s == "":
		return Host{}, badHost("empty host")
	case len(s) > maxNameBytes+1:
		return Host{}, badHost("host is %d bytes, over the %d of a DNS name", len(s), maxNameBytes)
	}
	if s[0] == '[' {
		if s[len(s)-1] != ']' {
			return Host{}, badHost("IPv6 literal without a closing bracket")
		}
		inner := s[1 : len(s)-1]
		if strings.ContainsAny(inner, "%") {
			return Host{}, badHost("IPv6 literal with a zone or percent escape")
		}
		ip, err := netip.ParseAddr(inner)
		if err != nil || !ip.Is6() {
			return Host{}, badHost("not an IPv6 literal inside brackets")
		}
		if ip.Is4In6() {
			return Host{}, badHost("IPv4-mapped IPv6 literal (write the IPv4 address)")
		}
		return Host{ip: ip}, nil
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isLDH(c) && c != '.' {
			return Host{}, badHost("character %s is not allowed in a host (IDN names must be punycode, IPv6 literals bracketed)", describeByte(c))
		}
	}
	if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
		return Host{ip: ip}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(s, "."))
	if name == "" {
		return Host{}, badHost("empty host")
	}
	if len(name) > maxNameBytes {
		return Host{}, badHost("host is %d bytes, over the %d of a DNS name", len(name), maxNameBytes)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return Host{}, badHost("empty label")
		case len(l) > 63:
			return Host{}, badHost("label of %d bytes, over 63", len(l))
		case l[0] == '-' || l[len(l)-1] == '-':
			return Host{}, badHost("label starts or ends with a hyphen")
		}
	}
	if last := labels[len(labels)-1]; last[0] < 'a' || last[0] > 'z' {
		return Host{}, badHost("last label does not start with a letter (numeric IPv4 spellings other than dotted decimal are not hosts)")
	}
	return Host{name: name}, nil
}

func isLDH(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// describeByte names one byte for a reason: quoted when printable, in hex
// otherwise.
func describeByte(c byte) string {
	if c > 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf("0x%02x", c)
}

// splitAuthority splits "host[:port]" as a proxy request carries it
// (CONNECT target or absolute URL authority) into the host, brackets kept for
// IPv6, and the port (defPort when none is written). Unlike net.SplitHostPort
// it keeps brackets, refuses userinfo and accepts only 1–5 decimal digits in
// 1..65535 as a port.
func splitAuthority(a string, defPort int) (host string, port int, err error) {
	if len(a) > maxNameBytes+8 { // "[" host "]:" 5 digits
		return "", 0, badHost("authority is %d bytes, over the %d of a host and port", len(a), maxNameBytes+8)
	}
	if strings.Contains(a, "@") {
		return "", 0, badHost("userinfo (\"@\") in the authority")
	}
	host, portStr := a, ""
	if strings.HasPrefix(a, "[") {
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, badHost("IPv6 literal without a closing bracket")
		}
		host, portStr = a[:end+1], a[end+1:]
		if portStr != "" {
			if portStr[0] != ':' {
				return "", 0, badHost("junk after the IPv6 literal")
			}
			portStr = portStr[1:]
			if portStr == "" {
				return "", 0, badHost("empty port")
			}
		}
	} else if i := strings.LastIndexByte(a, ':'); i >= 0 {
		if strings.IndexByte(a, ':') != i {
			return "", 0, badHost("IPv6 literal without brackets")
		}
		host, portStr = a[:i], a[i+1:]
		if portStr == "" {
			return "", 0, badHost("empty port")
		}
	}
	if portStr == "" {
		return host, defPort, nil
	}
	port, err = parsePort(portStr)
	return host, port, err
}

// parsePort accepts 1–5 decimal digits with a value in 1..65535 (no sign, no
// spaces, no hex).
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, badHost("port is not 1 to 5 decimal digits")
	}
	p := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, badHost("port is not 1 to 5 decimal digits")
		}
		p = p*10 + int(c-'0')
	}
	if p < 1 || p > 65535 {
		return 0, badHost("port %d is not in 1..65535", p)
	}
	return p, nil
}
