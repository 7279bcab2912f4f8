package app_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// TestIsolationProcessIsGrantedByPolicy: a tenant whose policy data lists
// isolation process gets it (decision.isolation, and the run is a process
// forked from its zygote: the zygote is PID 1 of the jail, the run its
// child), a tenant without it is denied with a reason and nothing runs, and
// a request without isolation stays at level jail.
func TestIsolationProcessIsGrantedByPolicy(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		fast := config.DemoTenant()
		fast.ID = "fast"
		fast.Policy["isolation"] = []any{"jail", "process"}
		c.Tenants = append(c.Tenants, fast)
	}})
	src := "import os\ndef run(args, context):\n    return {\"pid\": os.getpid(), \"ppid\": os.getppid()}\n"
	// The default 5 s is the allowance of a trivial run; an emulated host
	// (the cgroup v2 VM) needs it stretched.
	lim := stretchedLimits()

	r := s.execute(s.token("fast"), map[string]any{"source": src, "isolation": "process", "limits": lim})
	if r.status != http.StatusOK {
		t.Fatalf("granted tenant: %d %s", r.status, r.body)
	}
	body := r.json(t)
	dec, _ := body["decision"].(map[string]any)
	if dec["isolation"] != "process" {
		t.Fatalf("decision.isolation = %v, want process", dec["isolation"])
	}
	res, _ := body["result"].(map[string]any)
	if res["ppid"] != float64(1) || res["pid"] == float64(1) {
		t.Fatalf("result %v: not a process forked from a zygote", res)
	}
	if u, _ := body["usage"].(map[string]any); u["isolation"] != "process" {
		t.Fatalf("usage %v: the level it ran at is not process", body["usage"])
	}
	// The audit record names the level too, decided and run.
	recs := s.auditOf(body["execution_id"].(string))
	if len(recs) != 1 {
		t.Fatalf("audit records: %v", recs)
	}
	if d, _ := recs[0]["decision"].(map[string]any); d["isolation"] != "process" {
		t.Fatalf("audit decision %v: isolation is not process", recs[0]["decision"])
	}
	if u, _ := recs[0]["usage"].(map[string]any); u["isolation"] != "process" {
		t.Fatalf("audit usage %v: isolation is not process", recs[0]["usage"])
	}

	before := s.runs.Load()
	r = s.execute(s.token("demo"), map[string]any{"source": src, "isolation": "process", "limits": lim})
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
		t.Fatalf("tenant without process: %d %s, want 403 PolicyDenied", r.status, r.body)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	want := []any{`isolation "process" is not allowed for tenant "demo" (its levels: jail)`}
	if !reflect.DeepEqual(e["reasons"], want) {
		t.Fatalf("reasons = %v, want %v", e["reasons"], want)
	}
	if n := s.runs.Load(); n != before {
		t.Fatalf("%d runs for a denied request", n-before)
	}

	r = s.execute(s.token("fast"), map[string]any{"source": src, "limits": lim})
	if r.status != http.StatusOK {
		t.Fatalf("default level: %d %s", r.status, r.body)
	}
	body = r.json(t)
	dec, _ = body["decision"].(map[string]any)
	res, _ = body["result"].(map[string]any)
	if u, _ := body["usage"].(map[string]any); dec["isolation"] != "jail" || u["isolation"] != "jail" || res["pid"] != float64(1) {
		t.Fatalf("a request without isolation: decision.isolation %v, usage.isolation %v, pid %v; want jail and the jail's PID 1 (%s)", dec["isolation"], u["isolation"], res["pid"], r.body)
	}
}

// TestIsolationProcessRunsJavaScriptAndTypeScript: through the gateway, a
// JavaScript and a TypeScript tool granted isolation process run there
// (decision and usage say process; the tool's Deno is a process of the
// zygote, not a jail's PID 1), and a JavaScript run asking for process with
// packages is denied with the reason and runs nowhere, as a Python one is.
func TestIsolationProcessRunsJavaScriptAndTypeScript(t *testing.T) {
	testenv.Deno(t)
	s := start(t, setup{mutate: func(c *config.Config) {
		fast := config.DemoTenant()
		fast.ID = "fast"
		fast.Policy["isolation"] = []any{"jail", "process"}
		c.Tenants = append(c.Tenants, fast)
	}})
	lim := stretchedLimits()
	for lang, src := range map[string]string{
		"javascript": "export function run(args, context) { return {pid: Deno.pid, ppid: Deno.ppid, n: args.n + 1} }",
		"typescript": "export function run(args: {n: number}): {pid: number, ppid: number, n: number} { return {pid: Deno.pid, ppid: Deno.ppid, n: args.n + 1} }",
	} {
		r := s.execute(s.token("fast"), map[string]any{"language": lang, "source": src, "args": map[string]any{"n": 1}, "isolation": "process", "limits": lim})
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", lang, r.status, r.body)
		}
		body := r.json(t)
		dec, _ := body["decision"].(map[string]any)
		u, _ := body["usage"].(map[string]any)
		res, _ := body["result"].(map[string]any)
		if dec["isolation"] != "process" || u["isolation"] != "process" || res["ppid"] != float64(1) || res["pid"] == float64(1) || res["n"] != float64(2) {
			t.Fatalf("%s: decision %v, usage %v, result %v: not a run at level process", lang, dec, u, res)
		}
	}
	before := s.runs.Load()
	r := s.execute(s.token("fast"), map[string]any{"language": "javascript", "source": "export function run() { return 1 }",
		"requirements": []string{"left-pad@1.3.0"}, "isolation": "process", "limits": lim})
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" || !strings.Contains(string(r.body), "isolation process is not offered with requirements") {
		t.Fatalf("a JavaScript run at process with packages: %d %s, want 403 PolicyDenied naming the reason", r.status, r.body)
	}
	if n := s.runs.Load(); n != before {
		t.Fatalf("%d runs for a denied request", n-before)
	}
}
