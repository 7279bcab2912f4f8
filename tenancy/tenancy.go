// Package tenancy holds the tenant registry (from the config file) and turns
// verified token claims into a Principal.
package tenancy

import (
	"context"
	"errors"
	"fmt"

	"github.com/execgate/execgate/quota"
)

// Roles a token may carry.
const (
	RoleExecutor     = "executor"
	RoleAdmin        = "admin"
	RolePolicyAuthor = "policy-author"
)

// Tenant is one configured tenant.
type Tenant struct {
	ID    string       `yaml:"id" json:"id"`
	Plan  string       `yaml:"plan" json:"plan"`
	Quota quota.Limits `yaml:"quota" json:"quota"`
	// Policy becomes input.tenant.data for the policy.
	Policy map[string]any `yaml:"policy" json:"policy"`
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

// Authorize checks that p may act with role for its own tenant and returns
// that tenant. requested is the tenant named in the request body, if any; it
// must equal the token's tenant. Every refusal is a *ForbiddenError.
func (r *Registry) Authorize(p Principal, requested, role string) (Tenant, error) {
	if requested != "" && requested != p.TenantID {
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("tenant_id %q does not match the token's tenant", requested)}
	}
	if !p.HasRole(role) {
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("role %q required", role)}
	}
	t, err := r.Lookup(p.TenantID)
	if err != nil {
		return Tenant{}, &ForbiddenError{Reason: fmt.Sprintf("tenant %q is not configured", p.TenantID), Err: err}
	}
	return t, nil
}

// PrincipalFromClaims builds the caller from verified token claims. The
// tenant is required; roles are kept as given (unknown roles grant nothing).
func PrincipalFromClaims(subject, tenantID string, roles []string) (Principal, error) {
	if tenantID == "" {
		return Principal{}, errors.New("token has no tenant_id claim")
	}
	return Principal{TenantID: tenantID, Subject: subject, Roles: append([]string(nil), roles...)}, nil
}
