package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

// bearer adds a bearer token to every request of an MCP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the official Go SDK's client to POST /mcp with token.
func mcpSession(t *testing.T, s *server, token string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "execgate-test", Version: "v0"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.app.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}, Timeout: 60 * time.Second},
	}, nil)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// callTool calls a tool and decodes its structured content.
func callTool(t *testing.T, sess *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	if err := json.Unmarshal(b, &sc); err != nil || sc == nil {
		t.Fatalf("%s: structured content is not an object: %s", name, b)
	}
	return res, sc
}

func toolText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func errorTypeOf(sc map[string]any) string {
	e, _ := sc["error"].(map[string]any)
	typ, _ := e["type"].(string)
	return typ
}

// DESIGN §14: POST /mcp serves the tools over MCP streamable HTTP with the
// same auth, policy, quotas, idempotency and audit as /v1/execute. The
// client is the official Go SDK's; the sandbox is real.
func TestMCPToolsRunThroughTheExecuteFlow(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		limited := config.DemoTenant()
		limited.ID, limited.Quota = "limited", quota.Limits{RatePerMinute: 1, Burst: 1, Concurrency: 4, DailyCPUSeconds: 3600}
		c.Tenants = append(c.Tenants, limited)
	}})
	sess := mcpSession(t, s, s.token("demo"))

	t.Run("the tools are listed with their input schemas", func(t *testing.T) {
		res, err := sess.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
			if tool.InputSchema == nil {
				t.Errorf("%s has no input schema", tool.Name)
			}
			// The execute tools take every field of the execute body but
			// language (the tool's) and tenant_id (the token's).
			if strings.HasPrefix(tool.Name, "execute_") {
				b, _ := json.Marshal(tool.InputSchema)
				var schema struct {
					Properties map[string]any `json:"properties"`
				}
				_ = json.Unmarshal(b, &schema)
				for _, f := range []string{"source", "entrypoint", "args", "execution_id", "requirements", "network_access", "egress", "limits", "mode", "isolation", "secrets", "fixtures", "files", "stdin"} {
					if _, ok := schema.Properties[f]; !ok {
						t.Errorf("%s's input schema lacks %s", tool.Name, f)
					}
				}
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"execute_javascript", "execute_python", "validate"}) {
			t.Fatalf("tools = %v, want execute_javascript, execute_python and validate", names)
		}
	})

	t.Run("execute_javascript runs a JavaScript tool under Deno and returns the envelope", func(t *testing.T) {
		res, env := callTool(t, sess, "execute_javascript", map[string]any{
			"source": "export async function run(args, context) {\n  return {sum: args.a + args.b, tenant: context.tenantId}\n}\n",
			"args":   map[string]any{"a": 2, "b": 40},
		})
		if res.IsError || env["status"] != "ok" {
			t.Fatalf("isError=%v envelope=%v", res.IsError, env)
		}
		if r, _ := env["result"].(map[string]any); r["sum"] != float64(42) || r["tenant"] != "demo" {
			t.Fatalf("result = %v", env["result"])
		}
	})

	t.Run("execute_python runs the tool and returns the envelope", func(t *testing.T) {
		before := s.runs.Load()
		res, env := callTool(t, sess, "execute_python", map[string]any{
			"execution_id": "mcp-ok",
			"source":       "def run(args, context):\n    print('hello from', args['who'])\n    return {'sum': args['a'] + args['b']}\n",
			"args":         map[string]any{"a": 2, "b": 3, "who": "mcp"},
		})
		if res.IsError || env["status"] != "ok" {
			t.Fatalf("isError=%v envelope=%v", res.IsError, env)
		}
		if r, _ := env["result"].(map[string]any); r["sum"] != float64(5) {
			t.Fatalf("result = %v", env["result"])
		}
		if env["tenant_id"] != "demo" || env["execution_id"] != "mcp-ok" || env["trace_id"] == "" || !strings.Contains(env["stdout"].(string), "hello from mcp") {
			t.Fatalf("envelope = %v", env)
		}
		if txt := toolText(res); !strings.Contains(txt, `"sum":5`) || !strings.Contains(txt, "hello from mcp") {
			t.Fatalf("text part = %q", txt)
		}
		if got := s.runs.Load() - before; got != 1 {
			t.Fatalf("%d runs reached the sandbox, want 1", got)
		}

		// The same execution_id again: the first answer, not a second run.
		res2, env2 := callTool(t, sess, "execute_python", map[string]any{
			"execution_id": "mcp-ok",
			"source":       "def run(args, context):\n    print('hello from', args['who'])\n    return {'sum': args['a'] + args['b']}\n",
			"args":         map[string]any{"a": 2, "b": 3, "who": "mcp"},
		})
		if res2.IsError || env2["trace_id"] != env["trace_id"] || s.runs.Load()-before != 1 {
			t.Fatalf("the retry ran again or answered differently: runs=%d\nfirst  %v\nsecond %v", s.runs.Load()-before, env, env2)
		}
		// And over HTTP: one idempotency space per tenant.
		r := s.execute(s.token("demo"), map[string]any{
			"execution_id": "mcp-ok",
			"source":       "def run(args, context):\n    print('hello from', args['who'])\n    return {'sum': args['a'] + args['b']}\n",
			"args":         map[string]any{"a": 2, "b": 3, "who": "mcp"},
		})
		if r.status != 200 || r.json(t)["trace_id"] != env["trace_id"] || s.runs.Load()-before != 1 {
			t.Fatalf("HTTP retry of an MCP run: %d runs, %s", s.runs.Load()-before, r.body)
		}
	})

	t.Run("a tool that raises is a tool error with the envelope", func(t *testing.T) {
		res, env := callTool(t, sess, "execute_python", map[string]any{"source": "def run(args, context):\n    raise ValueError('nope')\n"})
		if !res.IsError || errorTypeOf(env) != "ToolError" || !strings.Contains(toolText(res), "ToolError") {
			t.Fatalf("isError=%v envelope=%v text=%q", res.IsError, env, toolText(res))
		}
	})

	t.Run("a policy denial is a tool error, audited under the caller's tenant", func(t *testing.T) {
		before := s.runs.Load()
		res, env := callTool(t, sess, "execute_python", map[string]any{
			"execution_id":   "mcp-denied",
			"source":         "def run(args, context):\n    return 1\n",
			"network_access": "host",
		})
		if !res.IsError || errorTypeOf(env) != "PolicyDenied" {
			t.Fatalf("isError=%v envelope=%v", res.IsError, env)
		}
		if e := env["error"].(map[string]any); len(e["reasons"].([]any)) == 0 {
			t.Fatalf("PolicyDenied without reasons: %v", env)
		}
		if !strings.Contains(toolText(res), "PolicyDenied") {
			t.Fatalf("text part = %q", toolText(res))
		}
		if s.runs.Load() != before {
			t.Fatal("a denied call reached the sandbox")
		}
		var found map[string]any
		for _, l := range s.auditLines() {
			if l["execution_id"] == "mcp-denied" {
				found = l
			}
		}
		if found == nil {
			t.Fatal("no audit record for the denied MCP call")
		}
		out, _ := found["outcome"].(map[string]any)
		if found["tenant_id"] != "demo" || found["subject"] != "tester" || out["error_type"] != "PolicyDenied" {
			t.Fatalf("audit record = %v", found)
		}
	})

	t.Run("isolation asks the policy for a level, as over HTTP", func(t *testing.T) {
		before := s.runs.Load()
		res, env := callTool(t, sess, "execute_python", map[string]any{
			"source":    "def run(args, context):\n    return 1\n",
			"isolation": "process",
		})
		reasons, _ := env["error"].(map[string]any)["reasons"].([]any)
		if !res.IsError || errorTypeOf(env) != "PolicyDenied" || len(reasons) != 1 || reasons[0] != `isolation "process" is not allowed for tenant "demo" (its levels: jail)` {
			t.Fatalf("isError=%v envelope=%v", res.IsError, env)
		}
		if s.runs.Load() != before {
			t.Fatal("a denied call reached the sandbox")
		}
	})

	t.Run("the successful call is in the audit log too", func(t *testing.T) {
		n := 0
		for _, l := range s.auditLines() {
			if l["execution_id"] == "mcp-ok" && l["tenant_id"] == "demo" {
				n++
			}
		}
		if n < 1 {
			t.Fatal("no audit record for execution mcp-ok under tenant demo")
		}
	})

	t.Run("a bad argument is a tool error naming the field", func(t *testing.T) {
		res, env := callTool(t, sess, "execute_python", map[string]any{"source": "x", "language": "python"})
		if !res.IsError || errorTypeOf(env) != "BadRequest" || !strings.Contains(toolText(res), "language") {
			t.Fatalf("isError=%v envelope=%v", res.IsError, env)
		}
	})

	t.Run("validate answers in the jail", func(t *testing.T) {
		res, out := callTool(t, sess, "validate", map[string]any{"source": "def run(args, context):\n    return 1\n"})
		if res.IsError || out["valid"] != true {
			t.Fatalf("valid source: %v", out)
		}
		res, out = callTool(t, sess, "validate", map[string]any{"source": "def run(:\n"})
		if res.IsError || out["valid"] != false || !strings.Contains(toolText(res), "line 1") {
			t.Fatalf("broken source: %v %q", out, toolText(res))
		}
	})

	t.Run("a 429 is a tool error carrying Retry-After", func(t *testing.T) {
		lim := mcpSession(t, s, s.token("limited"))
		var last *mcp.CallToolResult
		var env map[string]any
		for range 2 {
			last, env = callTool(t, lim, "execute_python", map[string]any{"source": "def run(args, context):\n    return 1\n"})
		}
		if !last.IsError || errorTypeOf(env) != "QuotaExceeded" || env["tenant_id"] != "limited" {
			t.Fatalf("second call of a 1/min tenant: isError=%v %v", last.IsError, env)
		}
		if ra, _ := last.Meta["retry_after_seconds"].(string); ra == "" || ra == "0" || !strings.Contains(toolText(last), "retry after "+ra+" s") {
			t.Fatalf("no Retry-After: meta=%v text=%q", last.Meta, toolText(last))
		}
	})
}

// /mcp is behind the same authentication and access table as the rest.
func TestMCPNeedsAnExecutorToken(t *testing.T) {
	s := start(t, setup{noop: true})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	for _, c := range []struct {
		name, token string
		status      int
		errType     string
	}{
		{"no token is a 401", "", 401, "Unauthenticated"},
		{"an auditor is a 403", s.token("demo", tenancy.RoleAuditor), 403, "Forbidden"},
		{"an unknown tenant is a 403", s.token("initech"), 403, "Forbidden"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.app.URL()+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := s.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var m map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&m)
			if resp.StatusCode != c.status || errorTypeOf(m) != c.errType {
				t.Fatalf("got %d %v, want %d %s", resp.StatusCode, m, c.status, c.errType)
			}
		})
	}
	t.Run("a GET is refused: the transport is stateless", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, s.app.URL()+"/mcp", nil)
		req.Header.Set("Authorization", "Bearer "+s.token("demo"))
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET /mcp: %d", resp.StatusCode)
		}
	})
}
