package app_test

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// A run's tool limits hold however the run sends its requests: calls sent
// at once (asyncio.gather over run_async, Promise.all) pass a per-tool
// limit (policy tool_calls.max_per_run) and the run's max_calls exactly as
// calls sent one after another do, and searches and describes have a limit
// of their own and are charged to the tenant's budget.

// pipelineSource sends n calls of tool at once and counts how they ended.
const pipelineSource = `
import asyncio
from execgate_runtime import ToolDenied

def run(args, context):
    async def one():
        try:
            await context.tools.run_async(args["tool"], args["args"])
            return "ok"
        except ToolDenied:
            return "denied"

    async def all_at_once():
        return await asyncio.gather(*[one() for _ in range(args["n"])])

    out = asyncio.run(all_at_once())
    return {"ok": out.count("ok"), "denied": out.count("denied")}
`

// pipelineTSSource is pipelineSource under Deno.
const pipelineTSSource = `
export async function run(args: any, context: any) {
  const one = () => context.tools.run(args.tool, args.args).then(() => "ok", (e: any) => e.name === "ToolDenied" ? "denied" : String(e));
  const out: string[] = await Promise.all(Array.from({ length: args.n }, one));
  return { ok: out.filter((o) => o === "ok").length, denied: out.filter((o) => o === "denied").length };
}
`

// pipelined runs n calls of tool at once in one run of acme and checks
// that exactly pass were let through: in the result, the envelope's
// tool_calls and at the tool server.
func (cm *codeMode) pipelined(t *testing.T, id, language, tool string, args map[string]any, n, pass int, server string) {
	t.Helper()
	src := pipelineSource
	if language == "typescript" {
		src = pipelineTSSource
	}
	before := cm.mcp.Calls(server)
	env := cm.run(t, map[string]any{"execution_id": id, "language": language, "source": src,
		"args": map[string]any{"tool": tool, "args": args, "n": n}})
	mustOK(t, env)
	if got, want := asJSON(env["result"]), fmt.Sprintf(`{"denied":%d,"ok":%d}`, n-pass, pass); got != want {
		t.Fatalf("%s: %d calls of %s sent at once came to %s, want %s", id, n, tool, got, want)
	}
	ok := 0
	for _, c := range env["tool_calls"].([]any) {
		if c.(map[string]any)["outcome"] == "ok" {
			ok++
		}
	}
	if ok != pass {
		t.Fatalf("%s: the envelope lists %d ok calls, want %d", id, ok, pass)
	}
	if got := cm.mcp.Calls(server) - before; got != pass {
		t.Fatalf("%s: the tool server answered %d calls, want %d", id, got, pass)
	}
}

func TestCodeModePipelinedCallsPassAPerToolLimitExactly(t *testing.T) {
	// math's tool list is always stale, so every call refetches it: the
	// widest window between reading the counts and raising them.
	cm := startCodeModeWith(t, func(c *toolconfig.Config) { c.Servers[0].ToolsTTLMS = 1 })
	slow := map[string]any{"ms": 100}
	// Today's main let 4, 5 or all 12 through, most runs (sequential
	// calls stop at 3).
	for round := range 4 {
		cm.pipelined(t, fmt.Sprintf("cm-pipe-slow-%d", round), "python", "math.slow", slow, 12, 3, "slow")
	}
	cm.pipelined(t, "cm-pipe-slow-ts", "typescript", "math.slow", slow, 12, 3, "slow")
}

func TestCodeModePipelinedCallsPassMaxCallsExactly(t *testing.T) {
	cm := startCodeModeWith(t, func(c *toolconfig.Config) {
		c.Limits.MaxCalls = 5
		c.Servers[0].ToolsTTLMS = 1
	})
	for round := range 3 {
		cm.pipelined(t, fmt.Sprintf("cm-pipe-add-%d", round), "python", "math.add", map[string]any{"a": 1, "b": 2}, 12, 5, "add")
	}
}

func TestCodeModeLookupsHaveTheirOwnLimitAndAreCharged(t *testing.T) {
	const maxLookups = 20
	cm := startCodeModeWith(t, func(c *toolconfig.Config) { c.Limits.MaxLookups = maxLookups; c.Limits.MaxCalls = 2 })
	src := `
from execgate_runtime import ToolDenied

def run(args, context):
    ok = denied = 0
    for i in range(args["n"]):
        try:
            if i % 2:
                context.tools.describe("math.add")
            else:
                context.tools.search("")
            ok += 1
        except ToolDenied as e:
            denied += 1
            reason = e.reason
    # Calls are not lookups: the run may still make its max_calls calls.
    total = context.tools.run("math.add", {"a": 1, "b": 2})["sum"]
    return {"ok": ok, "denied": denied, "reason": reason, "sum": total}
`
	const n = 200
	env := cm.run(t, map[string]any{"execution_id": "cm-lookups", "source": src, "args": map[string]any{"n": n}})
	mustOK(t, env)
	want := fmt.Sprintf(`{"denied":%d,"ok":%d,"reason":"the run's lookup limit (%d searches and describes) is reached","sum":3}`, n-maxLookups, maxLookups, maxLookups)
	if got := asJSON(env["result"]); got != want {
		t.Fatalf("result %s\nwant   %s", got, want)
	}
	// Every request is charged, refused ones too: n lookups and one call.
	usage := env["usage"].(map[string]any)
	least := (int64(n)*int64(toolbridge.RequestCPU) + int64(toolbridge.RequestCPU+toolbridge.CallCPU)) / int64(time.Millisecond)
	if got, _ := usage["bridge_cpu_ms"].(float64); int64(got) < least {
		t.Fatalf("usage.bridge_cpu_ms = %v, want at least %d (%d lookups and a call)", usage["bridge_cpu_ms"], least, n)
	}
	rec := cm.auditFor(t, "cm-lookups")
	if got := rec["usage"].(map[string]any)["bridge_cpu_ms"]; got != usage["bridge_cpu_ms"] {
		t.Errorf("audit usage.bridge_cpu_ms = %v, want %v", got, usage["bridge_cpu_ms"])
	}
	// The tenant's budget was charged the jail's CPU and the bridge's.
	r := cm.do(http.MethodGet, "/v1/admin/tenants/acme/usage", cm.server.token("demo", tenancy.RoleAdmin), nil)
	if r.status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	budget := r.json(t)["budget"].(map[string]any)
	if got, want := budget["used_ms"].(float64), usage["cpu_ms"].(float64)+usage["bridge_cpu_ms"].(float64); got != want {
		t.Errorf("budget used_ms = %v, want cpu_ms + bridge_cpu_ms = %v", got, want)
	}
}

// processCPU is the CPU this process (the gateway, in this test) has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestCodeModeBridgeChargeCoversTheGatewaysCPU(t *testing.T) {
	// The tool server runs in a process of its own: the CPU this process
	// uses during a run is the gateway's (the jail is another process too).
	url := toolbridgetest.StartProcess(t, "")
	cm := startCodeModeWith(t, func(c *toolconfig.Config) {
		c.Servers[0].URL = url
		c.Limits = toolconfig.Limits{MaxLookups: 1 << 20, MaxCalls: 1 << 20, MaxBytesOut: 1 << 30}
	})
	src := `
def run(args, context):
    op = args["op"]
    for i in range(args["n"]):
        try:
            if op == "search":
                context.tools.search("")
            elif op == "describe":
                context.tools.describe("math.add")
            elif op == "call":
                context.tools.run("math.add", {"a": i, "b": 1})
            elif op == "big result":
                context.tools.run("math.big", {"bytes": 200 << 10})
            elif op == "big refused call":
                context.tools.run("math.add", {"a": 1, "b": 2, "pad": "x" * (900 << 10)})
        except Exception:
            pass
    return 1
`
	for _, tc := range []struct {
		op string
		n  int
	}{{"search", 2000}, {"describe", 2000}, {"call", 300}, {"big result", 100}, {"big refused call", 100}} {
		t.Run(tc.op, func(t *testing.T) {
			// The gateway's CPU for n requests: a run making them less a
			// run making none.
			var cpu [2]time.Duration
			var charged [2]float64
			for i, n := range []int{0, tc.n} {
				before := processCPU(t)
				env := cm.run(t, map[string]any{"source": src, "args": map[string]any{"op": tc.op, "n": n}, "limits": map[string]any{"timeout_ms": 60000, "cpu_ms": 60000}})
				cpu[i] = processCPU(t) - before
				mustOK(t, env)
				charged[i], _ = env["usage"].(map[string]any)["bridge_cpu_ms"].(float64)
			}
			spent := (cpu[1] - cpu[0]).Milliseconds()
			charge := int64(charged[1] - charged[0])
			t.Logf("%d × %s: the gateway spent %d ms of CPU, the run was charged %d ms (%.2f×)", tc.n, tc.op, spent, charge, float64(charge)/float64(max(spent, 1)))
			// The prices are set above what was measured; a loaded host
			// may measure more than the calibration did, but never twice
			// as much.
			if 2*charge < spent {
				t.Errorf("%d × %s: charged %d ms for %d ms of the gateway's CPU", tc.n, tc.op, charge, spent)
			}
		})
	}
}
