package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// validRunner answers every run with a validator-shaped result, so both
// /v1/execute and /v1/validate succeed when they are allowed.
type validRunner struct{}

func (validRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{Status: sandbox.StatusOK, Result: []byte(`{"valid":true,"errors":[]}`)}, nil
}

// noSuchTrace is a trace id no span has.
const noSuchTrace = "0123456789abcdef0123456789abcdef"

// Issue #11 §4: a policy-author of one tenant read another tenant's data
// through the policy dry run. Every authenticated route, for every role,
// on the caller's own tenant and on another one, through the real router
// with real JWTs. The expectations are written out here, not derived from
// the gateway's access table, so a wrong table fails this test.
func TestEveryRoleReachesOnlyWhatTheRoleTableSays(t *testing.T) {
	const secret = "globex-secret-marker"
	s := start(t, setup{runner: validRunner{}, mutate: func(c *config.Config) {
		globex := config.DemoTenant()
		globex.ID = "globex"
		globex.Plan = "enterprise-" + secret
		globex.Quota = quota.Limits{RatePerMinute: 9191917, Burst: 42, Concurrency: 4, DailyCPUSeconds: 8383838}
		globex.Policy = map[string]any{"network": []any{"none"}, "egress_allow": []any{secret + ".example.com:443"}}
		for i := range c.Tenants {
			if c.Tenants[i].ID == "demo" { // may prepare six: the policy allows it before the 503
				c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"six"}, "deny": []any{}}
			}
		}
		c.Tenants = append(c.Tenants, globex)
	}})

	// The caller is always of tenant demo; "other" is globex.
	type want struct{ own, other int } // other 0: the route names no tenant
	const ok, no = http.StatusOK, http.StatusForbidden
	routes := []struct {
		method, path string // {t} is the target tenant
		body         string
		want         map[string]want // by role; absent = 403 both
	}{
		{"POST", "/v1/execute", `{"tenant_id":"{t}","source":"def run(args, context):\n    return 1\n"}`,
			map[string]want{tenancy.RoleExecutor: {ok, no}}},
		{"POST", "/v1/validate", `{"source":"def run(args, context):\n    return 1\n"}`,
			map[string]want{tenancy.RoleExecutor: {ok, 0}}},
		{"GET", "/v1/tools", "",
			map[string]want{tenancy.RoleExecutor: {ok, 0}}},
		// This server has no rootfs, so no package environments: a prepare
		// its policy allows gets past access and answers 503
		// SandboxUnavailable (one it denies would be a 403 PolicyDenied).
		{"POST", "/v1/prepare", `{"tenant_id":"{t}","requirements":["six"]}`,
			map[string]want{tenancy.RoleExecutor: {http.StatusServiceUnavailable, no}}},
		{"GET", "/v1/runtimes?tenant={t}", "",
			map[string]want{tenancy.RoleExecutor: {ok, no}, tenancy.RoleAdmin: {ok, ok}}},
		{"GET", "/v1/admin/tenants", "",
			map[string]want{tenancy.RoleAdmin: {ok, 0}}},
		{"GET", "/v1/admin/tenants/{t}/quota", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}, tenancy.RoleTenantAdmin: {ok, no}, tenancy.RoleAuditor: {ok, no}}},
		{"PUT", "/v1/admin/tenants/{t}/quota", `{"rate_per_minute":600,"burst":20,"concurrency":4,"daily_cpu_seconds":3600}`,
			map[string]want{tenancy.RoleAdmin: {ok, ok}}},
		{"DELETE", "/v1/admin/tenants/{t}/quota", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}}},
		{"GET", "/v1/admin/tenants/{t}/usage", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}, tenancy.RoleTenantAdmin: {ok, no}, tenancy.RoleAuditor: {ok, no}}},
		{"GET", "/v1/admin/tenants/{t}/tools", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}, tenancy.RoleTenantAdmin: {ok, no}, tenancy.RoleAuditor: {ok, no}}},
		// Admin only: a tenant-admin adding servers would make the gateway
		// connect, with its secrets, wherever the tenant says. (The admin's
		// DELETE finds the server its PUT above added.)
		{"PUT", "/v1/admin/tenants/{t}/tools/servers/crm", `{"url":"http://127.0.0.1:9/mcp"}`,
			map[string]want{tenancy.RoleAdmin: {ok, ok}}},
		{"DELETE", "/v1/admin/tenants/{t}/tools/servers/crm", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}}},
		{"POST", "/v1/admin/policy/evaluate", `{"tenant_id":"{t}","request":{"source":"x"}}`,
			map[string]want{tenancy.RoleAdmin: {ok, ok}, tenancy.RoleTenantAdmin: {ok, no}, tenancy.RolePolicyAuthor: {ok, no}}},
		{"POST", "/v1/executions", `{"tenant_id":"{t}","source":"def run(args, context):\n    return 1\n"}`,
			map[string]want{tenancy.RoleExecutor: {http.StatusAccepted, no}}},
		// No execution is named {t}: reaching the lookup is a 404.
		{"GET", "/v1/executions/{t}?tenant={t}", "",
			map[string]want{tenancy.RoleExecutor: {http.StatusNotFound, no}, tenancy.RoleAdmin: {http.StatusNotFound, http.StatusNotFound}}},
		{"GET", "/v1/executions/{t}/events?tenant={t}", "",
			map[string]want{tenancy.RoleExecutor: {http.StatusNotFound, no}, tenancy.RoleAdmin: {http.StatusNotFound, http.StatusNotFound}}},
		{"GET", "/v1/executions/{t}/artifacts/crm?tenant={t}", "",
			map[string]want{tenancy.RoleExecutor: {http.StatusNotFound, no}, tenancy.RoleAdmin: {http.StatusNotFound, http.StatusNotFound}}},
		{"DELETE", "/v1/executions/{t}?tenant={t}", "",
			map[string]want{tenancy.RoleExecutor: {http.StatusNotFound, no}, tenancy.RoleAdmin: {http.StatusNotFound, http.StatusNotFound}}},
		{"GET", "/v1/admin/audit?tenant={t}", "",
			map[string]want{tenancy.RoleAdmin: {ok, ok}, tenancy.RoleTenantAdmin: {ok, no}, tenancy.RoleAuditor: {ok, no}}},
		// No span of this trace is kept: reaching the lookup is a 404.
		{"GET", "/v1/admin/traces/" + noSuchTrace + "?tenant={t}", "",
			map[string]want{tenancy.RoleAdmin: {http.StatusNotFound, http.StatusNotFound}, tenancy.RoleAuditor: {http.StatusNotFound, no}}},
	}
	roles := append(tenancy.Roles(), "no-such-role")
	covered := map[string]bool{}
	for _, rt := range routes {
		covered[rt.method+" "+strings.SplitN(rt.path, "?", 2)[0]] = true
		for _, role := range roles {
			tok := s.token("demo", role)
			w := rt.want[role]
			if w.own == 0 {
				w = want{no, no}
				if !strings.Contains(rt.path+rt.body, "{t}") {
					w.other = 0
				}
			}
			for _, target := range []string{"demo", "globex"} {
				status := w.own
				if target == "globex" {
					status = w.other
				}
				if status == 0 {
					continue
				}
				name := role + " of demo on " + target + ": " + rt.method + " " + rt.path
				t.Run(name, func(t *testing.T) {
					path := strings.ReplaceAll(rt.path, "{t}", target)
					var body any
					if rt.body != "" {
						body = strings.ReplaceAll(rt.body, "{t}", target)
					}
					r := s.do(rt.method, path, tok, body)
					if r.status != status {
						t.Fatalf("got %d, want %d: %.400s", r.status, status, r.body)
					}
					if status == no {
						if r.errType(t) != "Forbidden" {
							t.Fatalf("error.type = %q, want Forbidden: %s", r.errType(t), r.body)
						}
						for _, leak := range []string{secret, "9191917", "8383838", "enterprise"} {
							if strings.Contains(string(r.body), leak) {
								t.Fatalf("the refusal reveals globex's data (%q): %s", leak, r.body)
							}
						}
						if target == "globex" {
							// Nothing tells a real other tenant from a
							// made-up one.
							fake := s.do(rt.method, strings.ReplaceAll(rt.path, "{t}", "nosuch"), tok,
								map[bool]any{true: strings.ReplaceAll(rt.body, "{t}", "nosuch"), false: nil}[rt.body != ""])
							msg := func(r response) string {
								e, _ := r.json(t)["error"].(map[string]any)
								m, _ := e["message"].(string)
								return strings.ReplaceAll(m, "nosuch", "globex")
							}
							if fake.status != r.status || msg(fake) != msg(r) {
								t.Fatalf("another tenant and an unknown one are told apart:\n%s\n%s", r.body, fake.body)
							}
						}
					}
					if status == ok && role != tenancy.RoleAdmin && strings.Contains(string(r.body), secret) {
						t.Fatalf("a tenant-scoped role saw globex's data: %s", r.body)
					}
				})
			}
		}
	}
	for _, rt := range s.app.Server().Routes() {
		p := strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(rt.Path, ":id", "{t}"), ":name", "crm"), ":trace_id", noSuchTrace)
		if strings.HasPrefix(p, "/v1/") && !covered[rt.Method+" "+p] {
			t.Errorf("route %s %s is not in the role matrix", rt.Method, rt.Path)
		}
	}
}
