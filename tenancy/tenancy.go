// Package tenancy holds the tenant registry (from the config file) and turns
// verified token claims into a Principal.
package tenancy

import (
	"context"
	"errors"

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
