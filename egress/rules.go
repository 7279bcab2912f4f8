package egress

import (
	"fmt"
	"net/netip"
	"strings"

	"code.dny.dev/ssrf"
)

// Rule is one allow-list entry: an exact host (DNS name or IP literal) or a
// "*.domain" glob, and its ports. A rule written without a port allows 443
// and 80. A glob matches names only, never an IP literal.
type Rule struct {
	Host  string // canonical: lower-case name, "*.domain", or the IP literal
	Ports []int
	glob  bool // Host is "*." + a name
}

// ParseRules parses "host[:port]", "[ipv6][:port]" and "*.domain[:port]"
// entries. Each host must pass ParseHost (a glob's domain too); bare "*",
// inner globs and bad ports are refused, naming the offending entry.
func ParseRules(entries []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(entries))
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("egress allow entry %q: %w", e, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func parseRule(e string) (Rule, error) {
	e = strings.TrimSpace(e)
	if e == "" {
		return Rule{}, fmt.Errorf("empty host")
	}
	hostStr, port, err := splitAuthority(e, 0)
	if err != nil {
		return Rule{}, err
	}
	var r Rule
	if strings.Contains(hostStr, "*") {
		if !strings.HasPrefix(hostStr, "*.") || strings.Contains(hostStr[2:], "*") {
			return Rule{}, fmt.Errorf("only a leading \"*.\" glob is supported")
		}
		h, err := ParseHost(hostStr[2:])
		if err != nil {
			return Rule{}, err
		}
		if h.IsIP() {
			return Rule{}, fmt.Errorf("only a leading \"*.\" glob over a DNS name is supported")
		}
		r = Rule{Host: "*." + h.String(), glob: true}
	} else {
		h, err := ParseHost(hostStr)
		if err != nil {
			return Rule{}, err
		}
		r = Rule{Host: h.String()}
	}
	if port == 0 {
		r.Ports = []int{443, 80}
	} else {
		r.Ports = []int{port}
	}
	return r, nil
}

// Match reports whether host:port is allowed by any rule. Names compare
// exactly or by glob suffix; IP literals compare only with IP rules, by
// address.
func Match(rules []Rule, host Host, port int) bool {
	want := host.String()
	for _, r := range rules {
		if !portIn(r.Ports, port) {
			continue
		}
		if r.glob {
			if !host.IsIP() && len(want) > len(r.Host)-1 && strings.HasSuffix(want, r.Host[1:]) {
				return true
			}
			continue
		}
		if want == r.Host {
			return true
		}
	}
	return false
}

func portIn(ports []int, p int) bool {
	for _, x := range ports {
		if x == p {
			return true
		}
	}
	return false
}

// ipPolicy decides whether an address may be dialled. The deny set is
// code.dny.dev/ssrf's, generated from the IANA special-purpose registries:
// every special IPv4 range, and for IPv6 everything outside global unicast
// 2000::/3 (loopback, unspecified, link-local, ULA, multicast, IPv4-mapped
// and -compatible, NAT64) plus the special ranges inside it (6to4, Teredo,
// documentation, ...). Ranges opened with egress.allow_cidrs come first.
type ipPolicy struct {
	guard *ssrf.Guardian
}

// embeddedV4 are the IPv6 ranges whose addresses carry an IPv4 address
// (mapped, compatible, NAT64, local-use NAT64, 6to4, Teredo). An
// egress.allow_cidrs IPv6 entry may not overlap them: opening one would open
// IPv4 ranges under another spelling. Open IPv4 ranges as IPv4.
var embeddedV4 = []netip.Prefix{
	netip.MustParsePrefix("::ffff:0:0/96"),
	netip.MustParsePrefix("::/96"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
}

var ipv6Loopback = netip.MustParsePrefix("::1/128")

func newIPPolicy(cidrs []string) (ipPolicy, error) {
	var v4, v6 []netip.Prefix
	for _, c := range cidrs {
		pr, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return ipPolicy{}, fmt.Errorf("egress.allow_cidrs entry %q: %w", c, err)
		}
		pr = pr.Masked()
		if pr.Addr().Is4() {
			v4 = append(v4, pr)
			continue
		}
		if pr != ipv6Loopback {
			for _, e := range embeddedV4 {
				if pr.Overlaps(e) {
					return ipPolicy{}, fmt.Errorf("egress.allow_cidrs entry %q overlaps %s, where IPv6 addresses carry IPv4 ones; open IPv4 ranges as IPv4", c, e)
				}
			}
		}
		v6 = append(v6, pr)
	}
	return ipPolicy{guard: ssrf.New(
		ssrf.WithAnyPort(), // ports are the allow-list's business
		ssrf.WithAllowedV4Prefixes(v4...),
		ssrf.WithAllowedV6Prefixes(v6...),
	)}, nil
}

// check returns "" when addr may be dialled, else the reason it may not. An
// IPv4-mapped address (::ffff:a.b.c.d) is judged as the IPv4 address it
// reaches (a socket given one connects over IPv4), so a mapped spelling
// neither escapes the IPv4 rules nor misses a range allow_cidrs opened;
// the other IPv6 forms that embed IPv4 addresses stay IPv6 (denied unless
// an IPv6 range opens them, which newIPPolicy refuses). A zoned address is
// always denied.
func (p ipPolicy) check(addr netip.Addr) string {
	if addr.Zone() != "" {
		return "address with an IPv6 zone"
	}
	addr = addr.Unmap()
	if err := p.guard.SafeAddr(addr); err != nil {
		return err.Error()
	}
	return ""
}
