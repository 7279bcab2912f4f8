package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allow-list entry: an exact host or a "*.domain" glob, and a
// port. A rule written without a port allows 443 and 80.
type Rule struct {
	Host  string // lower-case; "*.example.com" matches any subdomain, not example.com itself
	Ports []int
}

// ParseRules parses "host[:port]" and "*.domain[:port]" entries. It rejects
// empty hosts, bare "*", globs other than a leading "*.", and bad ports, naming
// the offending entry.
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
	e = strings.ToLower(strings.TrimSpace(e))
	host, portStr := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		host, portStr = h, p
	}
	if host == "" {
		return Rule{}, fmt.Errorf("empty host")
	}
	if strings.Contains(host, "*") {
		if !strings.HasPrefix(host, "*.") || strings.Contains(host[2:], "*") || len(host) < 4 {
			return Rule{}, fmt.Errorf("only a leading \"*.\" glob is supported")
		}
	}
	r := Rule{Host: strings.TrimSuffix(host, ".")}
	if portStr == "" {
		r.Ports = []int{443, 80}
		return r, nil
	}
	p, err := strconv.Atoi(portStr)
	if err != nil || p < 1 || p > 65535 {
		return Rule{}, fmt.Errorf("bad port %q", portStr)
	}
	r.Ports = []int{p}
	return r, nil
}

// Match reports whether host:port is allowed by any rule. host is compared
// lower-cased without a trailing dot.
func Match(rules []Rule, host string, port int) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, r := range rules {
		if !portIn(r.Ports, port) {
			continue
		}
		if strings.HasPrefix(r.Host, "*.") {
			if strings.HasSuffix(host, r.Host[1:]) && len(host) > len(r.Host)-1 {
				return true
			}
			continue
		}
		if host == r.Host {
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

// deniedPrefixes are never dialled unless a platform admin opens them with
// egress.allow_cidrs: loopback, private, CGNAT, link-local (cloud metadata
// lives at 169.254.169.254), unique-local, multicast, unspecified, and the
// documentation/benchmark ranges that have no business on the Internet.
var deniedPrefixes = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"::/128", "::1/128", "::ffff:0:0/96", "64:ff9b::/96", "100::/64", "2001:db8::/32",
	"fc00::/7", "fe80::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// ipPolicy decides whether an address may be dialled.
type ipPolicy struct {
	allow []netip.Prefix // platform-opened ranges (egress.allow_cidrs)
}

func newIPPolicy(cidrs []string) (ipPolicy, error) {
	var p ipPolicy
	for _, c := range cidrs {
		pr, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return ipPolicy{}, fmt.Errorf("egress.allow_cidrs entry %q: %w", c, err)
		}
		p.allow = append(p.allow, pr.Masked())
	}
	return p, nil
}

// check returns "" when addr may be dialled, else the reason it may not.
func (p ipPolicy) check(addr netip.Addr) string {
	addr = addr.Unmap()
	for _, pr := range p.allow {
		if pr.Contains(addr) {
			return ""
		}
	}
	for _, pr := range deniedPrefixes {
		if pr.Contains(addr) {
			return "address " + addr.String() + " is in a denied range (" + pr.String() + ")"
		}
	}
	return ""
}
