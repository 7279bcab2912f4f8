package policy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/tenancy"
)

// TestMemoPlan: the memo keys on exactly the input fields some rule reads,
// and is off for policies whose decisions depend on more than their input.
func TestMemoPlan(t *testing.T) {
	defaultKey := []string{
		"input.subject.roles", "input.request.language", "input.request.requirements", "input.request.packages",
		"input.request.network_access", "input.request.egress_hosts", "input.request.limits",
		"input.request.mode", "input.request.tools", "input.request.isolation", "input.request.runtime", "input.request.secrets", "input.tenant",
	}
	s := newEngine(t, Options{}).current.Load()
	require.NotNil(t, s.memo)
	require.Equal(t, defaultKey, s.memoPlan.names, "the defaults read no other field")
	// The example tenant policy pauses runs in a maintenance window: its
	// decisions depend on the clock, so none is remembered.
	s = newEngine(t, Options{Dirs: []string{"../deploy/examples/policies"}}).current.Load()
	require.Nil(t, s.memo)
	require.Contains(t, s.memoPlan.uncacheable, "time.now_ns")

	cases := map[string]struct {
		module      string
		key         []string // nil: as the defaults
		uncacheable string   // substring of the reason; "" when remembered
	}{
		"reads the source hash": {
			module: "deny contains \"known bad\" if input.request.source_sha256 == \"abc\"",
			key: []string{
				"input.subject.roles", "input.request.language", "input.request.source_sha256", "input.request.requirements", "input.request.packages",
				"input.request.network_access", "input.request.egress_hosts", "input.request.limits",
				"input.request.mode", "input.request.tools", "input.request.isolation", "input.request.runtime", "input.request.secrets", "input.tenant",
			},
		},
		"reads the whole request": {
			module: "deny contains \"big\" if count(object.keys(input.request)) > 100",
			key: []string{
				"input.subject.roles", "input.request.language", "input.request.entrypoint", "input.request.source_sha256",
				"input.request.source_bytes", "input.request.args_bytes", "input.request.requirements", "input.request.packages",
				"input.request.network_access", "input.request.egress_hosts", "input.request.limits",
				"input.request.mode", "input.request.tools", "input.request.isolation", "input.request.runtime", "input.request.secrets", "input.tenant",
			},
		},
		"reads a key by variable": {
			module: "deny contains k if { some k, _ in input.subject; k == \"admin\" }",
			key: []string{
				"input.subject.sub", "input.subject.roles", "input.request.language", "input.request.requirements", "input.request.packages",
				"input.request.network_access", "input.request.egress_hosts", "input.request.limits",
				"input.request.mode", "input.request.tools", "input.request.isolation", "input.request.runtime", "input.request.secrets", "input.tenant",
			},
		},
		"asks the clock":     {module: "deny contains \"late\" if time.now_ns() < 0", uncacheable: "time.now_ns"},
		"draws a random int": {module: "deny contains \"unlucky\" if rand.intn(\"x\", 1000) == 1000", uncacheable: "rand.intn"},
		"traces":             {module: "deny contains \"never\" if { trace(\"x\"); false }", uncacheable: "trace"},
		"uses with":          {module: "deny contains \"never\" if { x := input.request with input.request as 1; x == 2 }", uncacheable: "with"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "ext.rego", "package execgate.main\n\n"+tc.module+"\n")
			s := newEngine(t, Options{Dirs: []string{dir}}).current.Load()
			if tc.uncacheable != "" {
				require.Nil(t, s.memo)
				require.Contains(t, s.memoPlan.uncacheable, tc.uncacheable)
				return
			}
			require.NotNil(t, s.memo)
			require.Empty(t, s.memoPlan.uncacheable)
			require.Equal(t, tc.key, s.memoPlan.names)
		})
	}
}

// TestMemoKeysOnWhatThePolicyReads: once a policy reads the source hash,
// two requests of the same shape but different sources are decided apart,
// and each is remembered.
func TestMemoKeysOnWhatThePolicyReads(t *testing.T) {
	dir := t.TempDir()
	bad := BuildInput(demoTenant(), executor(), Request{Source: "import os"})
	writeFile(t, dir, "ext.rego", fmt.Sprintf("package execgate.main\n\ndeny contains \"known bad tool\" if input.request.source_sha256 == %q\n", bad.Request.SourceSHA256))
	e := newEngine(t, Options{Dirs: []string{dir}})
	good := BuildInput(demoTenant(), executor(), Request{Source: "print(1)"})
	for range 3 {
		d, err := e.Decide(context.Background(), bad)
		require.NoError(t, err)
		require.False(t, d.Allow)
		require.Equal(t, []string{"known bad tool"}, d.Reasons)
		d, err = e.Decide(context.Background(), good)
		require.NoError(t, err)
		require.True(t, d.Allow, d.Reasons)
	}
	require.Len(t, e.current.Load().memo.young, 2)
}

// TestMemoIgnoresWhatNoRuleReads: with the default policies, requests that
// differ only in fields no rule reads share one remembered decision, with a
// fresh decision ID each time.
func TestMemoIgnoresWhatNoRuleReads(t *testing.T) {
	e := newEngine(t, Options{})
	ids := map[string]bool{}
	for i := range 5 {
		p := executor()
		p.Subject = fmt.Sprintf("user-%d", i)
		in := BuildInput(demoTenant(), p, Request{Source: fmt.Sprintf("x = %d", i), Args: []byte(`{}`), Entrypoint: fmt.Sprintf("f%d", i)})
		d, err := e.Decide(context.Background(), in)
		require.NoError(t, err)
		require.True(t, d.Allow)
		ids[d.ID] = true
	}
	require.Len(t, ids, 5, "every decision gets its own ID")
	require.Len(t, e.current.Load().memo.young, 1)
}

// TestMemoReturnsCopies: changing a returned decision does not change the
// next one.
func TestMemoReturnsCopies(t *testing.T) {
	e := newEngine(t, Options{})
	in := BuildInput(demoTenant(), executor(), Request{NetworkAccess: "proxy", EgressAllow: []string{"api.example.com"}})
	first, err := e.Decide(context.Background(), in)
	require.NoError(t, err)
	require.NotEmpty(t, first.Egress.Allow)
	require.NotEmpty(t, first.Tools)
	want := first.clone()
	first.Egress.Allow[0], first.Tools[0] = "evil.example", "shell"
	second, err := e.Decide(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, want.Egress.Allow, second.Egress.Allow)
	require.Equal(t, want.Tools, second.Tools)
}

// TestMemoIsBounded: the memo never holds more than its size, and a
// negative size turns it off.
func TestMemoIsBounded(t *testing.T) {
	e := newEngine(t, Options{DecisionCache: 8})
	for i := range 50 {
		ten := demoTenant()
		ten.ID = fmt.Sprintf("t%d", i)
		_, err := e.Decide(context.Background(), BuildInput(ten, tenancy.Principal{Roles: []string{"executor"}}, Request{}))
		require.NoError(t, err)
	}
	m := e.current.Load().memo
	require.LessOrEqual(t, len(m.young)+len(m.old), 8)
	require.NotEmpty(t, m.young)

	off := newEngine(t, Options{DecisionCache: -1})
	require.Nil(t, off.current.Load().memo)
	d, err := off.Decide(context.Background(), BuildInput(demoTenant(), executor(), Request{}))
	require.NoError(t, err)
	require.True(t, d.Allow)
}

// TestCacheOption: policy.decision_cache absent is the default size, 0 is
// off, n is n.
func TestCacheOption(t *testing.T) {
	n := func(v int) *int { return &v }
	require.Equal(t, 0, Config{}.CacheOption())
	require.Equal(t, -1, Config{DecisionCache: n(0)}.CacheOption())
	require.Equal(t, 64, Config{DecisionCache: n(64)}.CacheOption())
	require.Error(t, Config{DecisionCache: n(-1)}.Validate())
}

// TestInputFieldsCoverTheInput: every field of the input document other
// than the tenant is a memo field, so a policy reading a new field can never
// be answered from a key that leaves it out.
func TestInputFieldsCoverTheInput(t *testing.T) {
	v, err := BuildInput(demoTenant(), executor(), Request{}).value()
	require.NoError(t, err)
	var doc []string
	top := v.(ast.Object)
	for _, k := range top.Keys() {
		name := string(k.Value.(ast.String))
		if name == "tenant" {
			continue
		}
		if obj, ok := top.Get(k).Value.(ast.Object); ok {
			for _, k2 := range obj.Keys() {
				doc = append(doc, name+"."+string(k2.Value.(ast.String)))
			}
			continue
		}
		doc = append(doc, name)
	}
	var fields []string
	for _, f := range inputFields {
		fields = append(fields, strings.Join(f.path, "."))
	}
	require.ElementsMatch(t, doc, fields)
}
