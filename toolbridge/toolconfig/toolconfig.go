// Package toolconfig is the configuration of a tenant's MCP tool servers
// (tenants[].tools, DESIGN §14), read by tenancy and used by toolbridge.
package toolconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"
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
	// of URL and Command. Default none.
	URL string `yaml:"url" json:"url,omitempty"`
	// Command starts a stdio MCP server (argv, absolute path first),
	// launched by the gateway on first use and relaunched after it dies.
	// It runs as the gateway's user with the working directory / and an
	// environment of PATH and Env only (nothing of the gateway's). Default
	// none.
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
	// File is the path of a file of the gateway holding the value (one
	// trailing newline trimmed). Default none: Env.
	File string `yaml:"file" json:"file,omitempty"`
	// Env is the name of an environment variable of the gateway holding
	// the value. Default none: File.
	Env string `yaml:"env" json:"env,omitempty"`
}

// ErrSecretUnset is matched (errors.Is) by Secret.Read's error for a
// variable that is empty or unset: a secret is never the empty string.
var ErrSecretUnset = errors.New("empty or unset")

// Read reads the value s refers to, at most max bytes (max <= 0: no
// bound): the file's bytes with one trailing newline trimmed, or the
// variable's value (getenv reads the gateway's environment). It is the one
// reader of secret references: tool servers' headers and env, webhook
// secrets and tenants' brokered secrets all go through it, at each use, so
// a rotated file is picked up. The file must be a regular file (a FIFO or
// device is refused without blocking). The error never holds the value;
// an empty value is an error, never a secret.
func (s Secret) Read(getenv func(string) string, max int64) (string, error) {
	var v string
	switch {
	case s.File != "":
		b, err := readSecretFile(s.File, max)
		if err != nil {
			return "", err
		}
		v = strings.TrimSuffix(string(b), "\n")
	case s.Env != "":
		v = getenv(s.Env)
		if v == "" {
			return "", fmt.Errorf("environment variable %s is %w", s.Env, ErrSecretUnset)
		}
		if max > 0 && int64(len(v)) > max {
			return "", fmt.Errorf("environment variable %s holds %d bytes, over the %d-byte bound", s.Env, len(v), max)
		}
	default:
		return "", errors.New("the reference names neither a file nor an environment variable")
	}
	if v == "" {
		return "", fmt.Errorf("the secret file %s is empty", s.File)
	}
	return v, nil
}

// readSecretFile reads path, a regular file of at most max bytes (max <=
// 0: no bound), without blocking on a FIFO.
func readSecretFile(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the secret file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the secret file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the secret file %s is not a regular file", path)
	}
	var r io.Reader = f
	if max > 0 {
		// One trailing newline is not part of the value.
		r = io.LimitReader(f, max+2)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the secret file: %w", err)
	}
	if max > 0 && int64(len(strings.TrimSuffix(string(b), "\n"))) > max {
		return nil, fmt.Errorf("the secret file %s holds more than %d bytes", path, max)
	}
	return b, nil
}

// Limits bound one run's tool calls.
type Limits struct {
	// MaxCalls is the most calls (run requests, allowed or not) per run.
	// Default 64.
	MaxCalls int `yaml:"max_calls" json:"max_calls"`
	// MaxConcurrent is the most calls in flight at once per run. Default 4.
	MaxConcurrent int `yaml:"max_concurrent" json:"max_concurrent"`
	// MaxLookups is the most search and describe requests per run
	// (answered or not; later ones are denied). They are not calls:
	// MaxCalls does not count them. Default 128.
	MaxLookups int `yaml:"max_lookups" json:"max_lookups"`
	// MaxArgsBytes bounds one call's JSON arguments. Default 256 KiB.
	MaxArgsBytes int64 `yaml:"max_args_bytes" json:"max_args_bytes"`
	// MaxBytesIn bounds the arguments of all calls of a run together.
	// Default 1 MiB.
	MaxBytesIn int64 `yaml:"max_bytes_in" json:"max_bytes_in"`
	// MaxBytesOut bounds the results of all calls of a run together.
	// Default 8 MiB.
	MaxBytesOut int64 `yaml:"max_bytes_out" json:"max_bytes_out"`
}

// DefaultLimits are used for Limits fields left zero.
var DefaultLimits = Limits{
	MaxCalls:      64,
	MaxConcurrent: 4,
	MaxLookups:    128,
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
	if l.MaxLookups > 0 {
		d.MaxLookups = l.MaxLookups
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
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s.name: duplicate server %q", at, s.Name))
		}
		seen[s.Name] = true
		errs = append(errs, s.validate(at+".")...)
	}
	l := c.Limits
	if l.MaxCalls < 0 || l.MaxConcurrent < 0 || l.MaxLookups < 0 || l.MaxArgsBytes < 0 || l.MaxBytesIn < 0 || l.MaxBytesOut < 0 {
		errs = append(errs, errors.New("limits: negative value"))
	}
	return errors.Join(errs...)
}

// validate checks one server; at prefixes the field names ("servers[0]."
// in a config, "" over the API).
func (s Server) validate(at string) []error {
	var errs []error
	if !serverNameRE.MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("%sname: %q must be lower-case letters, digits, '_' or '-' (no dots)", at, s.Name))
	}
	switch {
	case (s.URL == "") == (len(s.Command) == 0):
		errs = append(errs, fmt.Errorf("%surl: set exactly one of url (streamable HTTP) and command (stdio)", at))
	case len(s.Command) > 0:
		if !path.IsAbs(s.Command[0]) {
			errs = append(errs, fmt.Errorf("%scommand: the program must be an absolute path", at))
		}
		if len(s.Headers) > 0 {
			errs = append(errs, fmt.Errorf("%sheaders: a command server takes env, not headers", at))
		}
	default:
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%surl: must be an http(s) URL", at))
		} else if u.User != nil {
			errs = append(errs, fmt.Errorf("%surl: must not carry credentials; use headers with a secret file or env", at))
		}
		if len(s.Env) > 0 {
			errs = append(errs, fmt.Errorf("%senv: only a command server takes env", at))
		}
	}
	for name, sec := range s.Env {
		if !envNameRE.MatchString(name) {
			errs = append(errs, fmt.Errorf("%senv: %q is not a variable name", at, name))
		}
		if (sec.File == "") == (sec.Env == "") {
			errs = append(errs, fmt.Errorf("%senv.%s: set exactly one of file or env", at, name))
		}
	}
	for name, sec := range s.Headers {
		if !headerNameRE.MatchString(name) {
			errs = append(errs, fmt.Errorf("%sheaders: %q is not a header name", at, name))
		}
		if (sec.File == "") == (sec.Env == "") {
			errs = append(errs, fmt.Errorf("%sheaders.%s: set exactly one of file or env", at, name))
		}
	}
	for _, g := range s.Allow {
		if _, err := path.Match(g, ""); err != nil {
			errs = append(errs, fmt.Errorf("%sallow: bad glob %q", at, g))
		}
	}
	if s.TimeoutMS < 0 || s.MaxResultBytes < 0 || s.ToolsTTLMS < 0 {
		errs = append(errs, fmt.Errorf("%stimeout_ms: negative timeout_ms, max_result_bytes or tools_ttl_ms", at))
	}
	if s.MaxResultBytes > MaxResultBytesCap {
		errs = append(errs, fmt.Errorf("%smax_result_bytes: at most %d", at, MaxResultBytesCap))
	}
	return errs
}

// Bounds of a server added over the admin API (PUT
// /v1/admin/tenants/{id}/tools/servers/{name}): they keep what every
// replica stores and holds per tenant small.
const (
	MaxAPIServers     = 32        // API servers per tenant
	MaxURLBytes       = 2048      // url
	MaxHeaders        = 16        // headers per server
	MaxSecretRefBytes = 1024      // a header's file path
	MaxAllowGlobs     = 64        // allow entries
	MaxGlobBytes      = 256       // one allow entry
	MaxTimeoutMS      = 300_000   // timeout_ms
	MaxToolsTTLMS     = 86400_000 // tools_ttl_ms
)

// ValidateAPIName checks a server name given in an API path.
func ValidateAPIName(name string) error {
	if !serverNameRE.MatchString(name) {
		return errors.New("must be 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit")
	}
	return nil
}

// ValidateRef checks the shape of a reference that reaches beyond the
// config file's author (a header of a server added over the admin API, a
// tenant's brokered secret): a clean absolute path of at most
// MaxSecretRefBytes, or a variable name. Errors start with the field
// ("file: ...", "env: ...").
func (s Secret) ValidateRef() error {
	var errs []error
	if len(s.File) > MaxSecretRefBytes {
		errs = append(errs, fmt.Errorf("file: longer than %d bytes", MaxSecretRefBytes))
	}
	if s.File != "" && (!path.IsAbs(s.File) || path.Clean(s.File) != s.File) {
		errs = append(errs, errors.New("file: must be a clean absolute path"))
	}
	if s.Env != "" && !envNameRE.MatchString(s.Env) {
		errs = append(errs, errors.New("env: not a variable name"))
	}
	return errors.Join(errs...)
}

// ValidateAPI checks a server given over the admin API: the config's rules,
// and stricter ones. Only streamable HTTP servers (an API caller must never
// make the gateway launch a program) whose header values are secret
// references (file or env of the gateway, never a literal), within the
// size bounds above. Errors name the field of the request body.
func (s Server) ValidateAPI() error {
	var errs []error
	if len(s.Command) > 0 {
		errs = append(errs, errors.New("command: stdio servers are config-only; the API takes a url"))
	}
	if len(s.Env) > 0 {
		errs = append(errs, errors.New("env: stdio servers are config-only; the API takes a url"))
	}
	if errs != nil {
		return errors.Join(errs...)
	}
	errs = s.validate("")
	if len(s.URL) > MaxURLBytes {
		errs = append(errs, fmt.Errorf("url: longer than %d bytes", MaxURLBytes))
	}
	if len(s.Headers) > MaxHeaders {
		errs = append(errs, fmt.Errorf("headers: %d headers; at most %d", len(s.Headers), MaxHeaders))
	}
	for name, sec := range s.Headers {
		if err := sec.ValidateRef(); err != nil {
			errs = append(errs, fmt.Errorf("headers.%s.%w", name, err))
		}
	}
	if len(s.Allow) > MaxAllowGlobs {
		errs = append(errs, fmt.Errorf("allow: %d globs; at most %d", len(s.Allow), MaxAllowGlobs))
	}
	for i, g := range s.Allow {
		if len(g) > MaxGlobBytes || g == "" {
			errs = append(errs, fmt.Errorf("allow[%d]: must be 1 to %d bytes", i, MaxGlobBytes))
		}
	}
	if s.TimeoutMS > MaxTimeoutMS {
		errs = append(errs, fmt.Errorf("timeout_ms: at most %d", MaxTimeoutMS))
	}
	if s.ToolsTTLMS > MaxToolsTTLMS {
		errs = append(errs, fmt.Errorf("tools_ttl_ms: at most %d", MaxToolsTTLMS))
	}
	return errors.Join(errs...)
}

// APIScope bounds where the header secrets of servers added over the admin
// API may be read from (tools_api in the config file): without it a
// platform admin could point a header at any file or variable the gateway
// can read (its signing key, the Redis password) and a url of their
// choosing. Config-file servers are not bound by it.
type APIScope struct {
	// SecretDirs: a header's file reference must lie below one of these
	// directories. Default [/run/secrets].
	SecretDirs []string `yaml:"secret_dirs" json:"secret_dirs"`
	// EnvPrefixes: a header's env reference must start with one of these
	// (and be longer). Default [TOOL_SECRET_].
	EnvPrefixes []string `yaml:"env_prefixes" json:"env_prefixes"`
}

// Default API secret scope.
var (
	DefaultAPISecretDirs  = []string{"/run/secrets"}
	DefaultAPIEnvPrefixes = []string{"TOOL_SECRET_"}
)

// WithDefaults fills empty lists with the defaults.
func (sc APIScope) WithDefaults() APIScope {
	if len(sc.SecretDirs) == 0 {
		sc.SecretDirs = DefaultAPISecretDirs
	}
	if len(sc.EnvPrefixes) == 0 {
		sc.EnvPrefixes = DefaultAPIEnvPrefixes
	}
	return sc
}

// Validate checks the scope (before WithDefaults); errors name the key.
func (sc APIScope) Validate() error {
	var errs []error
	for i, d := range sc.SecretDirs {
		if !path.IsAbs(d) || path.Clean(d) != d || d == "/" {
			errs = append(errs, fmt.Errorf("tools_api.secret_dirs[%d]: %q must be a clean absolute directory other than /", i, d))
		}
	}
	for i, p := range sc.EnvPrefixes {
		if p == "" || !envNameRE.MatchString(p) {
			errs = append(errs, fmt.Errorf("tools_api.env_prefixes[%d]: %q must be the start of a variable name", i, p))
		}
	}
	return errors.Join(errs...)
}

// Check refuses header references of s outside the scope (after
// WithDefaults); errors name the field of the request body.
func (sc APIScope) Check(s Server) error {
	var errs []error
	for name, sec := range s.Headers {
		if err := sc.CheckRef(sec); err != nil {
			errs = append(errs, fmt.Errorf("headers.%s.%w", name, err))
		}
	}
	return errors.Join(errs...)
}

// CheckRef refuses a reference outside the scope (after WithDefaults): a
// file not below one of SecretDirs, a variable not starting with one of
// EnvPrefixes. Errors start with the field ("file: ...", "env: ...").
func (sc APIScope) CheckRef(sec Secret) error {
	switch {
	case sec.File != "":
		for _, d := range sc.SecretDirs {
			if strings.HasPrefix(sec.File, strings.TrimSuffix(d, "/")+"/") {
				return nil
			}
		}
		return fmt.Errorf("file: must lie below one of tools_api.secret_dirs (%s)", strings.Join(sc.SecretDirs, ", "))
	case sec.Env != "":
		for _, p := range sc.EnvPrefixes {
			if strings.HasPrefix(sec.Env, p) && len(sec.Env) > len(p) {
				return nil
			}
		}
		return fmt.Errorf("env: must start with one of tools_api.env_prefixes (%s)", strings.Join(sc.EnvPrefixes, ", "))
	}
	return nil
}
