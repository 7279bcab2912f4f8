package app_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Tool servers over the admin API (issue #13): an admin adds a server to a
// tenant, a run of that tenant calls it through the real bridge (real
// nsjail, a real MCP server on loopback that requires a bearer token read
// from a secret file), a second gateway on the same Redis sees it, and
// deleting it takes the tool away.

type toolsAdmin struct {
	mcp    *toolbridgetest.Server
	token  string // the MCP server's bearer token: the secret
	secret string // the file holding "Bearer <token>"
	redis  string // the Redis URL both gateways share
}

func newToolsAdmin(t *testing.T) *toolsAdmin {
	ta := &toolsAdmin{token: "ta-token-" + strings.Repeat("k", 16) + "-zz"}
	ta.mcp = toolbridgetest.Start(t, ta.token)
	ta.secret = filepath.Join(t.TempDir(), "crm-token")
	if err := os.WriteFile(ta.secret, []byte("Bearer "+ta.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ta.redis = testenv.Redis(t).URL()
	return ta
}

// gateway starts a gateway on the shared Redis whose tenant acme has the
// config server "math" (allow add) and is granted crm.* and math.*.
func (ta *toolsAdmin) gateway(t *testing.T) *server {
	hdr := map[string]toolconfig.Secret{"Authorization": {File: ta.secret}}
	return start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Quota.Backend = "redis"
		c.Quota.RedisURL = ta.redis
		c.ToolsAPI.SecretDirs = []string{filepath.Dir(ta.secret)}
		for i := range c.Tenants {
			if c.Tenants[i].ID != "acme" {
				continue
			}
			c.Tenants[i].Policy["tools"] = []any{"math.*", "crm.*"}
			// The waits below poll with runs; the rate quota is not under
			// test here and must not end a slow poll with a 429.
			c.Tenants[i].Quota = quota.Limits{RatePerMinute: 600000, Burst: 10000, Concurrency: 16, DailyCPUSeconds: 1000000}
			c.Tenants[i].Tools = toolconfig.Config{Servers: []toolconfig.Server{
				{Name: "math", URL: ta.mcp.URL, Headers: hdr, Allow: []string{"add"}},
			}}
		}
	}})
}

var pollSeq atomic.Int64

// runAcmeTool runs a program of acme calling tool with args on s and returns
// ["ok", result] or [outcome, message].
func runAcmeTool(t *testing.T, s *server, id, tool string, args map[string]any) string {
	t.Helper()
	src := `
from execgate_runtime import ToolFailure

def run(args, context):
    try:
        return ["ok", context.tools.run(args["tool"], args["args"])]
    except ToolFailure as e:
        return [type(e).__name__, str(e)]
`
	if id == "" {
		id = fmt.Sprintf("ta-poll-%d", pollSeq.Add(1))
	}
	r := s.execute(s.token("acme"), map[string]any{"execution_id": id, "source": src, "args": map[string]any{"tool": tool, "args": args},
		"limits": map[string]any{"timeout_ms": 20000, "cpu_ms": 20000}})
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	env := r.json(t)
	mustOK(t, env)
	return asJSON(env["result"])
}

// serverSources is name=source of the GET .../tools answer.
func serverSources(t *testing.T, r response) string {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out []string
	for _, s := range r.json(t)["servers"].([]any) {
		m := s.(map[string]any)
		out = append(out, m["name"].(string)+"="+m["source"].(string))
	}
	return strings.Join(out, ",")
}

const toolsPath = "/v1/admin/tenants/acme/tools"

func TestToolServersOverTheAdminAPI(t *testing.T) {
	ta := newToolsAdmin(t)
	g1 := ta.gateway(t)
	admin := g1.token("demo", tenancy.RoleAdmin)
	crm := map[string]any{
		"url":     ta.mcp.URL,
		"headers": map[string]any{"Authorization": map[string]any{"file": ta.secret}},
		"allow":   []string{"add"},
	}

	t.Run("only a platform admin may change tool servers", func(t *testing.T) {
		for _, roles := range [][]string{{tenancy.RoleTenantAdmin}, {tenancy.RoleExecutor}, {tenancy.RoleAuditor}, {tenancy.RolePolicyAuthor}} {
			tok := g1.token("acme", roles...)
			if r := g1.do(http.MethodPut, toolsPath+"/servers/crm", tok, crm); r.status != http.StatusForbidden {
				t.Errorf("%v PUT: %d %s", roles, r.status, r.body)
			}
			if r := g1.do(http.MethodDelete, toolsPath+"/servers/math", tok, nil); r.status != http.StatusForbidden {
				t.Errorf("%v DELETE: %d %s", roles, r.status, r.body)
			}
		}
		if got := runAcmeTool(t, g1, "ta-before", "crm.add", map[string]any{"a": 1, "b": 2}); !strings.HasPrefix(got, `["ToolDenied"`) {
			t.Errorf("before any PUT crm.add gave %s", got)
		}
	})

	t.Run("a literal secret or a command is refused, naming the field", func(t *testing.T) {
		literal := "Bearer " + ta.token
		cases := []struct {
			body  any
			field string
		}{
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": literal}}, "headers.Authorization:"},
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": map[string]any{"value": literal}}}, "headers.Authorization.value:"},
			{map[string]any{"command": []string{"/bin/sh", "-c", "id"}}, "command:"},
			{map[string]any{"url": ta.mcp.URL, "env": map[string]any{"X": map[string]any{"env": "HOME"}}}, "env:"},
			{map[string]any{"url": "file:///etc/passwd"}, "url:"},
			// Secret references only within tools_api's scope: not the
			// gateway's other files or its own variables.
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": map[string]any{"file": "/etc/passwd"}}}, "headers.Authorization.file:"},
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": map[string]any{"file": filepath.Dir(ta.secret) + "/../crm-token"}}}, "headers.Authorization.file:"},
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": map[string]any{"env": "EXECGATE_QUOTA_REDIS_URL"}}}, "headers.Authorization.env:"},
			{map[string]any{"url": ta.mcp.URL, "headers": map[string]any{"Authorization": map[string]any{"file": filepath.Dir(ta.secret) + "/missing"}}}, "headers.Authorization:"},
			{map[string]any{"url": ta.mcp.URL, "allow": []string{"["}}, "allow:"},
			{map[string]any{"url": ta.mcp.URL, "timeout_ms": 10_000_000}, "timeout_ms:"},
		}
		for _, tc := range cases {
			r := g1.do(http.MethodPut, toolsPath+"/servers/crm", admin, tc.body)
			if r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" {
				t.Errorf("%s: %d %s", asJSON(tc.body), r.status, r.body)
				continue
			}
			msg := r.json(t)["error"].(map[string]any)["message"].(string)
			if !strings.HasPrefix(msg, tc.field) {
				t.Errorf("%s: message %q does not name %s", asJSON(tc.body), msg, tc.field)
			}
			if strings.Contains(string(r.body), ta.token) {
				t.Errorf("the refusal echoes the secret: %s", r.body)
			}
		}
		if r := g1.do(http.MethodPut, toolsPath+"/servers/Bad.Name", admin, crm); r.status != http.StatusBadRequest {
			t.Errorf("a bad name: %d %s", r.status, r.body)
		}
		if got := serverSources(t, g1.do(http.MethodGet, toolsPath, admin, nil)); got != "math=config" {
			t.Errorf("refused PUTs changed the servers: %s", got)
		}
	})

	t.Run("an added server is called by a run, here and on another gateway", func(t *testing.T) {
		r := g1.do(http.MethodPut, toolsPath+"/servers/crm", admin, crm)
		if got := serverSources(t, r); got != "math=config,crm=api" {
			t.Fatalf("after PUT: %s", got)
		}
		if strings.Contains(string(r.body), ta.token) || strings.Contains(string(r.body), ta.secret) {
			t.Errorf("the PUT answer shows the secret or its file: %s", r.body)
		}
		if got := runAcmeTool(t, g1, "ta-crm-1", "crm.add", map[string]any{"a": 40, "b": 2}); got != `["ok",{"sum":42}]` {
			t.Errorf("crm.add on the gateway that took the PUT: %s", got)
		}
		if got := runAcmeTool(t, g1, "ta-crm-upper", "crm.upper", map[string]any{"s": "x"}); !strings.HasPrefix(got, `["ToolDenied"`) {
			t.Errorf("crm.upper is outside allow, got %s", got)
		}
		g2 := ta.gateway(t) // a second replica on the same Redis
		admin2 := g2.token("demo", tenancy.RoleAdmin)
		if got := serverSources(t, g2.do(http.MethodGet, toolsPath, admin2, nil)); got != "math=config,crm=api" {
			t.Errorf("the second gateway sees %s", got)
		}
		if got := runAcmeTool(t, g2, "ta-crm-2", "crm.add", map[string]any{"a": 1, "b": 2}); got != `["ok",{"sum":3}]` {
			t.Errorf("crm.add on the second gateway: %s", got)
		}

		// An API server replaces the config server of its name; DELETE
		// brings the config one back.
		over := map[string]any{"url": ta.mcp.URL, "headers": crm["headers"], "allow": []string{"upper"}}
		if got := serverSources(t, g1.do(http.MethodPut, toolsPath+"/servers/math", admin, over)); got != "math=api,crm=api" {
			t.Errorf("after overriding math: %s", got)
		}
		if got := runAcmeTool(t, g1, "ta-math-over", "math.add", map[string]any{"a": 1, "b": 1}); !strings.HasPrefix(got, `["ToolDenied"`) {
			t.Errorf("math.add under the override (allow upper) gave %s", got)
		}
		waitFor(t, "the second gateway to apply the override", 10*time.Second, func() bool {
			return strings.HasPrefix(runAcmeTool(t, g2, "", "math.add", map[string]any{"a": 1, "b": 1}), `["ToolDenied"`)
		})
		if got := serverSources(t, g1.do(http.MethodDelete, toolsPath+"/servers/math", admin, nil)); got != "math=config,crm=api" {
			t.Errorf("after deleting the math override: %s", got)
		}
		if got := runAcmeTool(t, g1, "ta-math-back", "math.add", map[string]any{"a": 2, "b": 2}); got != `["ok",{"sum":4}]` {
			t.Errorf("math.add after the override is gone: %s", got)
		}

		// Delete: the tool is gone, here and (within the TTL) there.
		if got := serverSources(t, g1.do(http.MethodDelete, toolsPath+"/servers/crm", admin, nil)); got != "math=config" {
			t.Errorf("after DELETE: %s", got)
		}
		if got := runAcmeTool(t, g1, "ta-crm-gone", "crm.add", map[string]any{"a": 1, "b": 2}); !strings.HasPrefix(got, `["ToolDenied"`) {
			t.Errorf("crm.add after DELETE: %s", got)
		}
		waitFor(t, "the second gateway to drop crm", 10*time.Second, func() bool {
			return strings.HasPrefix(runAcmeTool(t, g2, "", "crm.add", map[string]any{"a": 1, "b": 2}), `["ToolDenied"`)
		})
		if r := g1.do(http.MethodDelete, toolsPath+"/servers/crm", admin, nil); r.status != http.StatusNotFound {
			t.Errorf("a second DELETE: %d %s", r.status, r.body)
		}
		if r := g1.do(http.MethodDelete, toolsPath+"/servers/math", admin, nil); r.status != http.StatusNotFound {
			t.Errorf("DELETE of a config server: %d %s", r.status, r.body)
		}

		// The secret was sent to the server, and is nowhere in what the
		// gateways answered, logged or audited.
		if len(ta.mcp.Authorizations()) == 0 {
			t.Fatal("the MCP server saw no request")
		}
		for i, g := range []*server{g1, g2} {
			if strings.Contains(g.logs.String(), ta.token) {
				t.Errorf("gateway %d logged the secret", i+1)
			}
			if strings.Contains(asJSON(g.auditLines()), ta.token) {
				t.Errorf("gateway %d audited the secret", i+1)
			}
			if !strings.Contains(g1.logs.String(), "tool server set") {
				t.Errorf("gateway 1 did not log the change")
			}
		}
	})
}
