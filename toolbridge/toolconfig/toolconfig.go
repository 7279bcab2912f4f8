// Package toolconfig is the configuration of a tenant's MCP tool servers
// (tenants[].tools, DESIGN §14), read by tenancy and used by toolbridge.
package toolconfig

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
)

// Config is one tenant's tools section (tenants[].tools).
type Config struct {
	// Servers are the tenant's MCP tool servers.
	Servers []Server `yaml:"servers" json:"servers"`
	// Limits bound each run's tool calls; zero fields take DefaultLimits.
	Limits Limits `yaml:"limits" json:"limits"`
	// RecordArgs puts each call's arguments into the audit record (default
	// false: only their size and SHA-256 digest).
	RecordArgs bool `yaml:"record_args" json:"record_args"`
}

// Server is one MCP tool server of a tenant.
type Server struct {
	// Name prefixes the server's tools ("<name>.<tool>"): lower-case
	// letters, digits, '_' and '-'. Required, unique per tenant.
	Name string `yaml:"name" json:"name"`
	// URL is the MCP streamable HTTP endpoint (http or https). Exactly one
	// of URL and Command.
	URL string `yaml:"url" json:"url,omitempty"`
	// Command starts a stdio MCP server (argv, absolute path first),
	// launched by the gateway on first use and relaunched after it dies.
	// It runs as the gateway's user with the working directory / and an
	// environment of PATH and Env only (nothing of the gateway's).
	Command []string `yaml:"command" json:"command,omitempty"`
	// Env is the environment of a Command server, each value read like a
	// header's (secret file or variable of the gateway).
	Env map[string]Secret `yaml:"env" json:"env,omitempty"`
	// Headers are sent on every request to the server; each value is read
	// from a file or an environment variable of the gateway at start-up.
	Headers map[string]Secret `yaml:"headers" json:"headers,omitempty"`
	// Allow are globs over the server's tool names (`*`, `?`, `[...]`)
	// that may be offered at all. Default ["*"].
	Allow []string `yaml:"allow" json:"allow,omitempty"`
	// TimeoutMS bounds one call (and one connection attempt), ms. Default
	// 10000.
	TimeoutMS int64 `yaml:"timeout_ms" json:"timeout_ms,omitempty"`
	// MaxResultBytes bounds one call's result as received, bytes. Default
	// 1 MiB; at most 8 MiB (the bridge's answer cap).
	MaxResultBytes int64 `yaml:"max_result_bytes" json:"max_result_bytes,omitempty"`
	// ToolsTTLMS is how long the server's tool list is cached, ms. Default
	// 60000; a tools/list_changed notification drops it earlier.
	ToolsTTLMS int64 `yaml:"tools_ttl_ms" json:"tools_ttl_ms,omitempty"`
}

// Secret names where a header value comes from: exactly one of File (the
// file's bytes, one trailing newline trimmed) or Env (an environment
// variable of the gateway).
type Secret struct {
	File string `yaml:"file" json:"file,omitempty"`
	Env  string `yaml:"env" json:"env,omitempty"`
}

// Limits bound one run's tool calls.
type Limits struct {
	// MaxCalls is the most calls (run requests, allowed or not) per run.
	MaxCalls int `yaml:"max_calls" json:"max_calls"`
	// MaxConcurrent is the most calls in flight at once per run.
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// MaxArgsBytes bounds one call's JSON arguments.
	MaxArgsBytes int64 `yaml:"max_args_bytes" json:"max_args_bytes"`
	// MaxBytesIn bounds the arguments of all calls of a run together.
	MaxBytesIn int64 `yaml:"max_bytes_in" json:"max_bytes_in"`
	// MaxBytesOut bounds the results of all calls of a run together.
	MaxBytesOut int64 `yaml:"max_bytes_out" json:"max_bytes_out"`
}

// DefaultLimits are used for Limits fields left zero.
var DefaultLimits = Limits{
	MaxCalls:      64,
	MaxConcurrent: 4,
	MaxArgsBytes:  256 << 10,
	MaxBytesIn:    1 << 20,
	MaxBytesOut:   8 << 20,
}

// Server defaults and caps.
const (
	DefaultTimeoutMS      = 10000
	DefaultMaxResultBytes = 1 << 20
	MaxResultBytesCap     = 8 << 20
	DefaultToolsTTLMS     = 60000
)

// WithDefaults returns l with zero fields replaced by DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	if l.MaxCalls > 0 {
		d.MaxCalls = l.MaxCalls
	}
	if l.MaxConcurrent > 0 {
		d.MaxConcurrent = l.MaxConcurrent
	}
	if l.MaxArgsBytes > 0 {
		d.MaxArgsBytes = l.MaxArgsBytes
	}
	if l.MaxBytesIn > 0 {
		d.MaxBytesIn = l.MaxBytesIn
	}
	if l.MaxBytesOut > 0 {
		d.MaxBytesOut = l.MaxBytesOut
	}
	return d
}

// WithDefaults returns s with its defaults applied.
func (s Server) WithDefaults() Server {
	if len(s.Allow) == 0 {
		s.Allow = []string{"*"}
	}
	if s.TimeoutMS <= 0 {
		s.TimeoutMS = DefaultTimeoutMS
	}
	if s.MaxResultBytes <= 0 {
		s.MaxResultBytes = DefaultMaxResultBytes
	}
	if s.ToolsTTLMS <= 0 {
		s.ToolsTTLMS = DefaultToolsTTLMS
	}
	return s
}

var (
	serverNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// Validate checks c; errors name the key below tools.
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range c.Servers {
		at := fmt.Sprintf("servers[%d]", i)
		if !serverNameRE.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("%s.name: %q must be lower-case letters, digits, '_' or '-' (no dots)", at, s.Name))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s.name: duplicate server %q", at, s.Name))
		}
		seen[s.Name] = true
		switch {
		case (s.URL == "") == (len(s.Command) == 0):
			errs = append(errs, fmt.Errorf("%s: set exactly one of url (streamable HTTP) and command (stdio)", at))
		case len(s.Command) > 0:
			if !path.IsAbs(s.Command[0]) {
				errs = append(errs, fmt.Errorf("%s.command: the program must be an absolute path", at))
			}
			if len(s.Headers) > 0 {
				errs = append(errs, fmt.Errorf("%s.headers: a command server takes env, not headers", at))
			}
		default:
			if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("%s.url: must be an http(s) URL", at))
			} else if u.User != nil {
				errs = append(errs, fmt.Errorf("%s.url: must not carry credentials; use headers with a secret file or env", at))
			}
			if len(s.Env) > 0 {
				errs = append(errs, fmt.Errorf("%s.env: only a command server takes env", at))
			}
		}
		for name, sec := range s.Env {
			if !envNameRE.MatchString(name) {
				errs = append(errs, fmt.Errorf("%s.env: %q is not a variable name", at, name))
			}
			if (sec.File == "") == (sec.Env == "") {
				errs = append(errs, fmt.Errorf("%s.env.%s: set exactly one of file or env", at, name))
			}
		}
		for name, sec := range s.Headers {
			if !headerNameRE.MatchString(name) {
				errs = append(errs, fmt.Errorf("%s.headers: %q is not a header name", at, name))
			}
			if (sec.File == "") == (sec.Env == "") {
				errs = append(errs, fmt.Errorf("%s.headers.%s: set exactly one of file or env", at, name))
			}
		}
		for _, g := range s.Allow {
			if _, err := path.Match(g, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s.allow: bad glob %q", at, g))
			}
		}
		if s.TimeoutMS < 0 || s.MaxResultBytes < 0 || s.ToolsTTLMS < 0 {
			errs = append(errs, fmt.Errorf("%s: negative timeout_ms, max_result_bytes or tools_ttl_ms", at))
		}
		if s.MaxResultBytes > MaxResultBytesCap {
			errs = append(errs, fmt.Errorf("%s.max_result_bytes: at most %d", at, MaxResultBytesCap))
		}
	}
	l := c.Limits
	if l.MaxCalls < 0 || l.MaxConcurrent < 0 || l.MaxArgsBytes < 0 || l.MaxBytesIn < 0 || l.MaxBytesOut < 0 {
		errs = append(errs, errors.New("limits: negative value"))
	}
	return errors.Join(errs...)
}
