package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/tenancy"
)

// unseeded evaluates in on the served policy set the plain way: the input
// converted in full, no tenant seed, OPA's own cancellation. It is the
// reference the seeded path must match.
func unseeded(t testing.TB, e *Engine, in Input) (Decision, error) {
	t.Helper()
	s := e.current.Load()
	v, err := in.value()
	if err != nil {
		return Decision{}, err
	}
	rs, err := s.query.Eval(context.Background(), rego.EvalParsedInput(v), rego.EvalTime(e.now()))
	if err != nil {
		return Decision{}, &EvalError{Err: err}
	}
	if len(rs) != 1 || len(rs[0].Expressions) == 0 {
		return Decision{}, ErrUndefined
	}
	return decodeDecision(rs[0].Expressions[0].Value)
}

// requireSameDecision decides in every way — seeded twice (computing the
// seed, then reusing it) and through the decision memo twice (the second
// time remembered, when the engine's memo is on) — and requires each to
// match the plain evaluation. The engine's memo is shared across calls, so
// a table or fuzz run also checks that no two inputs share a memo key
// unless they share a decision.
func requireSameDecision(t testing.TB, e *Engine, in Input) Decision {
	t.Helper()
	want, wantErr := unseeded(t, e, in)
	s := e.current.Load()
	passes := []struct {
		name   string
		decide func() (Decision, bool, error)
	}{
		{"new seed", func() (Decision, bool, error) { d, err := e.eval(context.Background(), s, in); return d, false, err }},
		{"cached seed", func() (Decision, bool, error) { d, err := e.eval(context.Background(), s, in); return d, false, err }},
		{"memo", func() (Decision, bool, error) { return e.decide(context.Background(), s, in) }},
		{"memo again", func() (Decision, bool, error) { return e.decide(context.Background(), s, in) }},
	}
	for _, pass := range passes {
		got, remembered, err := pass.decide()
		if wantErr != nil {
			require.Error(t, err, "%s: unseeded failed with %v, seeded did not (input %+v)", pass.name, wantErr, in)
			require.Equal(t, wantErr.Error(), err.Error(), pass.name)
			require.False(t, remembered, pass.name)
			continue
		}
		require.NoError(t, err, "%s: input %+v", pass.name, in)
		require.Equal(t, want, got, "%s: input %+v", pass.name, in)
		if pass.name == "memo again" && s.memo != nil {
			_, keyable := s.memo.plan.appendKey(nil, in)
			require.Equal(t, keyable, remembered, "a keyable input is remembered after its first decision")
		}
	}
	return want
}

// seedTenants are tenants whose policy data exercises every tenant rule,
// including malformed data.
func seedTenants() map[string]tenancy.Tenant {
	ts := map[string]tenancy.Tenant{
		"demo":    demoTenant(),
		"no data": {ID: "bare", Plan: "free"},
		"unknown": {},
		"empty":   {ID: "empty", Policy: map[string]any{}},
	}
	with := func(name string, key string, v any) {
		t := demoTenant()
		t.ID = strings.ReplaceAll(name, " ", "-")
		t.Policy[key] = v
		ts[name] = t
	}
	with("disabled", "disabled", true)
	with("disabled as string", "disabled", "yes")
	with("network as string", "network", "proxy")
	with("host network", "network", []any{"none", "proxy", "host"})
	with("odd network entries", "network", []any{1, nil, "proxy"})
	with("egress star", "egress_allow", []any{"*", "*.Example.ORG:8443"})
	with("bad egress patterns", "egress_allow", []any{"http://x", 42, "a:b:c", "ok.test:0"})
	with("limits as array", "max_limits", []any{1})
	with("odd limits", "max_limits", map[string]any{"pids": "lots", "memory_mb": -1, "tmp_mb": 16, "gpus": 2, "cpu_ms": 1.5})
	with("huge limits", "max_limits", map[string]any{"memory_mb": 100000, "timeout_ms": 60001})
	with("packages as array", "packages", []any{"six"})
	with("packages odd", "packages", map[string]any{"allow": []any{"Six", 3, "typing_extensions"}, "deny": "six"})
	with("tools", "tools", []any{"search", 7, "calendar"})
	with("tools as string", "tools", "search")
	with("audit", "audit", map[string]any{"record_source": true})
	with("audit odd", "audit", map[string]any{"record_source": "yes"})
	with("unknown key", "colour", "blue")
	return ts
}

func seedPrincipals() map[string]tenancy.Principal {
	return map[string]tenancy.Principal{
		"executor": executor(),
		"admin":    {Subject: "root", Roles: []string{"executor", "admin"}},
		"nobody":   {Subject: "x"},
		"author":   {Subject: "y", Roles: []string{"policy-author"}},
	}
}

func seedRequests() map[string]Request {
	return map[string]Request{
		"probe":        {Source: "async def run(args, context):\n    return 1\n", Entrypoint: "run"},
		"full":         {Source: "x", Args: []byte(`{"q":1}`), Requirements: []string{"six==1.16.0"}, NetworkAccess: "proxy", EgressAllow: []string{"api.example.com", "pypi.org:443"}, Limits: Limits{TimeoutMS: 10000, MemoryMB: 512}},
		"host":         {NetworkAccess: "host"},
		"bridge":       {NetworkAccess: "bridge"},
		"test mode":    {Mode: "test", NetworkAccess: "proxy", EgressAllow: []string{"*.example.com"}, Tools: []string{"shell"}},
		"debug mode":   {Mode: "debug"},
		"javascript":   {Language: "javascript"},
		"bad egress":   {NetworkAccess: "proxy", EgressAllow: []string{"bad host", "x.com:99999", "*", "*.api.example.com:*"}},
		"requirements": {Requirements: []string{"pip", "Typing.Extensions>=4", "six @ https://x", "requests", "numpy==2"}},
		"big limits":   {Limits: Limits{TimeoutMS: 999999, CPUMS: 1, MemoryMB: 4096, Pids: 1000, OutputBytes: 1 << 30, TmpMB: 2}},
		"tools":        {Tools: []string{"search", "shell"}},
	}
}

// TestSeededDecisionsMatchFullEvaluation: for every combination of the
// tables above, the seeded decision equals the plain evaluation's.
func TestSeededDecisionsMatchFullEvaluation(t *testing.T) {
	engines := map[string]*Engine{
		"defaults":            newEngine(t, Options{}),
		"defaults + examples": newEngine(t, Options{Dirs: []string{"../deploy/examples/policies"}}),
	}
	for ename, e := range engines {
		for tname, ten := range seedTenants() {
			t.Run(ename+"/"+tname, func(t *testing.T) {
				allowed := 0
				for _, p := range seedPrincipals() {
					for _, r := range seedRequests() {
						if d := requireSameDecision(t, e, BuildInput(ten, p, r)); d.Allow {
							allowed++
						}
					}
				}
				if tname == "demo" {
					require.Positive(t, allowed, "the table must include allowed decisions")
				}
			})
		}
	}
}

// TestTenantOnlyRefs checks which rules are seeded: tenant and platform
// values, never a rule that reads the request or subject, the clock, or
// uses `with`.
func TestTenantOnlyRefs(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ext.rego", `package execgate.ext.team

tenant_is_big if input.tenant.plan == "big"

stamped := time.now_ns()

stamped_big if {
	tenant_is_big
	stamped > 0
}

hypothetical contains "x" if {
	data.execgate.access.tenant_known with input.tenant.id as ""
}

asks_proxy if input.request.network_access == "proxy"
`)
	e := newEngine(t, Options{Dirs: []string{"../deploy/examples/policies", dir}})
	var refs []string
	for _, r := range e.current.Load().seedQ.refs {
		refs = append(refs, r.String())
	}
	for _, want := range []string{
		"data.execgate.access.tenant_violations",
		"data.execgate.limits.tenant_violations",
		"data.execgate.packages.tenant_allow",
		"data.execgate.egress.pattern_entries",
		"data.execgate.platform.limits_max",
		"data.execgate.ext.acme.is_acme",
		"data.execgate.ext.team.tenant_is_big",
	} {
		require.Contains(t, refs, want)
	}
	for _, not := range []string{
		"data.execgate.main.decision",
		"data.execgate.main.deny",
		"data.execgate.access.violations",
		"data.execgate.access.roles",
		"data.execgate.network.mode",
		"data.execgate.limits.effective",
		"data.execgate.ext.acme.violations",   // reads the request and the clock
		"data.execgate.ext.team.stamped",      // time.now_ns
		"data.execgate.ext.team.stamped_big",  // depends on stamped
		"data.execgate.ext.team.hypothetical", // with
		"data.execgate.ext.team.asks_proxy",   // the request
	} {
		require.NotContains(t, refs, not)
	}
}

// TestSeedIsNotUsedUnderWith: a `with` that replaces input.tenant must see
// the rules recomputed, not the tenant's seed.
func TestSeedIsNotUsedUnderWith(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ext.rego", `package execgate.ext.what_if

violations contains "an empty tenant id would be unknown" if {
	not data.execgate.access.tenant_known with input.tenant.id as ""
}
`)
	writeFile(t, dir, "main.rego", `package execgate.main

import data.execgate.ext.what_if

deny contains r if some r in what_if.violations
`)
	e := newEngine(t, Options{Dirs: []string{dir}})
	in := BuildInput(demoTenant(), executor(), Request{})
	for range 2 {
		d := requireSameDecision(t, e, in)
		require.Equal(t, []string{"an empty tenant id would be unknown"}, d.Reasons)
	}
}

// TestSeedFollowsTenantChanges: a tenant's seed is keyed by its data, so
// changed config is decided on the new data at once; a reload drops seeds.
func TestSeedFollowsTenantChanges(t *testing.T) {
	e := newEngine(t, Options{})
	ctx := context.Background()
	ten := demoTenant()
	req := Request{NetworkAccess: "proxy", EgressAllow: []string{"api.example.com"}}

	d, err := e.Decide(ctx, BuildInput(ten, executor(), req))
	require.NoError(t, err)
	require.Equal(t, []string{"api.example.com:443"}, d.Egress.Allow)

	ten.Policy["egress_allow"] = []any{"api.example.com:8443"}
	d, err = e.Decide(ctx, BuildInput(ten, executor(), req))
	require.NoError(t, err)
	require.Equal(t, []string{"api.example.com:8443"}, d.Egress.Allow)

	ten.Policy["disabled"] = true
	d, err = e.Decide(ctx, BuildInput(ten, executor(), req))
	require.NoError(t, err)
	require.Equal(t, []string{`tenant "demo" is disabled`}, d.Reasons)

	before := e.current.Load()
	require.NoError(t, e.Reload(ctx))
	require.NotSame(t, before, e.current.Load())
	require.Empty(t, e.current.Load().seeds.m, "a reload starts without seeds")
}

// TestTenantKeyIsExact: different tenant documents never share a key.
func TestTenantKeyIsExact(t *testing.T) {
	docs := []TenantInput{
		{},
		{ID: "a"},
		{ID: "a", Data: map[string]any{}},
		{ID: "a", Plan: "b"},
		{ID: "ab"},
		{ID: "a", Data: map[string]any{"x": "1"}},
		{ID: "a", Data: map[string]any{"x": 1}},
		{ID: "a", Data: map[string]any{"x": 1.5}},
		{ID: "a", Data: map[string]any{"x": json.Number("1")}},
		{ID: "a", Data: map[string]any{"x": []any{"1"}}},
		{ID: "a", Data: map[string]any{"x": []any{"1", "2"}}},
		{ID: "a", Data: map[string]any{"x": []any{"12"}}},
		{ID: "a", Data: map[string]any{"x": map[string]any{"1": nil}}},
		{ID: "a", Data: map[string]any{"x": nil}},
		{ID: "a", Data: map[string]any{"x": true}},
		{ID: "a", Data: map[string]any{"x": false}},
		{ID: "a", Data: map[string]any{"x": "", "y": ""}},
		{ID: "a", Data: map[string]any{"xy": ""}},
	}
	seen := map[string]int{}
	for i, d := range docs {
		k, ok := appendTenantKey(nil, d)
		require.True(t, ok, "doc %d", i)
		if j, dup := seen[string(k)]; dup {
			t.Fatalf("docs %d and %d share key %q", j, i, k)
		}
		seen[string(k)] = i
	}
	_, ok := appendTenantKey(nil, TenantInput{Data: map[string]any{"x": struct{}{}}})
	require.False(t, ok, "an unknown type is not keyed")
}

// FuzzSeededDecisionMatchesFull: tenant data and requests from the fuzzer
// decide identically seeded and unseeded. `go test` runs the seed corpus;
// `go test -fuzz FuzzSeeded ./policy/` explores further.
func FuzzSeededDecisionMatchesFull(f *testing.F) {
	for _, ten := range seedTenants() {
		data, err := json.Marshal(ten.Policy)
		require.NoError(f, err)
		for name, r := range seedRequests() {
			body, err := json.Marshal(r) // a Request as JSON; fuzzInput reads it back
			require.NoError(f, err)
			f.Add(ten.ID, string(data), string(body), fmt.Sprintf("executor,%s", name))
		}
	}
	e := newEngine(f, Options{Dirs: []string{filepath.Join("..", "deploy", "examples", "policies")}})
	f.Fuzz(func(t *testing.T, id, data, body, roles string) {
		ten, p, r, ok := fuzzInput(id, data, body, roles)
		if !ok {
			t.Skip("tenant data is not a JSON object or body not a request")
		}
		requireSameDecision(t, e, BuildInput(ten, p, r))
	})
}

// fuzzInput builds a tenant, principal and request from fuzzer strings.
func fuzzInput(id, data, body, roles string) (tenancy.Tenant, tenancy.Principal, Request, bool) {
	var policy map[string]any
	if json.Unmarshal([]byte(data), &policy) != nil {
		return tenancy.Tenant{}, tenancy.Principal{}, Request{}, false
	}
	var r Request
	if json.Unmarshal([]byte(body), &r) != nil {
		return tenancy.Tenant{}, tenancy.Principal{}, Request{}, false
	}
	ten := tenancy.Tenant{ID: id, Plan: "standard", Policy: policy}
	p := tenancy.Principal{Subject: "f", Roles: strings.Split(roles, ",")}
	return ten, p, r, true
}

// TestSeedsAreSharedSafely: goroutines deciding for the same tenants share
// their seeds (run with -race); every decision matches the unseeded one.
func TestSeedsAreSharedSafely(t *testing.T) {
	e := newEngine(t, Options{})
	type job struct {
		in   Input
		want Decision
	}
	var jobs []job
	for _, name := range []string{"demo", "odd limits", "egress star", "packages odd"} {
		ten := seedTenants()[name]
		for _, r := range seedRequests() {
			in := BuildInput(ten, executor(), r)
			want, err := unseeded(t, e, in)
			require.NoError(t, err)
			jobs = append(jobs, job{in, want})
		}
	}
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			for i := range 3 * len(jobs) {
				j := jobs[(i+w*7)%len(jobs)]
				got, err := e.eval(context.Background(), e.current.Load(), j.in)
				if err == nil && !reflect.DeepEqual(got, j.want) {
					err = fmt.Errorf("input %+v: got %+v, want %+v", j.in, got, j.want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
}

// TestRefCacheKeepsCollidingRefsApart: two refs with the same hash are
// stored, found, updated and listed separately; an undefined result (nil)
// is cached as such; reset empties the cache.
func TestRefCacheKeepsCollidingRefsApart(t *testing.T) {
	a, b := ast.MustParseRef("data.x.a"), ast.MustParseRef("data.x.b")
	c := newRefCache(4)
	c.put(a, 1, ast.StringTerm("A"))
	c.put(b, 1, ast.StringTerm("B"))
	for ref, want := range map[string]string{"data.x.a": `"A"`, "data.x.b": `"B"`} {
		v, undefined := c.get(ast.MustParseRef(ref), 1)
		require.False(t, undefined)
		require.Equal(t, want, v.String(), ref)
	}
	c.put(b, 1, nil)
	v, undefined := c.get(b, 1)
	require.Nil(t, v)
	require.True(t, undefined, "nil records an undefined result")
	c.put(a, 1, ast.StringTerm("A2"))
	v, _ = c.get(a, 1)
	require.Equal(t, `"A2"`, v.String())
	require.Len(t, c.Keys(), 2)
	_, found := c.get(ast.MustParseRef("data.x.c"), 1)
	require.False(t, found)
	c.reset()
	require.Empty(t, c.Keys())
	v, undefined = c.get(a, 1)
	require.Nil(t, v)
	require.False(t, undefined)
}
