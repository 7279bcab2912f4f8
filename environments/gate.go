package environments

import (
	"context"
	"fmt"

	"github.com/execgate/execgate/internal/slots"
)

// Resolving a requirement list runs on the gateway's host (uv pip compile,
// or the npm resolver in this process), and before any quota admission:
// the policy must see the resolved set before it decides, and the quota
// is asked after the policy. Resolutions also outlive the callers that
// started them (a resolution is shared by everyone asking for the same
// list). Unbounded, a tenant could send list after new list and leave at
// once, each leaving a resolution running for up to sandbox.deps_timeout_ms,
// and take the host from everyone. So a resolution that is not cached
// takes one of this process's MaxResolves slots, at most MaxTenantResolves
// of them for one tenant, for as long as it runs; a request that finds
// none free is refused at once (ResolvesBusyError: 503 Overloaded at the
// edge), and a cached or already running resolution needs no slot. The
// gateway's flow owns the ResolveGate of all its Caches and hands it to
// them with each request's context (WithResolveGate); a resolution without
// one (the CLI's own commands) is not bounded here.
const (
	MaxResolves       = 4
	MaxTenantResolves = 1
)

// ResolvesBusyError is a resolution refused for want of a slot: the
// tenant's (Tenant) or the process's.
type ResolvesBusyError struct {
	Tenant bool
	Max    int
}

func (e *ResolvesBusyError) Error() string {
	if e.Tenant {
		return fmt.Sprintf("the tenant already has %d package resolution(s) of new requirement lists in flight (at most %d at once); retry when they end, or reuse a list already resolved", e.Max, e.Max)
	}
	return fmt.Sprintf("the gateway is resolving %d new requirement lists at once, its most; retry later", e.Max)
}

// ResolveGate counts the resolutions in flight, in all and per tenant.
type ResolveGate struct {
	max, tenantMax int
	held           *slots.Counter
}

// NewResolveGate is a gate of max resolutions in flight, tenantMax of them
// for one tenant.
func NewResolveGate(max, tenantMax int) *ResolveGate {
	return &ResolveGate{max: max, tenantMax: tenantMax, held: slots.New(tenantMax, max)}
}

// take takes a slot for tenant, or says why there is none; release gives
// it back (once).
func (g *ResolveGate) take(tenant string) (release func(), err error) {
	release, full := g.held.Take(tenant)
	switch full {
	case slots.Key:
		return nil, &ResolvesBusyError{Tenant: true, Max: g.tenantMax}
	case slots.Total:
		return nil, &ResolvesBusyError{Max: g.max}
	}
	return release, nil
}

type gateKey struct{}

type gated struct {
	gate   *ResolveGate
	tenant string
}

// WithResolveGate makes the resolutions ctx starts take their slots from
// g, as tenant's.
func WithResolveGate(ctx context.Context, g *ResolveGate, tenant string) context.Context {
	return context.WithValue(ctx, gateKey{}, gated{g, tenant})
}

// takeSlot takes the slot of a resolution started with ctx (a no-op
// without a gate).
func takeSlot(ctx context.Context) (release func(), err error) {
	g, _ := ctx.Value(gateKey{}).(gated)
	if g.gate == nil {
		return func() {}, nil
	}
	return g.gate.take(g.tenant)
}
