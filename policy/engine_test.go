package policy

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/policies"
)

func TestDecisionIDsAreUniqueUUIDs(t *testing.T) {
	e := newEngine(t, Options{})
	in := BuildInput(demoTenant(), executor(), Request{})
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		d, err := e.Decide(context.Background(), in)
		require.NoError(t, err)
		require.Regexp(t, uuid, d.ID)
		require.False(t, seen[d.ID], "duplicate id %s", d.ID)
		seen[d.ID] = true
		require.Equal(t, e.Status().Revision, d.PolicyRevision)
	}
}

func TestNewRefusesBadDefaults(t *testing.T) {
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		wantErr string
	}{
		{"no modules", fstest.MapFS{"README": {Data: []byte("x")}}, "no .rego modules"},
		{"a parse error", fstest.MapFS{"main.rego": {Data: []byte("package execgate.main\n\ndecision := {")}}, "policies/main.rego"},
		{"a compile error", fstest.MapFS{"main.rego": {Data: []byte("package execgate.main\n\ndecision := x\n")}}, "var x is unsafe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(context.Background(), Options{Defaults: tc.fsys, Logger: quietLogger()})
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	_, err := New(context.Background(), Options{})
	require.ErrorContains(t, err, "Defaults is nil")
}

// TestPolicyErrorsNeverAllow covers every way the policy can fail to decide:
// each must be an error Decide's callers treat as PolicyError, and the
// returned decision must not allow.
func TestPolicyErrorsNeverAllow(t *testing.T) {
	in := BuildInput(demoTenant(), executor(), Request{})
	mod := func(body string) fstest.MapFS {
		return fstest.MapFS{"main.rego": {Data: []byte("package execgate.main\n\n" + body + "\n")}}
	}
	tests := []struct {
		name      string
		defaults  fstest.MapFS
		dir       map[string]string // extra dir modules on the real defaults
		undefined bool              // want ErrUndefined, else *EvalError
		malformed bool
		wantErr   string
	}{
		{name: "no module defines decision", defaults: mod("allow := true"), undefined: true},
		{name: "the decision body is undefined", defaults: mod("decision := {\"allow\": true} if input.nope"), undefined: true},
		{name: "a builtin error (strict)", defaults: mod("decision := {\"allow\": to_number(\"x\") > 0}"), wantErr: "to_number"},
		{name: "a conflict between rules", defaults: mod("decision := {\"allow\": true} if true\n\ndecision := {\"allow\": false} if true"), wantErr: "conflict"},
		{name: "allow is not a boolean", defaults: mod("decision := {\"allow\": \"yes\"}"), malformed: true, wantErr: "allow is a string"},
		{name: "an allow without limits", defaults: mod(`decision := {"allow": true, "reasons": [], "network_access": "none", "egress": {"allow": []}, "requirements_allowed": true, "tools": []}`), malformed: true, wantErr: "limits is null/missing"},
		{name: "an allow with a zero limit", defaults: mod(`decision := {"allow": true, "reasons": [], "network_access": "none", "limits": {"timeout_ms": 0, "cpu_ms": 1, "memory_mb": 1, "pids": 1, "output_bytes": 1, "tmp_mb": 1}, "egress": {"allow": []}, "requirements_allowed": true, "tools": []}`), malformed: true, wantErr: "limits.timeout_ms is 0"},
		{name: "an allow with an unknown network mode", defaults: mod(`decision := {"allow": true, "reasons": [], "network_access": "bridge"}`), malformed: true, wantErr: `network_access is "bridge"`},
		{name: "an allow that carries reasons", defaults: mod(`decision := {"allow": true, "reasons": ["no"]}`), malformed: true, wantErr: "allow is true but reasons"},
		{name: "a decision that is not an object", defaults: mod("decision := true"), malformed: true, wantErr: "decision is a boolean"},
		{name: "an allow whose secrets are not a list of names", defaults: mod(`decision := {"allow": true, "reasons": [], "network_access": "none", "limits": {"timeout_ms": 1, "cpu_ms": 1, "memory_mb": 1, "pids": 1, "output_bytes": 1, "tmp_mb": 1}, "egress": {"allow": []}, "requirements_allowed": true, "tools": [], "secrets": "API_KEY"}`), malformed: true, wantErr: "secrets is a string"},
		{
			name:    "an extension rule conflict reached through deny",
			dir:     map[string]string{"ext.rego": "package ext.conflict\n\nx := 1 if true\n\nx := 2 if true\n", "hook.rego": "package execgate.main\n\nimport data.ext.conflict\n\ndeny contains \"x\" if conflict.x == 3\n"},
			wantErr: "conflict",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{}
			if tc.defaults != nil {
				opts.Defaults = tc.defaults
			}
			if tc.dir != nil {
				dir := t.TempDir()
				for name, body := range tc.dir {
					writeFile(t, dir, name, body)
				}
				opts.Dirs = []string{dir}
			}
			e := newEngine(t, opts)
			d, err := e.Decide(context.Background(), in)
			require.Error(t, err)
			require.True(t, IsPolicyError(err), "IsPolicyError(%v)", err)
			require.False(t, d.Allow)
			require.NotEmpty(t, d.ID, "a failed decision still has an id for the audit record")
			if tc.undefined {
				require.ErrorIs(t, err, ErrUndefined)
				return
			}
			var ee *EvalError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, tc.malformed, errors.Is(err, ErrMalformed), "ErrMalformed: %v", err)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

func TestDenyWithoutReasonGetsOne(t *testing.T) {
	e := newEngine(t, Options{Defaults: fstest.MapFS{"main.rego": {Data: []byte("package execgate.main\n\ndecision := {\"allow\": false}\n")}}})
	d, err := e.Decide(context.Background(), BuildInput(demoTenant(), executor(), Request{}))
	require.NoError(t, err)
	require.False(t, d.Allow)
	require.Equal(t, []string{"denied by policy (no reason given)"}, d.Reasons)
}

func TestRestrictedCapabilities(t *testing.T) {
	caps := Capabilities()
	for _, b := range caps.Builtins {
		require.False(t, strings.HasPrefix(b.Name, "net."), "capability %s", b.Name)
		require.NotContains(t, []string{"http.send", "opa.runtime", "json.match_schema", "json.verify_schema"}, b.Name)
	}
	require.NotNil(t, caps.AllowNet)
	require.Empty(t, caps.AllowNet)
	require.True(t, slices.ContainsFunc(caps.Builtins, func(b *ast.Builtin) bool { return b.Name == "regex.match" }), "ordinary builtins stay")

	modules := map[string]string{
		"http.send":          `deny contains "x" if http.send({"method": "GET", "url": "http://127.0.0.1:1"}).status_code == 200`,
		"net.lookup_ip_addr": `deny contains "x" if "127.0.0.1" in net.lookup_ip_addr("localhost")`,
		"opa.runtime":        `deny contains sprintf("%v", [opa.runtime().env])`,
		"json.match_schema":  `deny contains "x" if json.match_schema({}, {"$ref": "file:///etc/passwd"})[0]`,
	}
	for name, body := range modules {
		t.Run("a module calling "+name+" is refused at compile time", func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "ext.rego", "package ext.netcall\n\n"+strings.ReplaceAll(body, "deny contains", "v contains")+"\n")
			_, err := New(context.Background(), Options{Defaults: policies.FS, Dirs: []string{dir}, Logger: quietLogger()})
			require.ErrorContains(t, err, name)
			var me *ModuleError
			require.ErrorAs(t, err, &me)

			// The compiler refuses it too, not only our pre-check.
			m, err := ast.ParseModuleWithOpts("x.rego", "package ext.netcall\n\n"+strings.ReplaceAll(body, "deny contains", "v contains"), ast.ParserOptions{RegoVersion: ast.RegoV1})
			require.NoError(t, err)
			c := newCompiler()
			c.Compile(map[string]*ast.Module{"x.rego": m})
			require.True(t, c.Failed())
			require.ErrorContains(t, c.Errors, "undefined function "+name)
		})
	}
}

// TestExtensionsCannotWeakenDefaults: extension modules add denials; they
// can never turn a platform deny into an allow.
func TestExtensionsCannotWeakenDefaults(t *testing.T) {
	refused := []struct {
		name, module, wantErr string
	}{
		{"redefining decision", "package execgate.main\n\ndecision := {\"allow\": true}\n", "takes only `deny contains"},
		{"a default decision", "package execgate.main\n\ndefault decision := {\"allow\": true}\n", "takes only `deny contains"},
		{"shadowing a builtin main.rego calls", "package execgate.main\n\ncount(_) := 0\n", "takes only `deny contains"},
		{"shadowing an import of main.rego", "package execgate.main\n\nnetwork := {\"mode\": \"host\"}\n", "takes only `deny contains"},
		{"a complete deny rule", "package execgate.main\n\ndeny := set()\n", "partial set rule"},
		{"adding to a default package", "package execgate.network\n\nmode := \"host\"\n", "overlaps the default package execgate.network"},
		{"a package inside a default package", "package execgate.limits.x\n\ny := 1\n", "overlaps the default package execgate.limits"},
		{"a package above the defaults", "package execgate\n\nmain := {}\n", "overlaps the default package"},
		{"a package inside execgate.main", "package execgate.main.helpers\n\ny := 1\n", "inside the default package execgate.main"},
	}
	for _, tc := range refused {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "ext.rego", tc.module)
			_, err := New(context.Background(), Options{Defaults: policies.FS, Dirs: []string{dir}, Logger: quietLogger()})
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, err, "ext.rego")
		})
	}

	t.Run("a deny extension adds its reason to the platform's", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, "hook.rego", "package execgate.main\n\nimport data.ext.team\n\ndeny contains r if some r in team.violations\n")
		writeFile(t, dir, "team.rego", "package ext.team\n\nviolations contains \"team: no proxy on fridays\" if input.request.network_access == \"proxy\"\n")
		e := newEngine(t, Options{Dirs: []string{dir}})
		tenant := demoTenant()
		tenant.Policy["packages"] = map[string]any{"allow": []any{"pip"}}

		d, err := e.Decide(context.Background(), BuildInput(tenant, executor(), Request{NetworkAccess: "proxy", Requirements: []string{"pip"}}))
		require.NoError(t, err)
		require.False(t, d.Allow)
		require.Equal(t, []string{`package "pip" is on the platform deny-list`, "team: no proxy on fridays"}, d.Reasons)

		d, err = e.Decide(context.Background(), BuildInput(tenant, executor(), Request{}))
		require.NoError(t, err)
		require.True(t, d.Allow, "reasons %q", d.Reasons)
		require.Contains(t, e.Status().Modules, dir+"/team.rego")
	})
}

func TestExamplePolicyUsesTheInjectedClock(t *testing.T) {
	sunday3am := time.Date(2026, 1, 4, 3, 0, 0, 0, time.UTC)
	wednesday := time.Date(2026, 1, 7, 10, 0, 0, 0, time.UTC)
	now := sunday3am
	e := newEngine(t, Options{Dirs: []string{"../deploy/examples/policies"}, Now: func() time.Time { return now }})
	acme := demoTenant()
	acme.ID = "acme"
	in := BuildInput(acme, executor(), Request{})

	d, err := e.Decide(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"acme: runs are paused during the Sunday 02:00-04:00 UTC maintenance window"}, d.Reasons)

	now = wednesday
	d, err = e.Decide(context.Background(), in)
	require.NoError(t, err)
	require.True(t, d.Allow, "reasons %q", d.Reasons)
	require.Equal(t, sunday3am, e.Status().LoadedAt, "LoadedAt comes from the injected clock")
}

// TestInputValueMatchesJSON: the direct ast conversion Decide uses must see
// exactly what the JSON input (printed by `policy eval`) holds.
func TestInputValueMatchesJSON(t *testing.T) {
	inputs := map[string]Input{
		"built":  BuildInput(demoTenant(), executor(), Request{Source: "x", Args: []byte(`{"a":1}`), Requirements: []string{"six"}, EgressAllow: []string{"A.example.com"}, Limits: Limits{TimeoutMS: 1, TmpMB: 9}, Tools: []string{"t"}}),
		"zero":   {},
		"nested": {Tenant: TenantInput{ID: "x", Data: map[string]any{"a": []any{1, 2.5, "s", nil, true, map[string]any{"b": int64(3)}}}}},
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			got, err := in.value()
			require.NoError(t, err)
			raw, err := json.Marshal(in)
			require.NoError(t, err)
			want, err := ast.ValueFromReader(strings.NewReader(string(raw)))
			require.NoError(t, err)
			require.Equal(t, 0, want.Compare(got), "direct:\n%v\njson:\n%v", got, want)
		})
	}
}

func TestStatusListsModules(t *testing.T) {
	e := newEngine(t, Options{})
	st := e.Status()
	require.Regexp(t, `^sha256:[0-9a-f]{16}$`, st.Revision)
	require.Empty(t, st.LastError)
	require.Contains(t, st.Modules, "policies/main.rego")
	for _, m := range st.Modules {
		require.False(t, strings.HasSuffix(m, "_test.rego"), "tests are not served: %s", m)
	}
	require.WithinDuration(t, time.Now(), st.LoadedAt, time.Minute)
}
