// Package config composes every package's Config into the one execgate config
// file (DESIGN §13): strict YAML (unknown keys are errors), every key
// overridable by an EXECGATE_… environment variable, defaults in one place,
// and a redacted print of the effective result.
//
// Environment variables are named after the YAML path, upper-cased and joined
// with underscores: quota.redis_url → EXECGATE_QUOTA_REDIS_URL, listen →
// EXECGATE_LISTEN. Lists take comma-separated values or a JSON array; structs
// and lists of structs (tenants) take JSON. EnvNames lists them all.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/dispatch"
	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Config is the whole execgate configuration.
//
// How to add a key:
//  1. Add the field to the owning package's Config with a yaml tag and a
//     comment giving unit, default and what zero means.
//  2. Set its default in Defaults (or in the package's own defaulting).
//  3. Check it in Validate if a bad value must stop start-up.
//  4. Add it to deploy/examples/config.yaml and the Helm values.
type Config struct {
	// Listen is the HTTP listen address. Default 127.0.0.1:8010.
	Listen string `yaml:"listen" json:"listen"`
	// StateDir holds the rootfs, dev key, deps cache and audit log.
	// Default /var/lib/execgate as root, else ~/.local/state/execgate.
	StateDir string `yaml:"state_dir" json:"state_dir"`

	// Server is the HTTP edge and the execute flow's local bounds: body
	// and connection limits, run slots and queue, idempotency, async runs.
	Server gateway.Config `yaml:"server" json:"server"`
	// Auth says how bearer tokens are verified (DESIGN §5).
	Auth auth.Config `yaml:"auth" json:"auth"`
	// Sandbox is nsjail, the rootfs, cgroups, warm jails, zygotes and
	// package environments.
	Sandbox sandbox.Config `yaml:"sandbox" json:"sandbox"`
	// Egress is the platform's side of network mode proxy: ranges opened
	// on purpose and an upstream proxy.
	Egress egress.Config `yaml:"egress" json:"egress"`
	// Quota is the quota backend (memory or Redis) and the default quota
	// of tenants that give none.
	Quota quota.Config `yaml:"quota" json:"quota"`
	// Policy adds Rego to the embedded default policies: directories or an
	// OPA bundle server.
	Policy policy.Config `yaml:"policy" json:"policy"`
	// Audit is where the audit records go.
	Audit audit.Config `yaml:"audit" json:"audit"`
	// Telemetry is traces, metrics and logs.
	Telemetry telemetry.Config `yaml:"telemetry" json:"telemetry"`
	// Tenants are the configured tenants; a token of any other tenant is
	// refused on every route. Default: the embedded default's one tenant
	// demo when no config file is given, else none.
	Tenants []tenancy.Tenant `yaml:"tenants" json:"tenants"`
	// Dispatch joins gateways and executors (server.role gateway or
	// executor); unused with role all.
	Dispatch dispatch.Config `yaml:"dispatch" json:"dispatch"`
	// ToolsAPI bounds the secret references of tool servers added over
	// the admin API and of tenants' brokered secrets (tenants[].secrets)
	// (toolconfig.APIScope).
	ToolsAPI toolconfig.APIScope `yaml:"tools_api" json:"tools_api"`

	// Embedded is true when no config file was given (DESIGN §9).
	Embedded bool `yaml:"-" json:"-"`
}

// DefaultStateDir is where state lives when neither flag nor config says.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/execgate"
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".local", "state", "execgate")
	}
	return filepath.Join(os.TempDir(), "execgate")
}

// Defaults returns the safe defaults: loopback listen, memory quotas,
// network none, limits on.
func Defaults() Config {
	return Config{
		Listen: "127.0.0.1:8010",
		Auth:   auth.Config{Issuer: "execgate", Audience: "execgate", LeewaySeconds: 30},
		Sandbox: sandbox.Config{
			PythonPath:  "/usr/bin/python3",
			Cgroups:     "auto",
			KillGraceMS: 1000,
		},
		Quota: quota.Config{
			Backend:      "memory",
			KeyPrefix:    "execgate",
			RateFailMode: "closed",
			LeaseTTLMS:   15000,
			Defaults:     quota.Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4, DailyCPUSeconds: 3600},
		},
		Audit:     audit.Config{Sinks: []string{"file"}, MaxSizeMB: 100, MaxBackups: 10},
		Telemetry: telemetry.Config{ServiceName: "execgate", MaxTenantLabels: 100, LogFormat: "json", LogLevel: "info"},
	}
}

// DemoTenant is the embedded default's one tenant: network none only.
func DemoTenant() tenancy.Tenant {
	return tenancy.Tenant{
		ID:    "demo",
		Plan:  "standard",
		Quota: quota.Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4, DailyCPUSeconds: 3600},
		Policy: map[string]any{
			"network":      []any{"none"},
			"egress_allow": []any{},
			"packages":     map[string]any{"allow": []any{}, "deny": []any{}},
			"max_limits":   map[string]any{"timeout_ms": 30000, "memory_mb": 512},
			"tools":        []any{},
			"isolation":    []any{"jail"},
			"runtimes":     []any{"python3.11", "python3.13"},
		},
	}
}

// Load reads the config file at path (empty: the embedded default), applies
// EXECGATE_… overrides from environ, fills derived defaults and validates.
func Load(path string, environ []string) (*Config, error) {
	cfg := Defaults()
	if path == "" {
		cfg.Embedded = true
		cfg.Tenants = []tenancy.Tenant{DemoTenant()}
	} else {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		if err := decodeStrict(data, &cfg); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return nil, err
	}
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func decodeStrict(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file: defaults
		}
		return err
	}
	return nil
}

// fill derives the defaults that depend on other keys.
func (c *Config) fill() {
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir()
	}
	if c.Sandbox.RootfsDir == "" {
		c.Sandbox.RootfsDir = filepath.Join(c.StateDir, "rootfs")
	}
	if c.Sandbox.RuntimesDir == "" {
		c.Sandbox.RuntimesDir = filepath.Join(c.StateDir, "runtimes")
	}
	if c.Sandbox.WorkDir == "" {
		c.Sandbox.WorkDir = filepath.Join(c.StateDir, "runs")
	}
	if c.Sandbox.DepsDir == "" {
		c.Sandbox.DepsDir = filepath.Join(c.StateDir, "deps")
	}
	if c.Dispatch.RedisURL == "" {
		c.Dispatch.RedisURL = c.Quota.RedisURL
	}
	if c.Dispatch.KeyPrefix == "" {
		c.Dispatch.KeyPrefix = c.Quota.WithDefaults().KeyPrefix
	}
	if c.Audit.File == "" {
		c.Audit.File = filepath.Join(c.StateDir, "audit.jsonl")
	}
	if c.Embedded && c.Auth.HS256SecretFile == "" {
		c.Auth.HS256SecretFile = filepath.Join(c.StateDir, "dev.key")
	}
	for i := range c.Tenants {
		if c.Tenants[i].Quota == (quota.Limits{}) {
			c.Tenants[i].Quota = c.Quota.Defaults
		}
		if c.Tenants[i].Policy == nil {
			c.Tenants[i].Policy = map[string]any{}
		}
	}
}

// Validate fails fast on configurations that cannot work. Each package
// validates its own section; this adds the cross-cutting checks.
func (c *Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen: must not be empty"))
	}
	role := c.Server.WithDefaults().Role
	if role != gateway.RoleExecutor { // an executor holds no JWT keys
		errs = append(errs, c.Auth.Validate())
	}
	if role == gateway.RoleGateway || role == gateway.RoleExecutor {
		errs = append(errs, c.Dispatch.Validate())
	}
	errs = append(errs,
		c.Server.WithDefaults().Validate(),
		c.Sandbox.Validate(),
		c.Quota.WithDefaults().Validate(),
		c.Policy.Validate(),
		c.Audit.Validate(),
		c.Telemetry.Validate(),
		c.ToolsAPI.Validate(),
	)
	seen := map[string]bool{}
	for i, t := range c.Tenants {
		switch {
		case t.ID == "":
			errs = append(errs, fmt.Errorf("tenants[%d].id: must not be empty", i))
		case seen[t.ID]:
			errs = append(errs, fmt.Errorf("tenants[%d].id: duplicate tenant %q", i, t.ID))
		}
		seen[t.ID] = true
		if err := t.Quota.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tenants[%d].quota: %w", i, err))
		}
		if err := t.Tools.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tenants[%d].tools.%w", i, err))
		}
		if err := t.Webhooks.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tenants[%d].%w", i, err))
		}
		for _, err := range joined(t.Secrets.Validate(c.ToolsAPI.WithDefaults())) {
			errs = append(errs, fmt.Errorf("tenants[%d].%w", i, err))
		}
	}
	return errors.Join(errs...)
}

// joined is the errors err joins (errors.Join), or err alone; none for nil.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// Effective returns c as the running server uses it: every section with
// its package's defaults applied, the values derived from other keys or
// from the host filled in (server.max_concurrent_runs from the CPUs,
// server.conn_fd_reserve from this process's RLIMIT_NOFILE, the nsjail and
// uv binaries as this process finds them, telemetry.tracing from the
// OTEL_* variables), and each tenant's tool limits and servers defaulted.
// What stays zero is a real value: an off switch, an empty list, a key the
// server does not use in this setup (dispatch.* in role all), or
// dispatch.executor_id, generated at start.
func (c *Config) Effective() Config {
	e := *c
	e.Server = c.Server.WithDefaults()
	e.Auth = c.Auth.WithDefaults()
	e.Sandbox = c.Sandbox.WithDefaults()
	if p, err := sandbox.FindNsjail(e.Sandbox); err == nil {
		e.Sandbox.NsjailPath = p
	}
	if p, err := sandbox.FindUV(e.Sandbox); err == nil {
		e.Sandbox.UVPath = p
	}
	e.Quota = c.Quota.WithDefaults()
	e.Policy = c.Policy.WithDefaults()
	e.Audit = c.Audit.WithDefaults()
	e.Telemetry = c.Telemetry.WithDefaults()
	tracing := telemetry.TracingEnabled(c.Telemetry, os.LookupEnv)
	e.Telemetry.Tracing = &tracing
	e.Dispatch = c.Dispatch.WithDefaults()
	e.ToolsAPI = c.ToolsAPI.WithDefaults()
	e.Tenants = make([]tenancy.Tenant, len(c.Tenants))
	for i, t := range c.Tenants {
		t.Tools.Limits = t.Tools.Limits.WithDefaults()
		servers := make([]toolconfig.Server, len(t.Tools.Servers))
		for j, s := range t.Tools.Servers {
			servers[j] = s.WithDefaults()
		}
		t.Tools.Servers = servers
		e.Tenants[i] = t
	}
	return e
}

// Print writes the effective config (Effective) as YAML with secrets
// redacted.
func (c *Config) Print(w io.Writer) error {
	red := c.Effective()
	red.Quota.RedisURL = redactURL(red.Quota.RedisURL)
	red.Dispatch.RedisURL = redactURL(red.Dispatch.RedisURL)
	red.Egress.UpstreamProxy = redactURL(red.Egress.UpstreamProxy)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&red); err != nil {
		return err
	}
	return enc.Close()
}

// redactURL hides a password in a URL's userinfo.
func redactURL(s string) string {
	at := strings.LastIndex(s, "@")
	scheme := strings.Index(s, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return s
	}
	user := s[scheme+3 : at]
	if i := strings.Index(user, ":"); i >= 0 {
		user = user[:i] + ":REDACTED"
	} else {
		user = "REDACTED"
	}
	return s[:scheme+3] + user + s[at:]
}
