package app_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// The playground's inputs and live output (issue #26 §3) in a real headless
// Chromium against a real gateway: real nsjail and Deno, packages installed
// by uv from a local wheel directory, the egress proxy, and a real MCP tool
// server.

// startPlaygroundGateway is a gateway (the App builds its sandbox) whose
// tenant demo may: use network proxy with api.test:443 allowed, install
// the package alpha (from a local wheel), and call the MCP tools math.add
// and math.fail.
func startPlaygroundGateway(t *testing.T) *server {
	t.Helper()
	testenv.Deno(t)
	uv := testenv.UV(t)
	wheels := testenv.WriteWheels(t, filepath.Join(t.TempDir(), "wheels"), testenv.Wheel{Name: "alpha", Version: "1.0"})
	mcpToken := "console-token-" + strings.Repeat("k", 16)
	mcp := toolbridgetest.Start(t, mcpToken)
	secret := filepath.Join(t.TempDir(), "math-token")
	if err := os.WriteFile(secret, []byte("Bearer "+mcpToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runtimes := testenv.RuntimesDir(t)
	return start(t, setup{realSandbox: true, egressResolver: &loopbackResolver{}, mutate: func(c *config.Config) {
		c.Sandbox.RuntimesDir = runtimes
		c.Sandbox.Runtimes = []string{"python3.11", "python3.13"}
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.PackageIndex = sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true}
		for i := range c.Tenants {
			if c.Tenants[i].ID != "demo" {
				continue
			}
			p := c.Tenants[i].Policy
			p["network"] = []any{"none", "proxy"}
			p["egress_allow"] = []any{"api.test:443"}
			p["packages"] = map[string]any{"allow": []any{"alpha"}, "deny": []any{}}
			p["tools"] = []any{"math.*"}
			c.Tenants[i].Tools = toolconfig.Config{Servers: []toolconfig.Server{{
				Name: "math", URL: mcp.URL, Allow: []string{"add", "fail"},
				Headers: map[string]toolconfig.Secret{"Authorization": {File: secret}},
			}}}
		}
	}})
}

// clickRun starts a run from the playground without waiting for its end.
func (b *browser) clickRun(source string) {
	b.t.Helper()
	b.setField("pg-source", source)
	b.eval(`document.getElementById("pg-out").replaceChildren(); true`, nil)
	b.do(chromedp.Click(chromedp.ID("pg-run")))
}

// resetForm puts the playground's inputs back to a plain Python run.
func (b *browser) resetForm() {
	b.t.Helper()
	for id, v := range map[string]string{"pg-language": "python", "pg-network": "none", "pg-requirements": "", "pg-egress": "",
		"pg-args": "{}", "pg-timeout": "", "pg-cpu": ""} {
		b.setField(id, v)
	}
}

// openRun opens execution id's page on the Runs page (signed in with a
// role that searches the audit log).
func (b *browser) openRun(id string) {
	b.t.Helper()
	b.waitFor("the first search", `document.querySelector("#r-results p")`)
	b.setField("r-id", id)
	b.eval(`document.getElementById("r-results").replaceChildren(); true`, nil)
	b.do(chromedp.Click(chromedp.CSS(`#r-form button[type=submit]`)))
	b.waitFor("the run", `document.querySelector("#r-table tbody tr")`)
	b.do(chromedp.Click(chromedp.CSS(`#r-table tbody tr`)))
	b.waitFor("the run's page", `document.getElementById("r-trace")`)
}

// auditRecord is the audit record of execution id (exactly one).
func (s *server) auditRecord(t *testing.T, id string) map[string]any {
	t.Helper()
	recs := s.auditOf(id)
	if len(recs) != 1 {
		t.Fatalf("%d audit records for %s, want 1", len(recs), id)
	}
	return recs[0]
}

func TestConsolePlaygroundLanguagesInputsToolCallsAndLiveOutput(t *testing.T) {
	s := startPlaygroundGateway(t)
	b := newBrowser(t, s.app.URL())
	executor := s.token("demo", tenancy.RoleExecutor)
	b.signIn(executor, "playground")
	status := `document.querySelector("#pg-status .badge").textContent`
	out := `document.getElementById("pg-out").innerText`

	t.Run("TypeScript: the starter, Validate as TypeScript, and a run", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-language", "typescript")
		if src := b.text(`document.getElementById("pg-source").value`); !strings.HasPrefix(src, "type Args") {
			t.Fatalf("the TypeScript starter was not loaded: %q", src)
		}
		var disabled []bool
		b.eval(`[document.getElementById("pg-network").disabled, document.getElementById("pg-requirements").disabled, document.getElementById("pg-lang-note").hidden]`, &disabled)
		if !disabled[0] || !disabled[1] || disabled[2] {
			t.Fatalf("network disabled, requirements disabled, note hidden = %v: want true, true, false for TypeScript", disabled)
		}
		b.do(chromedp.Click(chromedp.ID("pg-validate")))
		b.waitFor("the verdict", `document.querySelector("#pg-status .badge")`)
		if got := b.text(status); got != "valid" {
			t.Fatalf("the starter validates as %q: %s", got, b.text(out))
		}
		// A type error only TypeScript's checker sees (Python would say
		// "invalid syntax" at line 1).
		b.setField("pg-source", "export function run(): number {\n  const s: string = 1;\n  return 2;\n}\n")
		b.eval(`document.getElementById("pg-out").replaceChildren(); true`, nil)
		b.do(chromedp.Click(chromedp.ID("pg-validate")))
		b.waitFor("the verdict", `document.querySelector("#pg-status .badge")`)
		if got, g := b.text(status), b.text(`(document.querySelector("#pg-gutter .err") || {}).textContent || ""`); got != "invalid" || g != "2" || !strings.Contains(b.text(out), "TS2322") {
			t.Fatalf("verdict %q, marked line %q: want invalid at line 2 with TS2322\n%s", got, g, b.text(out))
		}
		b.setField("pg-language", "python") // the edited source stays…
		b.setField("pg-source", "")
		b.setField("pg-language", "typescript") // …an empty editor takes the starter
		b.setField("pg-args", `{"name": "console"}`)
		b.run(b.text(`document.getElementById("pg-source").value`))
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if res := b.text(`document.getElementById("pg-result").innerText`); !strings.Contains(res, `"greeting": "hello, console"`) {
			t.Fatalf("result %q", res)
		}
		if logs := b.text(`document.getElementById("pg-logs").textContent`); !strings.Contains(logs, "[info] hello from the playground") {
			t.Fatalf("logs %q", logs)
		}
		b.noProblems()
		b.screenshot("playground-typescript")
		b.resetForm()
	})

	t.Run("the runtime select offers the tenant's runtimes and a run says what it ran on", func(t *testing.T) {
		b := b.on(t)
		b.waitFor("the runtimes", `document.querySelectorAll("#pg-runtime option").length > 1`)
		var opts []string
		b.eval(`[...document.querySelectorAll("#pg-runtime option")].map(o => o.value + "=" + o.textContent)`, &opts)
		if strings.Join(opts, ",") != "=default (python3.11),python3.11=python3.11 (3.11.2),python3.13=python3.13 (3.13.5)" {
			t.Fatalf("runtime options %v", opts)
		}
		b.setField("pg-runtime", "python3.13")
		b.run("import sys\ndef run(args, context):\n    return list(sys.version_info[:2])\n")
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if ran, d := b.text(`document.getElementById("pg-ran-on").textContent`), b.text(`document.getElementById("pg-decision").textContent`); !strings.HasPrefix(ran, "python3.13") || !strings.Contains(d, "runtime python3.13") {
			t.Fatalf("ran on %q, decision %q", ran, d)
		}
		if res := b.text(`document.getElementById("pg-result").innerText`); !strings.Contains(res, "13") {
			t.Fatalf("result %q", res)
		}
		b.setField("pg-language", "javascript")
		if b.text(`String(document.getElementById("pg-runtime").disabled)`) != "true" {
			t.Fatal("the runtime select is enabled for JavaScript")
		}
		b.setField("pg-runtime", "")
		b.resetForm()
	})

	t.Run("requirements and egress hosts reach the request", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-network", "proxy")
		if b.text(`String(document.getElementById("pg-egress-label").hidden)`) != "false" {
			t.Fatal("the egress field is hidden with network proxy")
		}
		b.setField("pg-requirements", "alpha==1.0\n")
		b.setField("pg-egress", "api.test:443\n")
		b.setField("pg-timeout", "20000")
		b.setField("pg-cpu", "20000")
		b.run(`import socket
import alpha

def connect(host):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    try:
        s.sendall(b"CONNECT " + host + b" HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        return s.recv(12).decode("latin-1")
    finally:
        s.close()

def run(args, context):
    return {"alpha": alpha.VERSION, "evil": connect(b"evil.test:443")}
`)
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		res := b.text(`document.getElementById("pg-result").innerText`)
		if !strings.Contains(res, `"alpha": "1.0"`) || !strings.Contains(res, `"evil": "HTTP/1.1 403"`) {
			t.Fatalf("result %q: want alpha 1.0 installed and evil.test refused by the proxy", res)
		}
		if d := b.text(`document.getElementById("pg-decision").textContent`); !strings.Contains(d, "network proxy") {
			t.Fatalf("decision %q", d)
		}
		if a := b.text(`document.getElementById("pg-egress-allow").textContent`); a != "api.test:443" {
			t.Fatalf("egress allowed %q", a)
		}
		var attempts []string
		b.eval(`[...document.querySelectorAll("#pg-egress-attempts tbody tr")].map(tr => tr.children[0].textContent + ":" + tr.children[1].textContent + " " + tr.children[2].textContent)`, &attempts)
		if strings.Join(attempts, ",") != "evil.test:443 denied" {
			t.Fatalf("egress attempts %v, want [evil.test:443 denied]", attempts)
		}
		rec := s.auditRecord(t, b.text(`document.getElementById("pg-execution-id").textContent`))
		dec, _ := rec["decision"].(map[string]any)
		if dec["network_access"] != "proxy" || asJSON(dec["egress"]) != `["api.test:443"]` {
			t.Fatalf("the audit record's decision %v: want network proxy, egress [api.test:443]", dec)
		}
		b.noProblems()
		b.screenshot("playground-egress")
		b.resetForm()
	})

	var toolRunID string
	t.Run("the tool-calls panel shows a real run's calls", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-timeout", "20000")
		b.setField("pg-cpu", "20000")
		b.run(`from execgate_runtime import ToolFailed

def run(args, context):
    total = context.tools.run("math.add", {"a": 40, "b": 2})["sum"]
    try:
        context.tools.run("math.fail", {})
    except ToolFailed as e:
        return {"sum": total, "fail": type(e).__name__}
`)
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		toolRunID = b.text(`document.getElementById("pg-execution-id").textContent`)
		var rows [][]string
		b.eval(`[...document.querySelectorAll("#pg-tool-calls tbody tr")].map(tr => [...tr.children].map(td => td.textContent))`, &rows)
		rec := s.auditRecord(t, toolRunID)
		calls, _ := rec["tool_calls"].([]any)
		if len(rows) != 2 || len(calls) != 2 {
			t.Fatalf("panel rows %v, audited calls %v: want 2 each", rows, calls)
		}
		for i, want := range []struct{ tool, outcome string }{{"math.add", "ok"}, {"math.fail", "ToolFailed"}} {
			c, _ := calls[i].(map[string]any)
			r := rows[i] // tool, server, outcome, ms, decision
			if r[0] != want.tool || r[1] != "math" || r[2] != want.outcome || c["decision_id"] == "" || r[4] != c["decision_id"] {
				t.Errorf("row %d %v: want %s on math, %s, decision %v", i, r, want.tool, want.outcome, c["decision_id"])
			}
			if _, err := strconv.Atoi(strings.ReplaceAll(r[3], ",", "")); err != nil {
				t.Errorf("row %d: ms %q is not a number", i, r[3])
			}
		}
		b.noProblems()
		b.screenshot("playground-tool-calls")
		b.resetForm()
	})

	t.Run("the first line shows while the run still runs, then the envelope", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-timeout", "20000")
		b.clickRun("import time\n\ndef run(args, context):\n    print('first line', flush=True)\n    time.sleep(3)\n    print('second line', flush=True)\n    context.log('done')\n    return 7\n")
		b.waitFor("the first line", `(document.getElementById("pg-live-stdout") || {}).textContent === "first line\n"`)
		id := b.text(`document.getElementById("pg-live-id").textContent`)
		if st := s.do(http.MethodGet, "/v1/executions/"+url.PathEscape(id), executor, nil).json(t)["status"]; st != "running" {
			t.Fatalf("the first line was on the page when the execution was %v, want running", st)
		}
		var ended bool
		b.eval(`!!document.getElementById("pg-status")`, &ended)
		if ended {
			t.Fatal("the envelope was shown with the first line")
		}
		b.screenshot("playground-live")
		b.waitFor("the envelope", `document.querySelector("#pg-status .badge")`)
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if so := b.text(`document.getElementById("pg-stdout").textContent`); so != "first line\nsecond line\n" {
			t.Fatalf("stdout %q", so)
		}
		if v := b.text(`document.querySelector("#pg-status .muted").textContent`); !strings.Contains(v, "HTTP 200") || !strings.Contains(v, "live events") {
			t.Fatalf("status line %q: want HTTP 200 through the live events", v)
		}
		b.noProblems()
		b.resetForm()
	})

	t.Run("Cancel stops a running run", func(t *testing.T) {
		b := b.on(t)
		b.setField("pg-timeout", "30000")
		b.clickRun("import time\n\ndef run(args, context):\n    print('started', flush=True)\n    time.sleep(25)\n    return 'slept'\n")
		b.waitFor("the run to start", `(document.getElementById("pg-live-stdout") || {}).textContent === "started\n"`)
		id := b.text(`document.getElementById("pg-live-id").textContent`)
		b.do(chromedp.Click(chromedp.ID("pg-cancel")))
		b.waitFor("the envelope", `document.querySelector("#pg-status .badge")`)
		if got := b.text(status); got != "error: Cancelled" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if n := b.text(`document.getElementById("pg-cancel-note").textContent`); !strings.Contains(n, "Cancel requested") {
			t.Fatalf("cancel note %q", n)
		}
		if b.text(`String(document.getElementById("pg-cancel").hidden)`) != "true" {
			t.Fatal("the Cancel button stays after the run")
		}
		o, _ := s.auditRecord(t, id)["outcome"].(map[string]any)
		u, _ := s.auditRecord(t, id)["usage"].(map[string]any)
		if o["error_type"] != "Cancelled" || u["wall_ms"].(float64) >= 25000 {
			t.Fatalf("audited outcome %v after %v ms: want Cancelled before the 25 s sleep ended", o, u["wall_ms"])
		}
		b.noProblems()
		b.screenshot("playground-cancelled")
		b.resetForm()
	})

	t.Run("an auditor sees the run's tool calls on its detail page", func(t *testing.T) {
		b := b.on(t)
		auditor := s.token("demo", tenancy.RoleAuditor)
		if kept := s.tracesStatus(t, auditor, s.auditRecord(t, toolRunID)["trace_id"].(string)); kept == http.StatusNotFound {
			defer b.expectHTTP(http.StatusNotFound, "/v1/admin/traces/")()
		}
		b.signIn(auditor, "runs")
		b.openRun(toolRunID)
		b.waitFor("the tool calls", `document.querySelector("#r-tool-calls tbody tr")`)
		var rows []string
		b.eval(`[...document.querySelectorAll("#r-tool-calls tbody tr")].map(tr => tr.dataset.tool + " " + tr.children[2].textContent)`, &rows)
		if strings.Join(rows, ",") != "math.add ok,math.fail ToolFailed" {
			t.Fatalf("tool calls on the run's page %v", rows)
		}
		b.waitFor("the trace", `document.getElementById("r-spans-note") || document.getElementById("r-waterfall")`)
		b.noProblems()
		b.screenshot("runs-tool-calls")
	})

	t.Run("behind a proxy that refuses the async routes, runs go through /v1/execute or polling, and the page says so", func(t *testing.T) {
		b := b.on(t)
		// A real reverse proxy in front of the gateway that refuses what
		// refused says: all of /v1/executions, or only its event streams.
		target, _ := url.Parse(s.app.URL())
		rp := httputil.NewSingleHostReverseProxy(target)
		var refused atomic.Value
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m, _ := refused.Load().(string); m == "all" && strings.HasPrefix(r.URL.Path, "/v1/executions") ||
				m == "events" && strings.HasSuffix(r.URL.Path, "/events") {
				http.NotFound(w, r)
				return
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		b.base = front.URL
		b.signIn(executor, "playground")

		refused.Store("all")
		stopExpecting := b.expectHTTP(http.StatusNotFound, "/v1/executions")
		b.run("def run(args, context):\n    print('through the front')\n    return 1\n")
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if n := b.text(`document.getElementById("pg-fallback").textContent`); !strings.Contains(n, "POST /v1/executions answered HTTP 404") || !strings.Contains(n, "went through POST /v1/execute") {
			t.Fatalf("fallback note %q", n)
		}
		if v := b.text(`document.querySelector("#pg-status .muted").textContent`); !strings.Contains(v, "HTTP 200 · ok") || !strings.HasSuffix(v, "POST /v1/execute") {
			t.Fatalf("status line %q", v)
		}
		if so := b.text(`document.getElementById("pg-stdout").textContent`); so != "through the front\n" {
			t.Fatalf("stdout %q", so)
		}
		b.noProblems()
		stopExpecting()

		refused.Store("events")
		defer b.expectHTTP(http.StatusNotFound, "/v1/executions/")()
		b.run("def run(args, context):\n    return 2\n")
		if got := b.text(status); got != "ok" {
			t.Fatalf("status %q: %s", got, b.text(out))
		}
		if n := b.text(`document.getElementById("pg-poll-note").textContent`); !strings.Contains(n, "Live output is not available") {
			t.Fatalf("polling note %q", n)
		}
		if v := b.text(`document.querySelector("#pg-status .muted").textContent`); !strings.Contains(v, "HTTP 200 · ok") || !strings.HasSuffix(v, "POST /v1/executions + polling") {
			t.Fatalf("status line %q", v)
		}
		b.noProblems()
	})
}
