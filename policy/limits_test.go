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

// The runtimes are written twice too: platform.rego's runtimes and
// runtime_default, limits.Runtimes and limits.DefaultRuntime; and the
// tenant's default (the first of its "runtimes") in runtimes.rego and in
// RuntimeFor, which the gateway asks before the policy because a run's
// requirements are resolved for its runtime.
func TestPlatformRegoAndLimitsPackageAgreeOnRuntimes(t *testing.T) {
	e := newEngine(t, Options{})
	who := tenancy.Principal{TenantID: "t", Subject: "u1", Roles: []string{tenancy.RoleExecutor}}
	all := make([]any, len(limits.Runtimes))
	for i, r := range limits.Runtimes {
		all[i] = r
	}
	for _, tc := range []struct {
		name string
		data map[string]any
	}{
		{"a tenant without runtimes", map[string]any{}},
		{"a tenant listing python3.13 first", map[string]any{"runtimes": []any{"python3.13", "python3.11"}}},
		{"a tenant granted every runtime", map[string]any{"runtimes": all}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := tenancy.Tenant{ID: "t", Plan: "standard", Policy: tc.data}
			d, err := e.Decide(context.Background(), BuildInput(tenant, who, Request{Source: "x"}))
			if err != nil || !d.Allow {
				t.Fatalf("Decide = %+v, %v", d, err)
			}
			if want := RuntimeFor(tenant, "python", ""); d.Runtime != want {
				t.Errorf("runtimes.rego decided %q for a run naming none, RuntimeFor says %q", d.Runtime, want)
			}
			// Without the gateway's default in the input, the policy's own
			// default is the same.
			in := BuildInput(tenant, who, Request{Source: "x"})
			in.Request.Runtime = ""
			if d, err := e.Decide(context.Background(), in); err != nil || d.Runtime != RuntimeFor(tenant, "python", "") {
				t.Errorf("policy default %q (%v), RuntimeFor %q", d.Runtime, err, RuntimeFor(tenant, "python", ""))
			}
		})
	}
	t.Run("every runtime of limits.Runtimes is a platform runtime", func(t *testing.T) {
		tenant := tenancy.Tenant{ID: "t", Plan: "standard", Policy: map[string]any{"runtimes": all}}
		for _, r := range limits.Runtimes {
			d, err := e.Decide(context.Background(), BuildInput(tenant, who, Request{Source: "x", Runtime: r}))
			if err != nil || !d.Allow || d.Runtime != r {
				t.Errorf("runtime %s: %+v, %v", r, d, err)
			}
		}
		d, err := e.Decide(context.Background(), BuildInput(tenant, who, Request{Source: "x", Runtime: "python9"}))
		if err != nil || d.Allow {
			t.Errorf("a runtime outside limits.Runtimes was allowed: %+v, %v", d, err)
		}
	})
	if tenant := (tenancy.Tenant{ID: "t"}); RuntimeFor(tenant, "python", "") != limits.DefaultRuntime {
		t.Errorf("RuntimeFor a tenant without data = %q, want limits.DefaultRuntime", RuntimeFor(tenant, "python", ""))
	}
}
