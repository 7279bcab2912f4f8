// Package policy decides, with embedded OPA, what a tenant may run.
//
// The default policies (package policies) and any extra directories are
// compiled once with restricted capabilities (no network builtins), prepared,
// and swapped atomically on reload. Decide evaluates the prepared query
// data.execgate.main.decision with one Input and returns a structured
// Decision. An undefined or erroring decision is an error (a PolicyError at
// the edge), never an allow.
package policy

import (
	"time"

	"github.com/execgate/execgate/limits"
)

// InputVersion is the version of the Input document.
const InputVersion = 1

// Limits bound one run (package limits, the type the sandbox enforces). In
// a request, zero means "not requested"; in a Decision every field is set,
// from the request or platform.rego's limits_default, and capped.
type Limits = limits.Limits

// Input is the document the policy sees (DESIGN §6).
type Input struct {
	Version int          `json:"version"`
	Tenant  TenantInput  `json:"tenant"`
	Subject SubjectInput `json:"subject"`
	Request RequestInput `json:"request"`
}

// TenantInput identifies the tenant and carries its policy data from config.
type TenantInput struct {
	ID   string         `json:"id"`
	Plan string         `json:"plan"`
	Data map[string]any `json:"data"`
}

// SubjectInput is the authenticated caller.
type SubjectInput struct {
	Sub   string   `json:"sub"`
	Roles []string `json:"roles"`
}

// RequestInput describes the requested run; never the source itself.
type RequestInput struct {
	Language     string   `json:"language"`
	Entrypoint   string   `json:"entrypoint"`
	SourceSHA256 string   `json:"source_sha256"`
	SourceBytes  int      `json:"source_bytes"`
	ArgsBytes    int      `json:"args_bytes"`
	Requirements []string `json:"requirements"`
	// Packages is the resolved, locked set the requirements (or a lock, or
	// an environment id) install: every package, transitive ones included.
	Packages      []Package `json:"packages"`
	NetworkAccess string    `json:"network_access"`
	EgressHosts   []string  `json:"egress_hosts"`
	Limits        Limits    `json:"limits"`
	Mode          string    `json:"mode"`
	Tools         []string  `json:"tools"`
	// Isolation is the level asked for: "jail" (the default) or "process".
	Isolation string `json:"isolation"`
	// Runtime is the Python runtime asked for ("python3.13"), or the
	// tenant's default when the request names none (BuildInput); "" for
	// other languages.
	Runtime string `json:"runtime"`
	// Secrets are the brokered secrets the run asks for, by name (the
	// values never enter the input).
	Secrets []string `json:"secrets"`
}

// Package is one distribution of a resolved set, as the policy sees it.
type Package struct {
	Name    string `json:"name"`    // PEP 503 normal form
	Version string `json:"version"` // exact
	// Index is where it came from (a simple index or find-links URL,
	// credentials stripped); "" when unknown (a lock given by the caller).
	Index string `json:"index"`
	// Via is the chain from a requested package to this one, names in
	// normal form, this package last ("requests", "urllib3"); a requested
	// package's chain is itself.
	Via []string `json:"via"`
}

// Decision is the policy's answer. Allow false always carries Reasons.
type Decision struct {
	ID                  string           `json:"id"`
	Allow               bool             `json:"allow"`
	Reasons             []string         `json:"reasons"`
	NetworkAccess       string           `json:"network_access"`
	Limits              Limits           `json:"limits"`
	Egress              Egress           `json:"egress"`
	RequirementsAllowed bool             `json:"requirements_allowed"`
	Tools               []string         `json:"tools"`
	Audit               AuditObligations `json:"audit"`
	// Isolation is the decided isolation level, "jail" or "process"
	// (policies/isolation.rego); a decision without one means "jail".
	Isolation string `json:"isolation"`
	// Runtime is the decided Python runtime (policies/runtimes.rego): the
	// one asked for, or the tenant's default; "" for other languages and
	// for a denied run.
	Runtime string `json:"runtime"`
	// Secrets are the brokered secrets granted to the run, by name
	// (policies/secrets.rego); a decision without the key grants none.
	Secrets []string `json:"secrets"`
	// PolicyRevision is the Status().Revision of the policies that decided,
	// for the audit record. Set by Decide, not by the policy.
	PolicyRevision string `json:"policy_revision,omitempty"`
}

// Egress is the decided egress allow-list (host[:port] globs).
type Egress struct {
	Allow []string `json:"allow"`
}

// AuditObligations tell the audit log what to keep.
type AuditObligations struct {
	RecordSource bool `json:"record_source"`
}

// Config is the policy section of the config file.
type Config struct {
	// Dirs are extra policy directories layered on the embedded defaults.
	// Default none.
	Dirs []string `yaml:"dirs" json:"dirs"`
	// Bundle, when set, loads policies from an OPA bundle server instead of
	// (or on top of) directories.
	Bundle *BundleConfig `yaml:"bundle" json:"bundle,omitempty"`
	// Watch reloads on file change (default true when Dirs or Bundle is set).
	Watch *bool `yaml:"watch" json:"watch,omitempty"`
	// DecisionCache is the most decisions remembered per policy set, keyed
	// by the input fields the policies read (see memo.go). Absent:
	// DefaultDecisionCache; 0 evaluates every decision. Policies that ask
	// the clock or a random source are evaluated every time regardless.
	DecisionCache *int `yaml:"decision_cache" json:"decision_cache,omitempty"`
}

// WatchEnabled reports whether the policies are reloaded on change: Watch
// when set, else whether there is anything to watch (Dirs or a Bundle).
func (c Config) WatchEnabled() bool {
	if c.Watch != nil {
		return *c.Watch
	}
	return len(c.Dirs) > 0 || c.Bundle != nil
}

// WithDefaults returns c with Watch and DecisionCache set to what the
// gateway uses when they are not given.
func (c Config) WithDefaults() Config {
	w := c.WatchEnabled()
	c.Watch = &w
	if c.DecisionCache == nil {
		n := DefaultDecisionCache
		c.DecisionCache = &n
	}
	return c
}

// CacheOption is DecisionCache as an Options.DecisionCache value.
func (c Config) CacheOption() int {
	switch {
	case c.DecisionCache == nil:
		return 0
	case *c.DecisionCache <= 0:
		return -1
	default:
		return *c.DecisionCache
	}
}

// BundleConfig points at an OPA bundle server.
type BundleConfig struct {
	// URL is the full URL of the bundle (a .tar.gz), polled with ETag.
	// Required.
	URL string `yaml:"url" json:"url"`
	// PollSeconds is how often the bundle is polled. Default 30.
	PollSeconds int `yaml:"poll_seconds" json:"poll_seconds"`
	// VerificationKey is a PEM file with the key that verifies the
	// bundle's signature. Default none: unsigned bundles are accepted,
	// with a warning.
	VerificationKey string `yaml:"verification_key" json:"verification_key"`
	// KeyID is the key id the bundle's signature must name. Default none.
	KeyID string `yaml:"key_id" json:"key_id"`
}

// Status describes the policies being served, for /readyz and the log.
type Status struct {
	// Revision identifies the compiled policy set: a hash of every module
	// (and the bundle's manifest revision when a bundle is loaded).
	Revision string `json:"revision"`
	// LoadedAt is when that revision was compiled and swapped in.
	LoadedAt time.Time `json:"loaded_at"`
	// LastError is the last failed reload or bundle download ("" when the
	// last attempt succeeded). The previous revision keeps serving.
	LastError string `json:"last_error,omitempty"`
	// Modules are the file names of the modules being served.
	Modules []string `json:"modules"`
	// Bundle is the loaded bundle's manifest revision ("" without a bundle).
	Bundle string `json:"bundle,omitempty"`
}
