// Package egress is the per-run egress proxy for network mode "proxy": it
// enforces the decision's allow-list (host glob + port), resolves then dials
// the checked IP, refuses loopback/private/link-local/metadata addresses
// unless the platform opens them, and records every attempt.
package egress

// Config is the egress section of the config file.
type Config struct {
	// AllowCIDRs are private/loopback ranges a platform admin opens on purpose
	// (tests use 127.0.0.1/32). Default none.
	AllowCIDRs []string `yaml:"allow_cidrs" json:"allow_cidrs"`
	// UpstreamProxy chains every allowed connection through this HTTP proxy URL.
	UpstreamProxy string `yaml:"upstream_proxy" json:"upstream_proxy"`
}
