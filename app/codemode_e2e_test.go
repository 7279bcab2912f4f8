package app_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/audit/audittest"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Code mode end to end: the real gateway, OPA, nsjail and harness, and a
// real MCP tool server (official Go SDK) on loopback that requires a bearer
// token the gateway reads from a secret file.

const cmShellRule = `package execgate.main

deny_tool_call contains "shell.* is denied for role executor" if {
	glob.match("shell.*", ["."], input.call.tool)
	"executor" in input.subject.roles
}
`

type codeMode struct {
	*server
	mcp   *toolbridgetest.Server
	token string
}

// startCodeMode starts an MCP server and a gateway whose tenant acme has it
// as math (add, upper, slow, big, fail; 1 s timeout), pay (charge), shell
// (exec) and bulk (big; 30 s timeout), all granted; at most 2 pay.* and 3
// math.slow calls per run (tenant data) and no shell.* for executors (a
// policy module).
func startCodeMode(t *testing.T, maxCalls int) *codeMode {
	t.Helper()
	return startCodeModeWith(t, func(c *toolconfig.Config) { c.Limits.MaxCalls = maxCalls })
}

// startCodeModeWith is startCodeMode with acme's tools config changed by mod.
func startCodeModeWith(t *testing.T, mod func(*toolconfig.Config)) *codeMode {
	t.Helper()
	cm := &codeMode{token: "cm-token-" + strings.Repeat("q", 16) + "-zz"}
	cm.mcp = toolbridgetest.Start(t, cm.token)
	secret := filepath.Join(t.TempDir(), "math-token")
	if err := os.WriteFile(secret, []byte("Bearer "+cm.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]toolconfig.Secret{"Authorization": {File: secret}}
	policyDir := writePolicyDir(t, map[string]string{"shell.rego": cmShellRule})
	cm.server = start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Policy.Dirs = []string{policyDir}
		for i := range c.Tenants {
			if c.Tenants[i].ID != "acme" {
				continue
			}
			c.Tenants[i].Policy["tools"] = []any{"math.*", "pay.*", "shell.*", "bulk.*"}
			c.Tenants[i].Policy["tool_calls"] = map[string]any{"max_per_run": map[string]any{"pay.*": 2, "math.slow": 3}}
			c.Tenants[i].Tools = toolconfig.Config{
				Servers: []toolconfig.Server{
					{Name: "math", URL: cm.mcp.URL, Headers: hdr, Allow: []string{"add", "upper", "slow", "big", "fail"}, TimeoutMS: 1000, MaxResultBytes: 256 << 10},
					{Name: "pay", URL: cm.mcp.URL, Headers: hdr, Allow: []string{"charge"}},
					{Name: "shell", URL: cm.mcp.URL, Headers: hdr, Allow: []string{"exec"}},
					{Name: "bulk", URL: cm.mcp.URL, Headers: hdr, Allow: []string{"big"}, TimeoutMS: 30000, MaxResultBytes: 256 << 10},
				},
			}
			mod(&c.Tenants[i].Tools)
		}
	}})
	return cm
}

// run executes source for acme and returns the envelope.
func (cm *codeMode) run(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	if _, ok := body["limits"]; !ok {
		body["limits"] = map[string]any{"timeout_ms": 20000, "cpu_ms": 20000}
	}
	r := cm.execute(cm.server.token("acme"), body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	return r.json(t)
}

// auditFor returns the audit record of execution id, checked against the
// record's JSON Schema.
func (cm *codeMode) auditFor(t *testing.T, id string) map[string]any {
	t.Helper()
	for _, l := range cm.auditLines() {
		if l["execution_id"] == id {
			raw, _ := json.Marshal(l)
			if err := audittest.ValidateLine(audittest.Schema(t), raw); err != nil {
				t.Errorf("the audit record of %s does not match the schema: %v", id, err)
			}
			return l
		}
	}
	t.Fatalf("no audit record for %s", id)
	return nil
}

func mustOK(t *testing.T, env map[string]any) {
	t.Helper()
	if env["status"] != "ok" {
		b, _ := json.MarshalIndent(env, "", "  ")
		t.Fatalf("run failed:\n%s", b)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCodeModeProgramSearchesDescribesAndRunsTwoTools(t *testing.T) {
	cm := startCodeMode(t, 0)
	src := `
def run(args, context):
    found = [t["name"] for t in context.tools.search("add")]
    schema = context.tools.describe("math.add")["input_schema"]
    total = context.tools.run("math.add", {"a": args["a"], "b": args["b"]})["sum"]
    shout = context.tools.run("math.upper", {"s": "total"})["text"]
    return {"found": found, "props": sorted(schema["properties"]), "answer": "%s=%d" % (shout, total)}
`
	env := cm.run(t, map[string]any{"execution_id": "cm-two", "source": src, "args": map[string]any{"a": 40, "b": 2}})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `{"answer":"TOTAL=42","found":["math.add"],"props":["a","b"]}` {
		t.Errorf("result %s", got)
	}
	calls, _ := env["tool_calls"].([]any)
	if len(calls) != 2 {
		t.Fatalf("envelope tool_calls: %s", asJSON(env["tool_calls"]))
	}
	for i, want := range []string{"math.add", "math.upper"} {
		c := calls[i].(map[string]any)
		if c["tool"] != want || c["server"] != "math" || c["outcome"] != "ok" || c["decision_id"] == "" {
			t.Errorf("tool_calls[%d] = %v", i, c)
		}
	}
	rec := cm.auditFor(t, "cm-two")
	runDecision := rec["decision"].(map[string]any)["id"]
	rcalls, _ := rec["tool_calls"].([]any)
	if len(rcalls) != 2 {
		t.Fatalf("audit tool_calls: %s", asJSON(rec["tool_calls"]))
	}
	for i, want := range []string{"math.add", "math.upper"} {
		c := rcalls[i].(map[string]any)
		if c["tool"] != want || c["outcome"] != "ok" || c["decision_id"] == "" || c["decision_id"] == runDecision || len(c["args_sha256"].(string)) != 64 || c["args"] != nil || c["bytes_in"].(float64) == 0 || c["bytes_out"].(float64) == 0 {
			t.Errorf("audit tool_calls[%d] = %v", i, c)
		}
	}
	// Each call is a span in the run's trace.
	var spans int
	for _, s := range cm.spans.Ended() {
		if s.Name() == "tool.call" && s.SpanContext().TraceID().String() == env["trace_id"] {
			spans++
		}
	}
	if spans != 2 {
		t.Errorf("%d tool.call spans in the run's trace, want 2", spans)
	}
	if n := cm.mcp.Calls("add") + cm.mcp.Calls("upper"); n != 2 {
		t.Errorf("the server answered %d calls, want 2", n)
	}
}

func TestCodeModeDeniedCallsAreTypedAuditedAndNeverReachTheServer(t *testing.T) {
	cm := startCodeMode(t, 0)
	src := `
from execgate_runtime import ToolDenied

def run(args, context):
    out = []
    for name, a in [("crm.lookup", {}), ("shell.exec", {"cmd": "id"}), ("pay.charge", {"amount": 1}),
                    ("pay.charge", {"amount": 2}), ("pay.charge", {"amount": 3})]:
        try:
            out.append(["ok", context.tools.run(name, a)])
        except ToolDenied as e:
            out.append(["denied", e.reason])
    return out
`
	env := cm.run(t, map[string]any{"execution_id": "cm-deny", "source": src})
	mustOK(t, env)
	want := `[["denied","tool \"crm.lookup\" is not granted to this run"],["denied","denied by policy: shell.* is denied for role executor"],` +
		`["ok",{"charged":1}],["ok",{"charged":2}],["denied","denied by policy: at most 2 calls to pay.* per run"]]`
	if got := asJSON(env["result"]); got != want {
		t.Errorf("result\n%s\nwant\n%s", got, want)
	}
	if cm.mcp.Calls("exec") != 0 || cm.mcp.Calls("charge") != 2 {
		t.Errorf("server saw exec %d, charge %d; want 0, 2", cm.mcp.Calls("exec"), cm.mcp.Calls("charge"))
	}
	rec := cm.auditFor(t, "cm-deny")
	rcalls, _ := rec["tool_calls"].([]any)
	if len(rcalls) != 5 {
		t.Fatalf("audit tool_calls: %s", asJSON(rec["tool_calls"]))
	}
	shell := rcalls[1].(map[string]any)
	if shell["outcome"] != "ToolDenied" || shell["decision_id"] == "" || !strings.Contains(shell["reason"].(string), "role executor") {
		t.Errorf("the policy-denied call is audited as %v", shell)
	}
	if c := rcalls[0].(map[string]any); c["outcome"] != "ToolDenied" || !strings.Contains(c["reason"].(string), "not granted") {
		t.Errorf("the ungranted call is audited as %v", c)
	}
}

func TestCodeModeFailuresAreTypedInsideTheTool(t *testing.T) {
	cm := startCodeMode(t, 0)
	src := `
from execgate_runtime import ToolFailed, ToolTimeout, ToolUnavailable

def run(args, context):
    out = {}
    for key, name, a in [("slow", "math.slow", {"ms": 5000}), ("big", "bulk.big", {"bytes": 50 << 20}),
                         ("fail", "math.fail", {}), ("schema", "math.add", {"a": "x", "b": 1})]:
        try:
            context.tools.run(name, a)
            out[key] = "ok"
        except (ToolFailed, ToolTimeout, ToolUnavailable) as e:
            out[key] = type(e).__name__
    return out
`
	env := cm.run(t, map[string]any{"source": src})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `{"big":"ToolFailed","fail":"ToolFailed","schema":"ToolFailed","slow":"ToolTimeout"}` {
		t.Errorf("result %s", got)
	}
	cm.mcp.Close()
	env = cm.run(t, map[string]any{"source": `
from execgate_runtime import ToolUnavailable

def run(args, context):
    try:
        context.tools.run("math.add", {"a": 1, "b": 2})
    except ToolUnavailable as e:
        return e.reason
`})
	mustOK(t, env)
	if got := asJSON(env["result"]); !strings.Contains(got, "unavailable") || strings.Contains(got, "127.0.0.1") {
		t.Errorf("a down server: %s", got)
	}
}

func TestCodeModeCredentialIsNotFindableInTheJailOrInRecords(t *testing.T) {
	cm := startCodeMode(t, 0)
	// The tool makes a call first (the session and its credential are
	// live), then scans every readable file and every process's environ
	// and cmdline for the token.
	src := `
import os

def run(args, context):
    needle = args["needle"].encode()
    context.tools.run("math.add", {"a": 1, "b": 1})
    hits, scanned = [], 0
    for root, dirs, files in os.walk("/", followlinks=False):
        if root in ("/proc", "/sys"):
            dirs[:] = [d for d in dirs if d.isdigit()] if root == "/proc" else []
            files = [] if root == "/sys" else files
        if root.startswith("/proc/"):
            dirs[:] = []
            files = [f for f in files if f in ("environ", "cmdline")]
        for f in files:
            p = os.path.join(root, f)
            try:
                with open(p, "rb") as fh:
                    data = fh.read(64 << 20)
            except OSError:
                continue
            scanned += 1
            if needle in data:
                hits.append(p)
    return {"hits": hits, "scanned": scanned}
`
	// The needle comes in args, which the jail holds in memory only.
	env := cm.run(t, map[string]any{"execution_id": "cm-secret", "source": src, "args": map[string]any{"needle": cm.token},
		"limits": map[string]any{"timeout_ms": 60000, "cpu_ms": 60000}})
	mustOK(t, env)
	res := env["result"].(map[string]any)
	if hits := res["hits"].([]any); len(hits) != 0 {
		t.Errorf("the token is readable inside the jail at %v", hits)
	}
	if res["scanned"].(float64) < 100 {
		t.Errorf("only %v files scanned: the scan did not run", res["scanned"])
	}
	// The args carry the token (on purpose, as the needle): strip that one
	// place and look everywhere else.
	rec := cm.auditFor(t, "cm-secret")
	if strings.Contains(asJSON(rec), cm.token) {
		t.Errorf("the audit record carries the token")
	}
	if strings.Contains(cm.logs.String(), cm.token) {
		t.Errorf("the log carries the token")
	}
	for _, s := range cm.spans.Ended() {
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.String(), cm.token) {
				t.Errorf("span %s attribute %s carries the token", s.Name(), a.Key)
			}
		}
	}
	for _, h := range cm.mcp.Authorizations() {
		if h != "Bearer "+cm.token {
			t.Fatalf("the server saw Authorization %q: the credential did not reach it", h)
		}
	}
	if len(cm.mcp.Authorizations()) == 0 {
		t.Fatal("the server saw no request")
	}
}

func TestCodeModeFloodIsCutAtTheLimitAndOtherTenantsAreUnaffected(t *testing.T) {
	cm := startCodeMode(t, 50)
	src := `
from execgate_runtime import ToolDenied

def run(args, context):
    ok = denied = 0
    for i in range(10000):
        try:
            context.tools.run("math.add", {"a": i, "b": 1})
            ok += 1
        except ToolDenied:
            denied += 1
    return [ok, denied]
`
	var wg sync.WaitGroup
	var flood map[string]any
	wg.Add(1)
	go func() {
		defer wg.Done()
		flood = cm.run(t, map[string]any{"execution_id": "cm-flood", "source": src, "limits": map[string]any{"timeout_ms": 60000, "cpu_ms": 60000}})
	}()
	// Meanwhile the demo tenant's runs go through as usual.
	for i := range 3 {
		start := time.Now()
		r := cm.execute(cm.server.token("demo"), map[string]any{"execution_id": "demo-during-flood-" + string(rune('a'+i)), "source": obsOKSource})
		if r.status != http.StatusOK || r.json(t)["status"] != "ok" {
			t.Errorf("demo run %d during the flood: %d %s", i, r.status, r.body)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("demo run %d took %v during the flood", i, d)
		}
	}
	wg.Wait()
	mustOK(t, flood)
	if got := asJSON(flood["result"]); got != `[50,9950]` {
		t.Errorf("flood result %s, want [50,9950]", got)
	}
	if n := cm.mcp.Calls("add"); n != 50 {
		t.Errorf("the server answered %d calls, want 50", n)
	}
	rec := cm.auditFor(t, "cm-flood")
	rcalls, _ := rec["tool_calls"].([]any)
	if len(rcalls) > 66 || rec["tool_calls_dropped"].(float64)+float64(len(rcalls)) != 10000 {
		t.Errorf("audit keeps %d calls and counts %v dropped", len(rcalls), rec["tool_calls_dropped"])
	}
	if calls, _ := flood["tool_calls"].([]any); len(calls) > 66 {
		t.Errorf("the envelope lists %d calls; it must stay bounded", len(calls))
	}
}

func TestCodeModeTestModeFixturesAnswerWithoutTraffic(t *testing.T) {
	cm := startCodeMode(t, 0)
	before := cm.mcp.Requests()
	src := `
def run(args, context):
    names = [t["name"] for t in context.tools.search("")]
    total = context.tools.run("math.add", {"a": 1, "b": 2})["sum"]
    return {"names": names, "sum": total, "attr": context.tools.weather()}
`
	env := cm.run(t, map[string]any{"source": src, "mode": "test",
		"fixtures": map[string]any{"tools": map[string]any{"math.add": map[string]any{"sum": 99}, "weather": "sunny"}}})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `{"attr":"sunny","names":["math.add","weather"],"sum":99}` {
		t.Errorf("result %s", got)
	}
	if n := cm.mcp.Requests() - before; n != 0 {
		t.Errorf("test mode sent %d requests to the tool server", n)
	}
}

func TestToolsRouteListsGrantedToolsWithAPythonStub(t *testing.T) {
	cm := startCodeMode(t, 0)
	r := cm.do(http.MethodGet, "/v1/tools", cm.server.token("acme"), nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var resp struct {
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
		PythonStub     string `json:"python_stub"`
		TypeScriptStub string `json:"typescript_stub"`
		Prompt         string `json:"prompt"`
	}
	if err := json.Unmarshal(r.body, &resp); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range resp.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "math.add,math.big,math.fail,math.slow,math.upper,pay.charge,shell.exec,bulk.big" {
		t.Errorf("tools %s", got)
	}
	for _, want := range []string{"class MathAddArgs(TypedDict):", "    a: float", `def run(self, name: Literal["math.add"], args: MathAddArgs) -> Any: ...`, "async def run_async(self, name: str"} {
		if !strings.Contains(resp.PythonStub, want) {
			t.Errorf("the stub lacks %q:\n%s", want, resp.PythonStub)
		}
	}
	for _, want := range []string{"export interface MathAddArgs {", "  a: number;", `  run(name: "math.add", args: MathAddArgs): Promise<unknown>;`, "export declare class ToolDenied"} {
		if !strings.Contains(resp.TypeScriptStub, want) {
			t.Errorf("the TypeScript stub lacks %q:\n%s", want, resp.TypeScriptStub)
		}
	}
	if !strings.Contains(resp.Prompt, "math.add: Add two numbers.") {
		t.Errorf("prompt:\n%s", resp.Prompt)
	}
	r = cm.do(http.MethodGet, "/v1/tools?tools=pay.*", cm.server.token("acme"), nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"pay.charge"`) || strings.Contains(string(r.body), `"math.add"`) {
		t.Errorf("narrowed: %d %s", r.status, r.body)
	}
	r = cm.do(http.MethodGet, "/v1/tools?tools=crm.*", cm.server.token("acme"), nil)
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
		t.Errorf("an ungranted glob: %d %s", r.status, r.body)
	}
	if r := cm.do(http.MethodGet, "/v1/tools", cm.server.token("demo"), nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"tools":[]`) {
		t.Errorf("a tenant without tools: %d %s", r.status, r.body)
	}
	t.Run("the admin view shows the servers, header names only", func(t *testing.T) {
		r := cm.do(http.MethodGet, "/v1/admin/tenants/acme/tools", cm.server.token("acme", "tenant-admin"), nil)
		body := string(r.body)
		if r.status != http.StatusOK || !strings.Contains(body, `"name":"math"`) || !strings.Contains(body, `"headers":["Authorization"]`) || !strings.Contains(body, `"connected":true`) {
			t.Errorf("%d %s", r.status, body)
		}
		if strings.Contains(body, cm.token) || strings.Contains(body, "math-token") {
			t.Errorf("the admin view shows a secret or where it lives: %s", body)
		}
	})
}
