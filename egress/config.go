// Package egress is the per-run egress proxy for network mode "proxy". It
// refuses malformed hosts (ParseHost) before any rule, enforces the
// decision's allow-list (host glob + port) on the canonical host, resolves
// names and dials the checked address through a dialer whose Control hook
// refuses, on the socket address, every special-purpose range
// (code.dny.dev/ssrf) the platform did not open, and records every attempt,
// bounded (sandbox.MaxEgressAttempts, sandbox.ClipEgressString).
package egress

// Config is the egress section of the config file.
type Config struct {
	// AllowCIDRs are private/loopback ranges a platform admin opens on purpose
	// (tests use 127.0.0.1/32). Default none. IPv4 ranges open only their
	// IPv4 addresses (and the IPv4-mapped ::ffff:a.b.c.d a dual-stack
	// lookup may answer for them, which is judged as the IPv4 address it
	// reaches); an IPv6 entry overlapping a range that embeds IPv4
	// addresses (::ffff:0:0/96, ::/96 but ::1/128, NAT64, 6to4, Teredo) is
	// refused by New.
	AllowCIDRs []string `yaml:"allow_cidrs" json:"allow_cidrs"`
	// UpstreamProxy chains every allowed connection through this HTTP
	// proxy URL. Default none: the proxy dials the checked address itself.
	UpstreamProxy string `yaml:"upstream_proxy" json:"upstream_proxy"`
}
