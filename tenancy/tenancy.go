// Package tenancy holds the tenant registry (from the config file) and turns
// verified token claims into a Principal.
package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/toolbridge/toolconfig"
	"github.com/execgate/execgate/webhook"
)

// Roles a token may carry (DESIGN §14). Only admin reaches beyond the
// caller's own tenant; which routes each role reaches, and for which
// tenants, is the gateway's access table (gateway.AccessTable), rendered
// into the README.
const (
	RoleAdmin        = "admin"         // platform-wide: every tenant
	RoleTenantAdmin  = "tenant-admin"  // its own tenant
	RolePolicyAuthor = "policy-author" // its own tenant
	RoleAuditor      = "auditor"       // its own tenant
	RoleExecutor     = "executor"      // its own tenant
)

// Roles lists every role, platform-wide first.
func Roles() []string {
	return []string{RoleAdmin, RoleTenantAdmin, RolePolicyAuthor, RoleAuditor, RoleExecutor}
}

// Scope is which tenants a grant reaches.
type Scope string

// Scopes of a Grant.
const (
	ScopeOwn Scope = "own" // the caller's own tenant only
	ScopeAll Scope = "any" // every tenant (platform-wide)
)

// Grant lets holders of Role act on the tenants Scope reaches.
type Grant struct {
	Role  string
	Scope Scope
}

// Tenant is one configured tenant.
type Tenant struct {
	// ID names the tenant: the tenant_id of its tokens. Required, unique.
	ID string `yaml:"id" json:"id"`
	// Plan is a label the policy sees as input.tenant.plan. Default none.
	Plan string `yaml:"plan" json:"plan"`
	// Quota is the tenant's quota; an admin override replaces it at run
	// time. Absent: quota.defaults.
	Quota quota.Limits `yaml:"quota" json:"quota"`
	// Policy becomes input.tenant.data for the policy: the tenant's
	// network modes, egress allow-list, packages, limits, tools, isolation
	// levels, languages and callbacks (see the policy guide). Default
	// empty: what the default policies allow a tenant that says nothing.
	Policy map[string]any `yaml:"policy" json:"policy"`
	// Tools are the tenant's MCP tool servers for code mode (header
	// values are references to secret files or variables, never values).
	Tools toolconfig.Config `yaml:"tools" json:"tools"`
	// Webhooks sign the callbacks of the tenant's async executions (secret
	// references, never values); where they may go is the policy's
	// callbacks list.
	Webhooks webhook.Config `yaml:"webhooks" json:"webhooks"`
	// Secrets are the tenant's brokered secrets: NAME → {file: PATH} or
	// {env: VAR} of the gateway (references, never values; files below
	// tools_api.secret_dirs, variables starting with one of
	// tools_api.env_prefixes), read at each run the policy grants them to
	// (policy data secrets, decision.secrets). Default none.
	Secrets secrets.Config `yaml:"secrets" json:"secrets,omitempty"`
}

// Principal is the authenticated caller.
type Principal struct {
	TenantID string
	Subject  string
	Roles    []string
}

// HasRole reports whether p carries role r.
func (p Principal) HasRole(r string) bool {
	for _, x := range p.Roles {
		if x == r {
			return true
		}
	}
	return false
}

// ErrUnknownTenant is returned by Lookup for a tenant not in the registry.
var ErrUnknownTenant = errors.New("unknown tenant")

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal in ctx, if any.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// ErrForbidden is matched (errors.Is) by every refusal of an authenticated
// caller: unknown tenant, missing role, tenant mismatch. The gateway maps it
// to 403 Forbidden.
var ErrForbidden = errors.New("forbidden")

// ForbiddenError says why an authenticated caller was refused.
type ForbiddenError struct {
	Reason string // one line, safe to show the caller
	Err    error  // underlying cause (e.g. ErrUnknownTenant), may be nil
}

func (e *ForbiddenError) Error() string { return "forbidden: " + e.Reason }

// Unwrap returns the cause.
func (e *ForbiddenError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Is(target error) bool { return target == ErrForbidden }

// Registry is the set of configured tenants. It is immutable after
// NewRegistry and safe for concurrent use; quota overrides live in the quota
// backend, not here.
type Registry struct {
	byID  map[string]Tenant
	order []string // ids in config order, for List
}

// NewRegistry builds a registry from the config's tenants. Ids must be
// non-empty and unique.
func NewRegistry(tenants []Tenant) (*Registry, error) {
	r := &Registry{byID: make(map[string]Tenant, len(tenants))}
	for i, t := range tenants {
		switch {
		case t.ID == "":
			return nil, fmt.Errorf("tenants[%d].id: must not be empty", i)
		case r.byID[t.ID].ID != "":
			return nil, fmt.Errorf("tenants[%d].id: duplicate tenant %q", i, t.ID)
		}
		r.byID[t.ID] = t
		r.order = append(r.order, t.ID)
	}
	return r, nil
}

// Lookup returns the tenant with id, or an error matching ErrUnknownTenant.
func (r *Registry) Lookup(id string) (Tenant, error) {
	t, ok := r.byID[id]
	if !ok {
		return Tenant{}, fmt.Errorf("tenant %q: %w", id, ErrUnknownTenant)
	}
	return t, nil
}

// List returns every tenant in config order.
func (r *Registry) List() []Tenant {
	out := make([]Tenant, 0, len(r.order))
	for _, id := range r.order {
		out = append(out, r.byID[id])
	}
	return out
}

// Authorize checks that p may act, through one of grants, on tenant target
// ("" means the caller's own tenant) and returns the caller's own tenant,
// which must be configured. A refusal never depends on whether target
// exists, so it reveals nothing about other tenants. Every refusal is a
// *ForbiddenError.
func (r *Registry) Authorize(p Principal, target string, grants []Grant) (Tenant, error) {
	return r.authorize(p, target, false, grants)
}

// AuthorizeAll is Authorize for an action on every tenant at once (listing
// them): only grants of ScopeAll reach it.
func (r *Registry) AuthorizeAll(p Principal, grants []Grant) (Tenant, error) {
	return r.authorize(p, "", true, grants)
}

func (r *Registry) authorize(p Principal, target string, all bool, grants []Grant) (Tenant, error) {
	var held []string
	ok := false
	for _, g := range grants {
		if !p.HasRole(g.Role) {
			continue
		}
		held = append(held, g.Role)
		if g.Scope == ScopeAll || (!all && (target == "" || target == p.TenantID)) {
			ok = true
			break
		}
	}
	switch {
	case ok:
	case len(held) == 0:
		return Tenant{}, &ForbiddenError{Reason: "role " + roleList(grants) + " required"}
	case all:
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("role %q reaches its own tenant only; every tenant at once needs a platform-wide role", held[0])}
	default:
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("tenant_id %s does not match the token's tenant; role %q reaches its own tenant only", quote(target), held[0])}
	}
	t, err := r.Lookup(p.TenantID)
	if err != nil {
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("tenant %s is not configured", quote(p.TenantID)), Err: err}
	}
	return t, nil
}

// roleList names the roles of grants: "executor", or one of "a", "b".
func roleList(grants []Grant) string {
	if len(grants) == 1 {
		return strconv.Quote(grants[0].Role)
	}
	var b strings.Builder
	b.WriteString("one of ")
	for i, g := range grants {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(g.Role))
	}
	return b.String()
}

// quote quotes a caller-supplied id for a message, shortened.
func quote(id string) string {
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return strconv.Quote(id)
}

// PrincipalFromClaims builds the caller from verified token claims. The
// tenant is required; roles are kept as given (unknown roles grant nothing).
func PrincipalFromClaims(subject, tenantID string, roles []string) (Principal, error) {
	if tenantID == "" {
		return Principal{}, errors.New("token has no tenant_id claim")
	}
	return Principal{TenantID: tenantID, Subject: subject, Roles: append([]string(nil), roles...)}, nil
}
