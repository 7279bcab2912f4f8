package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/tenancy"
)

// Request is what the policy is asked about: the fields of an execute
// request (DESIGN §4) that the policy sees, before normalisation. Source and
// Args are hashed and measured by BuildInput, never passed on.
type Request struct {
	Language      string
	Entrypoint    string
	Source        string
	Args          []byte // raw JSON of "args", nil when absent
	Requirements  []string
	Packages      []Package // the resolved set; nil when there are no requirements
	NetworkAccess string
	EgressAllow   []string // "egress": {"allow": [...]}
	Limits        Limits   // zero fields: not requested
	Mode          string
	Tools         []string
	Isolation     string // "jail" (default) or "process"
	// Runtime is the Python runtime asked for; "" asks for the tenant's
	// default (RuntimeFor).
	Runtime string
	// Secrets are the brokered secrets asked for, by name.
	Secrets []string
}

// BuildInput builds the versioned policy input for tenant t, principal p and
// request r: it hashes and measures the source (source_sha256, source_bytes)
// and args (args_bytes), applies the defaults (language python, entrypoint
// run, network none, mode run), lower-cases and trims egress hosts, and turns
// nil lists and tenant data into empty ones so the policy always sees the
// same shape. The source itself never enters the input.
func BuildInput(t tenancy.Tenant, p tenancy.Principal, r Request) Input {
	r = r.WithDefaults()
	sum := sha256.Sum256([]byte(r.Source))
	data := t.Policy
	if data == nil {
		data = map[string]any{}
	}
	egress := make([]string, 0, len(r.EgressAllow))
	for _, h := range r.EgressAllow {
		egress = append(egress, strings.ToLower(strings.TrimSpace(h)))
	}
	return Input{
		Version: InputVersion,
		Tenant:  TenantInput{ID: t.ID, Plan: t.Plan, Data: data},
		Subject: SubjectInput{Sub: p.Subject, Roles: nonNil(p.Roles)},
		Request: RequestInput{
			Language:      r.Language,
			Entrypoint:    r.Entrypoint,
			SourceSHA256:  hex.EncodeToString(sum[:]),
			SourceBytes:   len(r.Source),
			ArgsBytes:     len(r.Args),
			Requirements:  nonNil(r.Requirements),
			Packages:      nonNilPackages(r.Packages),
			NetworkAccess: r.NetworkAccess,
			EgressHosts:   egress,
			Limits:        r.Limits,
			Mode:          r.Mode,
			Tools:         nonNil(r.Tools),
			Isolation:     r.Isolation,
			Runtime:       RuntimeFor(t, r.Language, r.Runtime),
			Secrets:       nonNil(r.Secrets),
		},
	}
}

// RuntimeFor is the runtime a run of language asking for runtime gets: the
// one it asks for; for a Python run that names none, its tenant's default,
// the first of the tenant's policy data "runtimes" (limits.DefaultRuntime
// when it lists none). Other languages name none. policies/runtimes.rego's
// default_runtime is the same rule (a test keeps them in step); the gateway
// asks here first because a run's requirements are resolved for its
// runtime before the policy sees them.
func RuntimeFor(t tenancy.Tenant, language, runtime string) string {
	if runtime = strings.TrimSpace(runtime); runtime != "" {
		return runtime
	}
	if orDefault(language, limits.DefaultLanguage) != "python" {
		return ""
	}
	if list, ok := t.Policy["runtimes"].([]any); ok && len(list) > 0 {
		if s, ok := list[0].(string); ok {
			return s
		}
	}
	return limits.DefaultRuntime
}

// WithDefaults returns r with its empty (or blank) language, entrypoint,
// network access, mode and isolation set to the request defaults of package limits
// and the others trimmed. It is the one place they are applied to a
// request: the gateway's decoder and BuildInput both go through it. Test
// mode's network is not touched here: the policy decides none for it, and
// the gateway holds the decision to that.
func (r Request) WithDefaults() Request {
	r.Language = orDefault(r.Language, limits.DefaultLanguage)
	r.Entrypoint = orDefault(r.Entrypoint, limits.DefaultEntrypoint)
	r.NetworkAccess = orDefault(r.NetworkAccess, limits.DefaultNetworkAccess)
	r.Mode = orDefault(r.Mode, limits.DefaultMode)
	r.Isolation = orDefault(r.Isolation, limits.DefaultIsolation)
	return r
}

func orDefault(s, def string) string {
	if s = strings.TrimSpace(s); s == "" {
		return def
	}
	return s
}

func nonNilPackages(ps []Package) []Package {
	out := make([]Package, len(ps))
	for i, p := range ps {
		p.Via = nonNil(p.Via)
		out[i] = p
	}
	return out
}

func nonNil(s []string) []string {
	out := make([]string, len(s))
	copy(out, s)
	return out
}
