package dispatch

import (
	"net/http"
	"testing"
	"time"

	"github.com/execgate/execgate/toolbridge"
)

// The run limits of code mode hold through the split as they do in one
// process: the executor forwards every bridge request to the gateway that
// owns the run, whose bridge decides and counts it.

func TestSplitPipelinedCallsAndLookupsKeepTheRunsLimits(t *testing.T) {
	e := newSplitEnv(t)
	e.policyExtra = `, tool_calls: {max_per_run: {"math.add": 3}}`
	e.toolsLimits = `{max_lookups: 20}`
	e.startGateway()
	e.startExecutor("ex-a")
	waitFor(t, 30*time.Second, "/readyz naming the executor", func() bool {
		code, r := e.readyz()
		ok, _, _ := r.check("executors")
		return code == http.StatusOK && ok
	})

	t.Run("calls sent at once pass a per-tool limit exactly", func(t *testing.T) {
		const src = `
import asyncio
from execgate_runtime import ToolDenied

def run(args, context):
    async def one(i):
        try:
            await context.tools.run_async("math.add", {"a": i, "b": 1})
            return "ok"
        except ToolDenied:
            return "denied"

    async def all_at_once():
        return await asyncio.gather(*[one(i) for i in range(12)])

    out = asyncio.run(all_at_once())
    return [out.count("ok"), out.count("denied")]
`
		for round := range 4 {
			before := e.mcp.Calls("add")
			status, env, err := e.execute(map[string]any{"source": src, "limits": map[string]any{"timeout_ms": 20000}})
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusOK || env.Status != "ok" || string(env.Result) != `[3, 9]` && string(env.Result) != `[3,9]` {
				t.Fatalf("round %d: 12 calls at once under max_per_run 3 = %d %s %s %+v, want [3, 9]", round, status, env.Status, env.Result, env.Error)
			}
			if got := e.mcp.Calls("add") - before; got != 3 {
				t.Fatalf("round %d: the tool server answered %d calls, want 3", round, got)
			}
		}
	})

	t.Run("a loop of searches and describes stops at max_lookups and is charged", func(t *testing.T) {
		const src = `
from execgate_runtime import ToolDenied

def run(args, context):
    ok = denied = 0
    for i in range(60):
        try:
            if i % 2:
                context.tools.describe("math.add")
            else:
                context.tools.search("")
            ok += 1
        except ToolDenied:
            denied += 1
    return [ok, denied]
`
		status, env, err := e.execute(map[string]any{"source": src, "limits": map[string]any{"timeout_ms": 20000}})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusOK || env.Status != "ok" || string(env.Result) != `[20, 40]` && string(env.Result) != `[20,40]` {
			t.Fatalf("60 lookups under max_lookups 20 = %d %s %s %+v, want [20, 40]", status, env.Status, env.Result, env.Error)
		}
		if least := int64(60 * toolbridge.RequestCPU / time.Millisecond); env.Usage.BridgeCPUMS < least {
			t.Fatalf("usage.bridge_cpu_ms = %d, want at least %d (60 requests at %v)", env.Usage.BridgeCPUMS, least, toolbridge.RequestCPU)
		}
		t.Logf("60 lookups through the split charged %d ms", env.Usage.BridgeCPUMS)
	})
}
