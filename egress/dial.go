package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ErrAddressDenied is wrapped by DialContext's refusals: a malformed host,
// a name that does not resolve, or an address in a range the platform did
// not open.
var ErrAddressDenied = errors.New("egress: address denied")

// DialContext connects to addr ("host:port") for a connection the gateway
// makes on a tenant's behalf (a webhook callback) under the same address
// rules as a run's egress: the host is parsed as a tool's is (ParseHost),
// a name resolved through the proxy's resolver, every address checked,
// and the first dialled through the dialer whose Control hook has the last
// word (or tunnelled through the upstream proxy). There is no allow-list
// here: the caller's policy decided the host. It fits
// http.Transport.DialContext.
func (p *Proxy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	hostStr, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAddressDenied, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %q", ErrAddressDenied, portStr)
	}
	host, err := ParseHost(hostStr)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAddressDenied, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	addrs, err := p.addrs(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("%w: resolving %s failed", ErrAddressDenied, host)
	}
	for _, ip := range addrs {
		if reason := p.ips.check(ip); reason != "" {
			return nil, fmt.Errorf("%w: %s (%s)", ErrAddressDenied, reason, ip)
		}
	}
	target := netip.AddrPortFrom(addrs[0], uint16(port)).String()
	var conn net.Conn
	if p.upstream != nil {
		conn, err = (&Session{p: p}).connectUpstream(ctx, target)
	} else {
		conn, err = p.dial(ctx, "tcp", target)
	}
	var d *addrDeniedError
	if errors.As(err, &d) {
		return nil, fmt.Errorf("%w: %s", ErrAddressDenied, d.reason)
	}
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", target, err)
	}
	return conn, nil
}

// addrs are the addresses host stands for: itself when an IP, else what
// the resolver answers (an error when nothing), IPv4-mapped IPv6 answers
// written as the IPv4 address they reach (a dual-stack lookup of a name
// that /etc/hosts maps to 127.0.0.1 may answer ::ffff:127.0.0.1), so the
// address check, the attempt's record and the dial all see one form.
func (p *Proxy) addrs(ctx context.Context, host Host) ([]netip.Addr, error) {
	if host.IsIP() {
		return []netip.Addr{host.IP()}, nil
	}
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", host.String())
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("no address")
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}
