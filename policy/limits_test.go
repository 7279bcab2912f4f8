package policy

import (
	"context"
	"testing"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/tenancy"
)

// The platform's default and maximum limits are written twice: in
// policies/platform.rego (the policy owns them) and in package limits (for
// the paths that do not ask the policy: execgate run, the benchmarks, the
// warm pool's default profile). These fail when the two drift apart.
func TestPlatformRegoAndLimitsPackageAgree(t *testing.T) {
	e := newEngine(t, Options{})
	// A tenant that narrows nothing, so the platform's values show.
	tenant := tenancy.Tenant{ID: "plain", Plan: "standard", Policy: map[string]any{}}
	who := tenancy.Principal{TenantID: "plain", Subject: "u1", Roles: []string{tenancy.RoleExecutor}}
	decide := func(t *testing.T, req Request) Limits {
		t.Helper()
		d, err := e.Decide(context.Background(), BuildInput(tenant, who, req))
		if err != nil || !d.Allow {
			t.Fatalf("Decide = %+v, %v", d, err)
		}
		return d.Limits
	}
	t.Run("a request that asks for no limit gets limits.Default", func(t *testing.T) {
		if got := decide(t, Request{Source: "def run(a, c): return 1"}); got != limits.Default {
			t.Errorf("platform.rego limits_default = %+v, limits.Default = %+v", got, limits.Default)
		}
	})
	t.Run("a request that asks for more than any maximum gets limits.Max", func(t *testing.T) {
		huge := int64(1) << 40
		var asked Limits
		for _, f := range asked.Fields() {
			*f.V = huge
		}
		req := Request{Source: "def run(a, c): return 1", Limits: asked}
		if got := decide(t, req); got != limits.Max {
			t.Errorf("platform.rego limits_max = %+v, limits.Max = %+v", got, limits.Max)
		}
	})
}
