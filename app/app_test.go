package app_test

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheDesignProbeRunsVerbatim(t *testing.T) {
	s := start(t, setup{realSandbox: true})
	r := s.execute(s.token("demo"), probe("demo"))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	env := r.json(t)
	if env["status"] != "ok" || env["execution_id"] != "probe" || env["tenant_id"] != "demo" {
		t.Fatalf("envelope = %s", r.body)
	}
	if res, _ := env["result"].(map[string]any); len(res) != 1 || res["ok"] != true {
		t.Fatalf("result = %v, want {\"ok\": true}", env["result"])
	}
	if r.header.Get("X-Execution-Id") != "probe" || r.header.Get("X-Execution-Status") != "ok" {
		t.Fatalf("headers = %v", r.header)
	}
	traceID, _ := env["trace_id"].(string)
	if !hex32.MatchString(traceID) {
		t.Fatalf("trace_id = %q", traceID)
	}
	dec, _ := env["decision"].(map[string]any)
	if dec["network_access"] != "none" || dec["id"] == "" {
		t.Fatalf("decision = %v", dec)
	}

	lines := s.auditLines()
	if len(lines) != 1 {
		t.Fatalf("%d audit records, want 1", len(lines))
	}
	if lines[0]["execution_id"] != "probe" || lines[0]["trace_id"] != traceID {
		t.Fatalf("audit record = %v (envelope trace %s)", lines[0], traceID)
	}
	logs := s.logs.String()
	if !strings.Contains(logs, `"msg":"execution","execution_id":"probe","tenant_id":"demo","status":"ok"`) || !strings.Contains(logs, traceID) {
		t.Fatalf("no per-run log line with the trace id:\n%s", logs)
	}
	if strings.Contains(logs, "async def run") {
		t.Fatal("the source leaked into the log")
	}

	rz := s.do(http.MethodGet, "/readyz", "", nil)
	if rz.status != http.StatusOK {
		t.Fatalf("readyz %d: %s", rz.status, rz.body)
	}
	for _, name := range []string{"sandbox", "rootfs", "policy", "quota"} {
		if !strings.Contains(string(rz.body), `"name":"`+name+`","ok":true`) {
			t.Errorf("readyz lacks a passing %s check: %s", name, rz.body)
		}
	}
}

// shared is one server for the error-table rows that can share it: one run
// slot and no waiting room, a rate-limited tenant, a tenant without budget,
// and an extension policy that errors for entrypoint "boom".
func shared(t *testing.T) *server {
	return start(t, setup{mutate: func(c *config.Config) {
		c.Server.MaxConcurrentRuns = 1
		c.Server.MaxQueue = -1
		c.Server.MaxSourceBytes = 4096
		c.Server.MaxArgsBytes = 1024
		c.Server.MaxBodyBytes = 64 << 10
		limited := config.DemoTenant()
		limited.ID, limited.Quota = "limited", quota.Limits{RatePerMinute: 1, Burst: 1, Concurrency: 4, DailyCPUSeconds: 3600}
		broke := config.DemoTenant()
		broke.ID, broke.Quota = "broke", quota.Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4, DailyCPUSeconds: 1}
		c.Tenants = append(c.Tenants, limited, broke)
		c.Policy.Dirs = []string{writePolicyDir(t, map[string]string{
			"ext.rego":  "package ext.conflict\n\nx := 1 if input.request.entrypoint == \"boom\"\n\nx := 2 if input.request.entrypoint == \"boom\"\n",
			"hook.rego": "package execgate.main\n\nimport data.ext.conflict\n\ndeny contains \"conflict\" if conflict.x == 3\n",
		})}
	}})
}

func TestEveryRowOfTheErrorTable(t *testing.T) {
	s := shared(t)
	demo := s.token("demo")
	src := func(extra string) string {
		return `{"source":"def run(args, context):\n    return 1\n"` + extra + `}`
	}
	rows := []struct {
		name    string
		token   string
		body    string
		status  int
		errType string
		runs    bool   // the tool reached the sandbox
		message string // substring of error.message
	}{
		{"malformed JSON is a 400", demo, `{"source": `, 400, "BadRequest", false, "body: is not valid JSON"},
		{"an unknown field is a 400 naming it", demo, src(`,"sorce":"x"`), 400, "BadRequest", false, "sorce: unknown field"},
		{"a wrong type is a 400 naming the field", demo, src(`,"limits":{"timeout_ms":"5s"}`), 400, "BadRequest", false, "limits.timeout_ms: must be an integer"},
		{"a missing source is a 400", demo, `{"entrypoint":"run"}`, 400, "BadRequest", false, "source: is required"},
		{"a body over the cap is a 413", demo, src(`,"args":"` + strings.Repeat("a", 70<<10) + `"`), 413, "PayloadTooLarge", false, "body"},
		{"a source over the cap is a 413", demo, `{"source":"` + strings.Repeat("#", 5000) + `"}`, 413, "PayloadTooLarge", false, "source: 5000 bytes"},
		{"args over the cap are a 413", demo, src(`,"args":"` + strings.Repeat("a", 2000) + `"`), 413, "PayloadTooLarge", false, "args"},
		{"no token is a 401", "", src(""), 401, "Unauthenticated", false, "missing bearer token"},
		{"a garbage token is a 401", "garbage", src(""), 401, "Unauthenticated", false, "malformed token"},
		{"a missing role is a 403", s.token("demo", tenancy.RolePolicyAuthor), src(""), 403, "Forbidden", false, `role "executor" required`},
		{"a tenant mismatch is a 403", demo, src(`,"tenant_id":"acme"`), 403, "Forbidden", false, "does not match the token's tenant"},
		{"an unknown tenant is a 403", s.token("initech"), src(""), 403, "Forbidden", false, `tenant "initech" is not configured`},
		{"a policy deny is a 403 with reasons", demo, src(`,"network_access":"host"`), 403, "PolicyDenied", false, "denied by policy"},
		{"an erroring policy is a 500, never an allow", demo, `{"source":"def boom(args, context):\n    return 1\n","entrypoint":"boom"}`, 500, "PolicyError", false, "denied"},
		{"an exhausted daily budget is a 429", s.token("broke"), src(""), 429, "BudgetExhausted", false, "budget is spent"},
		{"a tool error is a 200 with error:ToolError", demo, `{"source":"def run(args, context):\n    raise ValueError('nope')\n"}`, 200, "ToolError", true, "nope"},
		{"invalid source is a 200 with error:InvalidSource", demo, `{"source":"def run(:\n"}`, 200, "InvalidSource", true, ""},
		{"a missing entrypoint is a 200 with error:EntrypointNotFound", demo, `{"source":"x = 1\n"}`, 200, "EntrypointNotFound", true, ""},
	}
	// broke's budget (1 s a day, below the default cpu_ms) is spent by
	// runs that burn CPU: each gets what is left, until nothing is.
	spendBudget(t, s, "broke")
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before, audits := s.runs.Load(), len(s.auditLines())
			r := s.execute(row.token, row.body)
			if r.status != row.status || r.errType(t) != row.errType {
				t.Fatalf("got %d %s, want %d %s\n%s", r.status, r.errType(t), row.status, row.errType, r.body)
			}
			env := r.json(t)
			e, _ := env["error"].(map[string]any)
			if msg, _ := e["message"].(string); !strings.Contains(msg, row.message) {
				if tb, _ := e["traceback"].(string); !strings.Contains(tb, row.message) {
					t.Errorf("error = %v, want message containing %q", e, row.message)
				}
			}
			if got := r.header.Get("X-Execution-Status"); got != "error:"+row.errType {
				t.Errorf("X-Execution-Status = %q, want error:%s", got, row.errType)
			}
			if r.header.Get("X-Execution-Id") == "" || r.header.Get("X-Execution-Id") != env["execution_id"] {
				t.Errorf("X-Execution-Id %q vs envelope %v", r.header.Get("X-Execution-Id"), env["execution_id"])
			}
			if ran := s.runs.Load() > before; ran != row.runs {
				t.Errorf("tool reached the sandbox: %v, want %v", ran, row.runs)
			}
			wantAudit := 1
			if row.status == 401 {
				wantAudit = 0 // not authenticated: nobody to attribute it to
			}
			if got := len(s.auditLines()) - audits; got != wantAudit {
				t.Errorf("%d audit records written, want %d", got, wantAudit)
			}
			if row.errType == "PolicyDenied" {
				if reasons, _ := e["reasons"].([]any); len(reasons) == 0 {
					t.Errorf("PolicyDenied without reasons: %s", r.body)
				}
			}
			if row.errType == "PolicyError" {
				lines := s.auditLines()
				d, _ := lines[len(lines)-1]["decision"].(map[string]any)
				if d == nil || d["id"] == "" || d["allow"] != false {
					t.Errorf("the failed decision is not in the audit record: %v", lines[len(lines)-1])
				}
				if !strings.Contains(s.logs.String(), `"error_type":"PolicyError"`) {
					t.Error("the policy error was not logged")
				}
			}
			if row.status == 429 && r.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		})
	}

	t.Run("the rate limit is a 429 QuotaExceeded with Retry-After", func(t *testing.T) {
		tok := s.token("limited")
		if r := s.execute(tok, `{"source":"x = 1\n"}`); r.status != 200 {
			t.Fatalf("first request: %d %s", r.status, r.body)
		}
		r := s.execute(tok, `{"source":"x = 1\n"}`)
		if r.status != 429 || r.errType(t) != "QuotaExceeded" || r.header.Get("Retry-After") == "" {
			t.Fatalf("second request: %d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
		}
	})

	t.Run("a full run queue is a 503 Overloaded", func(t *testing.T) {
		before := s.runs.Load()
		var wg sync.WaitGroup
		var slow response
		wg.Add(1)
		go func() {
			defer wg.Done()
			slow = s.execute(demo, `{"source":"import time\ndef run(args, context):\n    time.sleep(1.5)\n    return 'slow'\n"}`)
		}()
		waitFor(t, "the slow run to start", 30*time.Second, func() bool { return s.runs.Load() > before })
		r := s.execute(demo, `{"source":"def run(args, context):\n    return 1\n"}`)
		if r.status != 503 || r.errType(t) != "Overloaded" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		wg.Wait()
		if slow.status != 200 || slow.json(t)["result"] != "slow" {
			t.Fatalf("the slow run: %d %s", slow.status, slow.body)
		}
	})
}

func TestSandboxUnavailableStillServesAndRunsNothing(t *testing.T) {
	s := start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Sandbox.NsjailPath = "/nonexistent/nsjail"
	}})
	if s.app.SandboxErr() == nil {
		t.Fatal("SandboxErr is nil with a bogus nsjail path")
	}
	r := s.execute(s.token("demo"), probe("demo"))
	if r.status != 503 || r.errType(t) != "SandboxUnavailable" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	e := r.json(t)["error"].(map[string]any)
	if tb, _ := e["traceback"].(string); !strings.Contains(tb, "hint:") {
		t.Errorf("traceback has no hint: %q", tb)
	}
	if got := len(s.auditLines()); got != 1 {
		t.Errorf("%d audit records, want 1", got)
	}
	rz := s.do(http.MethodGet, "/readyz", "", nil)
	if rz.status != 503 || !strings.Contains(string(rz.body), `"name":"sandbox","ok":false`) {
		t.Fatalf("readyz %d: %s", rz.status, rz.body)
	}
}

func TestQuotaUnavailableFailsClosed(t *testing.T) {
	t.Run("a Redis backend on a dead port", func(t *testing.T) {
		s := start(t, setup{noop: true, mutate: func(c *config.Config) {
			c.Quota.Backend = "redis"
			c.Quota.RedisURL = "redis://127.0.0.1:1/0"
		}})
		r := s.execute(s.token("demo"), `{"source":"x"}`)
		if r.status != 503 || r.errType(t) != "QuotaUnavailable" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if s.runs.Load() != 0 {
			t.Fatal("a run happened without admission")
		}
		rz := s.do(http.MethodGet, "/readyz", "", nil)
		if rz.status != 503 || !strings.Contains(string(rz.body), `"name":"quota","ok":false`) {
			t.Fatalf("readyz %d: %s", rz.status, rz.body)
		}
	})
	t.Run("a real Redis that dies and comes back", func(t *testing.T) {
		rs := testenv.Redis(t)
		s := start(t, setup{noop: true, mutate: func(c *config.Config) {
			c.Quota.Backend = "redis"
			c.Quota.RedisURL = rs.URL()
		}})
		tok := s.token("demo")
		if r := s.execute(tok, `{"source":"x"}`); r.status != 200 {
			t.Fatalf("with Redis up: %d %s", r.status, r.body)
		}
		rs.Kill()
		if r := s.execute(tok, `{"source":"x"}`); r.status != 503 || r.errType(t) != "QuotaUnavailable" {
			t.Fatalf("with Redis down: %d %s", r.status, r.body)
		}
		// An idempotency key needs the backend too: still closed.
		if r := s.execute(tok, `{"source":"x","execution_id":"k1"}`); r.status != 503 || r.errType(t) != "QuotaUnavailable" {
			t.Fatalf("idempotent request with Redis down: %d %s", r.status, r.body)
		}
		rs.Restart()
		waitFor(t, "admission after the restart", 20*time.Second, func() bool {
			return s.execute(tok, `{"source":"x"}`).status == 200
		})
		if got := s.runs.Load(); got != 2 {
			t.Fatalf("%d runs, want 2 (none while Redis was down)", got)
		}
	})
}

func TestIdempotency(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			s := start(t, setup{mutate: func(c *config.Config) {
				if backend == "redis" {
					c.Quota.Backend = "redis"
					c.Quota.RedisURL = testenv.Redis(t).URL()
				}
			}})
			tok := s.token("demo")
			body := `{"execution_id":"job-42","source":"import random\ndef run(args, context):\n    return random.random()\n"}`
			first := s.execute(tok, body)
			if first.status != 200 {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			again := s.execute(tok, body)
			if again.status != 200 || string(again.body) != string(first.body) {
				t.Fatalf("repeat differs:\n%s\n%s", first.body, again.body)
			}
			if n := s.runs.Load(); n != 1 {
				t.Fatalf("%d runs for one execution_id, want 1", n)
			}
			other := s.execute(tok, `{"execution_id":"job-42","source":"def run(args, context):\n    return 2\n"}`)
			if other.status != 400 || !strings.Contains(string(other.body), "already used for a different request") {
				t.Fatalf("reuse with another request: %d %s", other.status, other.body)
			}
			// Another tenant's job-42 is its own.
			if r := s.execute(s.token("acme"), body); r.status != 200 || s.runs.Load() != 2 {
				t.Fatalf("other tenant: %d, runs %d", r.status, s.runs.Load())
			}

			// Concurrent duplicates: exactly one run, everyone gets its answer.
			dup := `{"execution_id":"job-43","source":"import random, time\ndef run(args, context):\n    time.sleep(0.3)\n    return random.random()\n"}`
			before := s.runs.Load()
			var wg sync.WaitGroup
			bodies := make([]string, 4)
			for i := range bodies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := s.execute(tok, dup)
					if r.status == 200 {
						bodies[i] = string(r.body)
					}
				}()
			}
			wg.Wait()
			if n := s.runs.Load() - before; n != 1 {
				t.Fatalf("%d runs for 4 concurrent duplicates, want 1", n)
			}
			for i := range bodies {
				if bodies[i] == "" || bodies[i] != bodies[0] {
					t.Fatalf("duplicate %d got %q, want %q", i, bodies[i], bodies[0])
				}
			}
			// A refused request does not burn the id.
			if r := s.execute(s.token("demo"), `{"execution_id":"job-44","source":"x","network_access":"host"}`); r.status != 403 {
				t.Fatalf("denied: %d", r.status)
			}
			if r := s.execute(tok, `{"execution_id":"job-44","source":"def run(args, context):\n    return 1\n"}`); r.status != 200 {
				t.Fatalf("retry after a refusal: %d %s", r.status, r.body)
			}
		})
	}
}

func TestValidateParsesInTheJail(t *testing.T) {
	s := start(t, setup{})
	tok := s.token("demo")
	tests := []struct {
		name   string
		body   string
		valid  bool
		line   float64
		substr string
	}{
		{"a good tool is valid", `{"source":"async def run(args, context):\n    return 1\n"}`, true, 0, ""},
		{"a syntax error names its line", `{"source":"x = 1\ndef run(:\n    pass\n"}`, false, 2, ""},
		{"return outside a function is caught by compile", `{"source":"return 1\ndef run(a, c):\n    pass\n"}`, false, 1, "outside function"},
		{"a missing entrypoint is reported", `{"source":"def main(args, context):\n    return 1\n","entrypoint":"run"}`, false, 0, "entrypoint 'run' is not defined"},
		{"a custom entrypoint is found", `{"source":"def main(args, context):\n    return 1\n","entrypoint":"main"}`, true, 0, ""},
		{"the tool is never run", `{"source":"import os\nos._exit(3)\ndef run(a, c):\n    pass\n"}`, true, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(http.MethodPost, "/v1/validate", tok, tt.body)
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			m := r.json(t)
			if m["valid"] != tt.valid {
				t.Fatalf("valid = %v, want %v: %s", m["valid"], tt.valid, r.body)
			}
			if !tt.valid {
				e := m["errors"].([]any)[0].(map[string]any)
				if e["line"] != tt.line || !strings.Contains(e["message"].(string), tt.substr) {
					t.Fatalf("error = %v, want line %v containing %q", e, tt.line, tt.substr)
				}
			}
		})
	}
	if r := s.do(http.MethodPost, "/v1/validate", tok, `{"source":""}`); r.status != 400 {
		t.Fatalf("empty source: %d", r.status)
	}
	if r := s.do(http.MethodPost, "/v1/validate", "", `{"source":"x"}`); r.status != 401 {
		t.Fatalf("no token: %d", r.status)
	}
}

func TestAdminAPI(t *testing.T) {
	s := start(t, setup{noop: true})
	admin := s.token("demo", tenancy.RoleAdmin)
	exec := s.token("demo")

	if r := s.do(http.MethodGet, "/v1/admin/tenants", exec, nil); r.status != 403 || r.errType(t) != "Forbidden" {
		t.Fatalf("executor listing tenants: %d %s", r.status, r.body)
	}
	r := s.do(http.MethodGet, "/v1/admin/tenants", admin, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"id":"demo"`) || !strings.Contains(string(r.body), `"id":"acme"`) {
		t.Fatalf("tenants: %d %s", r.status, r.body)
	}

	r = s.do(http.MethodPut, "/v1/admin/tenants/acme/quota", admin, `{"rate_per_minute":60,"burst":1,"concurrency":1,"daily_cpu_seconds":10}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"effective":{"rate_per_minute":60,"burst":1,"concurrency":1,"daily_cpu_seconds":10}`) {
		t.Fatalf("put quota: %d %s", r.status, r.body)
	}
	// The override is what admission uses: burst 1 → the second run is refused.
	acme := s.token("acme")
	if r := s.execute(acme, `{"source":"x"}`); r.status != 200 {
		t.Fatalf("first run under the override: %d %s", r.status, r.body)
	}
	if r := s.execute(acme, `{"source":"x"}`); r.status != 429 {
		t.Fatalf("second run under burst 1: %d %s", r.status, r.body)
	}
	r = s.do(http.MethodGet, "/v1/admin/tenants/acme/usage", admin, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"tenant_id":"acme"`) {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	r = s.do(http.MethodDelete, "/v1/admin/tenants/acme/quota", admin, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"override":null`) {
		t.Fatalf("delete override: %d %s", r.status, r.body)
	}
	if r := s.do(http.MethodGet, "/v1/admin/tenants/acme/quota", admin, nil); r.status != 200 || !strings.Contains(string(r.body), `"override":null`) {
		t.Fatalf("get quota: %d %s", r.status, r.body)
	}
	if r := s.do(http.MethodPut, "/v1/admin/tenants/acme/quota", admin, `{"burst":-1}`); r.status != 400 || !strings.Contains(string(r.body), "burst: must be >= 0") {
		t.Fatalf("bad quota: %d %s", r.status, r.body)
	}
	if r := s.do(http.MethodGet, "/v1/admin/tenants/nope/usage", admin, nil); r.status != 404 || r.errType(t) != "NotFound" {
		t.Fatalf("unknown tenant: %d %s", r.status, r.body)
	}

	runs := s.runs.Load()
	r = s.do(http.MethodPost, "/v1/admin/policy/evaluate", admin, `{"tenant_id":"demo","request":{"source":"x","network_access":"host"}}`)
	if r.status != 200 {
		t.Fatalf("evaluate: %d %s", r.status, r.body)
	}
	m := r.json(t)
	dec := m["decision"].(map[string]any)
	in := m["input"].(map[string]any)
	if dec["allow"] != false || len(dec["reasons"].([]any)) == 0 || in["request"].(map[string]any)["network_access"] != "host" {
		t.Fatalf("dry run = %s", r.body)
	}
	if strings.Contains(string(r.body), `"source":`) {
		t.Fatal("the source is in the policy input")
	}
	author := s.token("demo", tenancy.RolePolicyAuthor)
	r = s.do(http.MethodPost, "/v1/admin/policy/evaluate", author, `{"tenant_id":"demo","roles":["executor"],"request":{"source":"x"}}`)
	if r.status != 200 || r.json(t)["decision"].(map[string]any)["allow"] != true {
		t.Fatalf("policy-author dry run: %d %s", r.status, r.body)
	}
	// A policy-author reaches its own tenant only (issue #11 §4).
	if r := s.do(http.MethodPost, "/v1/admin/policy/evaluate", author, `{"tenant_id":"acme","roles":["executor"],"request":{"source":"x"}}`); r.status != 403 || r.errType(t) != "Forbidden" {
		t.Fatalf("policy-author dry run for another tenant: %d %s", r.status, r.body)
	}
	if s.runs.Load() != runs {
		t.Fatal("a dry run ran something")
	}
	if r := s.do(http.MethodPost, "/v1/admin/policy/evaluate", admin, `{"tenant_id":"demo","request":{"source":"x","limits":{"pids":-2}}}`); r.status != 400 || !strings.Contains(string(r.body), "request.limits.pids") {
		t.Fatalf("bad dry run: %d %s", r.status, r.body)
	}
}

func TestGracefulShutdownDrainsInFlightRuns(t *testing.T) {
	s := start(t, setup{})
	tok := s.token("demo")
	var wg sync.WaitGroup
	var slow response
	wg.Add(1)
	go func() {
		defer wg.Done()
		slow = s.execute(tok, `{"source":"import time\ndef run(args, context):\n    time.sleep(1)\n    return 'done'\n"}`)
	}()
	waitFor(t, "the run to start", 30*time.Second, func() bool { return s.runs.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.app.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	wg.Wait()
	if slow.status != 200 || slow.json(t)["result"] != "done" {
		t.Fatalf("the in-flight run: %d %s", slow.status, slow.body)
	}
	if _, err := http.Get(s.app.URL() + "/healthz"); err == nil {
		t.Fatal("still accepting after Stop")
	}
	if got := len(s.auditLines()); got != 1 {
		t.Fatalf("%d audit records, want 1", got)
	}
}

func TestEveryRouteIsInTheOpenAPIDocument(t *testing.T) {
	s := start(t, setup{noop: true})
	spec := loadSpec(t)
	paths := spec.doc["paths"].(map[string]any)
	registered := map[string]bool{}
	for _, r := range s.app.Server().Routes() {
		p := regexp.MustCompile(`:([a-z_]+)`).ReplaceAllString(r.Path, "{$1}")
		registered[r.Method+" "+p] = true
		item, ok := paths[p].(map[string]any)
		if !ok {
			t.Errorf("route %s %s is not in the OpenAPI document", r.Method, r.Path)
			continue
		}
		if _, ok := item[strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s: method not documented", r.Method, r.Path)
		}
	}
	for p, item := range paths {
		for m := range item.(map[string]any) {
			if m == "parameters" {
				continue
			}
			if !registered[strings.ToUpper(m)+" "+p] {
				t.Errorf("documented %s %s is not a registered route", strings.ToUpper(m), p)
			}
		}
	}
	r := s.do(http.MethodGet, "/openapi.json", "", nil)
	if r.status != 200 || r.json(t)["openapi"] != "3.1.0" {
		t.Fatalf("/openapi.json: %d", r.status)
	}
	if r := s.do(http.MethodGet, "/healthz", "", nil); r.status != 200 {
		t.Fatalf("/healthz: %d", r.status)
	}
	s.execute(s.token("demo"), `{"source":"x"}`)
	r = s.do(http.MethodGet, "/metrics", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `execgate_executions_total{`) {
		t.Fatalf("/metrics: %d %s", r.status, r.body)
	}
	if r := s.do(http.MethodGet, "/nope", "", nil); r.status != 404 || r.errType(t) != "NotFound" {
		t.Fatalf("unknown route: %d %s", r.status, r.body)
	}
	if r := s.do(http.MethodGet, "/v1/execute", "", nil); r.status != 405 {
		t.Fatalf("GET /v1/execute: %d %s", r.status, r.body)
	}
}

func TestAFailedAuditWriteIsA500AndWithholdsTheResult(t *testing.T) {
	dir := t.TempDir()
	full := dir + "/audit.jsonl"
	if err := os.Symlink("/dev/full", full); err != nil {
		t.Fatal(err)
	}
	s := start(t, setup{noop: true, mutate: func(c *config.Config) { c.Audit.File = full }})
	r := s.execute(s.token("demo"), `{"source":"def run(args, context):\n    return 1\n"}`)
	if r.status != 500 || r.errType(t) != "AuditError" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	if s.runs.Load() != 1 {
		t.Fatalf("%d runs, want 1 (the run happened; only its answer is withheld)", s.runs.Load())
	}
	if env := r.json(t); env["result"] != nil || env["status"] != "error" {
		t.Fatalf("the result was sent although its audit record was not written: %s", r.body)
	}
	if r.header.Get("X-Execution-Status") != "error:AuditError" {
		t.Fatalf("X-Execution-Status = %q", r.header.Get("X-Execution-Status"))
	}
	if !strings.Contains(s.logs.String(), "audit write failed") {
		t.Fatal("the failed audit write was not logged")
	}
}

func TestSpansCoverEveryStageAndCarryNoSource(t *testing.T) {
	s := start(t, setup{noop: true})
	const marker = "sekrit_marker_in_source"
	r := s.execute(s.token("demo"), `{"source":"def run(args, context):\n    return '`+marker+`'\n","args":{"a":"`+marker+`"}}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	traceID := r.json(t)["trace_id"]
	names := map[string]bool{}
	for _, sp := range s.spans.Ended() {
		if sp.SpanContext().TraceID().String() != traceID {
			continue
		}
		names[sp.Name()] = true
		for _, kv := range sp.Attributes() {
			if strings.Contains(kv.Value.String(), marker) {
				t.Errorf("span %s attribute %s carries the source or args", sp.Name(), kv.Key)
			}
		}
		for _, ev := range sp.Events() {
			for _, kv := range ev.Attributes {
				if strings.Contains(kv.Value.String(), marker) {
					t.Errorf("span %s event %s carries the source or args", sp.Name(), ev.Name)
				}
			}
		}
	}
	for _, want := range []string{"POST /v1/execute", "auth", "policy", "quota", "run", "settle", "audit"} {
		if !names[want] {
			t.Errorf("no %q span in the request's trace (have %v)", want, names)
		}
	}
	if strings.Contains(s.logs.String(), marker) {
		t.Error("the source or args reached the log")
	}
}
