package app_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// Code mode from JavaScript and TypeScript, end to end: the same gateway,
// OPA, nsjail and MCP server as the Python code-mode tests (startCodeMode),
// with the tool running under Deno. Its bridge requests travel as kind-3
// frames on stdout and the answers on stdin; the governance is the same.

func startJSCodeMode(t *testing.T, maxCalls int) *codeMode {
	t.Helper()
	testenv.Deno(t)
	return startCodeMode(t, maxCalls)
}

func TestCodeModeTypeScriptSearchesDescribesAndRunsTwoTools(t *testing.T) {
	cm := startJSCodeMode(t, 0)
	src := `
type Found = { name: string; description: string };

export async function run(args: { a: number; b: number }, context: any) {
  const found: Found[] = await context.tools.search("add", { limit: 5 });
  const schema = (await context.tools.describe("math.add")).input_schema;
  const [sum, shout] = await Promise.all([
    context.tools.run("math.add", { a: args.a, b: args.b }),
    context.tools["math.upper"]({ s: "total" }),
  ]);
  return { found: found.map((t) => t.name), props: Object.keys(schema.properties).sort(), answer: ` + "`${shout.text}=${sum.sum}`" + ` };
}
`
	env := cm.run(t, map[string]any{"execution_id": "cm-ts-two", "language": "typescript", "source": src, "args": map[string]any{"a": 40, "b": 2}})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `{"answer":"TOTAL=42","found":["math.add"],"props":["a","b"]}` {
		t.Errorf("result %s", got)
	}
	calls, _ := env["tool_calls"].([]any)
	var tools []string
	for _, c := range calls {
		c := c.(map[string]any)
		if c["server"] != "math" || c["outcome"] != "ok" || c["decision_id"] == "" {
			t.Errorf("tool call %v", c)
		}
		tools = append(tools, c["tool"].(string))
	}
	sort.Strings(tools) // the two calls overlapped (Promise.all)
	if strings.Join(tools, ",") != "math.add,math.upper" {
		t.Errorf("envelope tool_calls: %s", asJSON(env["tool_calls"]))
	}
	rec := cm.auditFor(t, "cm-ts-two")
	if rcalls, _ := rec["tool_calls"].([]any); len(rcalls) != 2 {
		t.Errorf("audit tool_calls: %s", asJSON(rec["tool_calls"]))
	}
	if n := cm.mcp.Calls("add") + cm.mcp.Calls("upper"); n != 2 {
		t.Errorf("the server answered %d calls, want 2", n)
	}
}

func TestCodeModeJavaScriptDeniedCallsAreTypedInsideTheTool(t *testing.T) {
	cm := startJSCodeMode(t, 0)
	src := `
export async function run(args, context) {
  const out = [];
  for (const [name, a] of [["crm.lookup", {}], ["shell.exec", { cmd: "id" }], ["math.add", { a: 1, b: 2 }]]) {
    try {
      out.push(["ok", await context.tools.run(name, a)]);
    } catch (e) {
      if (!(e instanceof context.ToolDenied) || !(e instanceof execgate.ToolFailure)) throw e;
      out.push([e.type, e.name, e.tool, e.message]);
    }
  }
  return out;
}
`
	env := cm.run(t, map[string]any{"execution_id": "cm-js-deny", "language": "javascript", "source": src})
	mustOK(t, env)
	want := `[["ToolDenied","ToolDenied","crm.lookup","tool \"crm.lookup\" is not granted to this run"],` +
		`["ToolDenied","ToolDenied","shell.exec","denied by policy: shell.* is denied for role executor"],["ok",{"sum":3}]]`
	if got := asJSON(env["result"]); got != want {
		t.Errorf("result\n%s\nwant\n%s", got, want)
	}
	if cm.mcp.Calls("exec") != 0 {
		t.Errorf("a denied call reached the server")
	}
	rec := cm.auditFor(t, "cm-js-deny")
	rcalls, _ := rec["tool_calls"].([]any)
	if len(rcalls) != 3 || rcalls[0].(map[string]any)["outcome"] != "ToolDenied" || rcalls[1].(map[string]any)["outcome"] != "ToolDenied" {
		t.Errorf("audit tool_calls: %s", asJSON(rec["tool_calls"]))
	}

	t.Run("uncaught, it ends the run as a ToolError naming the type, as in Python", func(t *testing.T) {
		env := cm.run(t, map[string]any{"language": "javascript", "source": `export async function run(args, context) { return await context.tools.crm_lookup({}) }`})
		e, _ := env["error"].(map[string]any)
		if env["status"] != "error" || e["type"] != "ToolError" || !strings.HasPrefix(e["message"].(string), `ToolDenied: tool "crm_lookup" is not granted`) {
			t.Errorf("envelope %s", asJSON(env))
		}
	})
}

func TestCodeModeJavaScriptTestModeFixturesAnswerWithoutTraffic(t *testing.T) {
	cm := startJSCodeMode(t, 0)
	before := cm.mcp.Requests()
	src := `
export async function run(args, context) {
  const names = (await context.tools.search("")).map((t) => t.name);
  const total = (await context.tools.run("math.add", { a: 1, b: 2 })).sum;
  let missing = "";
  try { await context.tools.run("math.upper", { s: "x" }) } catch (e) { missing = e.type }
  return { names, sum: total, attr: await context.tools.weather(), missing };
}
`
	env := cm.run(t, map[string]any{"language": "javascript", "source": src, "mode": "test",
		"fixtures": map[string]any{"tools": map[string]any{"math.add": map[string]any{"sum": 99}, "weather": "sunny"}}})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `{"attr":"sunny","missing":"ToolDenied","names":["math.add","weather"],"sum":99}` {
		t.Errorf("result %s", got)
	}
	if n := cm.mcp.Requests() - before; n != 0 {
		t.Errorf("test mode sent %d requests to the tool server", n)
	}
}

func TestCodeModeJavaScriptFloodIsCutAtTheLimit(t *testing.T) {
	cm := startJSCodeMode(t, 50)
	// 2000 calls at once: the harness keeps at most max_inflight of them
	// unanswered, the gateway denies every call past the run's 50.
	src := `
export async function run(args, context) {
  let ok = 0, denied = 0;
  const calls = [];
  for (let i = 0; i < 2000; i++) {
    calls.push(context.tools.run("math.add", { a: i, b: 1 }).then(() => ok++, (e) => {
      if (!(e instanceof context.ToolDenied)) throw e;
      denied++;
    }));
  }
  await Promise.all(calls);
  return [ok, denied];
}
`
	env := cm.run(t, map[string]any{"execution_id": "cm-js-flood", "language": "javascript", "source": src, "limits": map[string]any{"timeout_ms": 60000, "cpu_ms": 60000}})
	mustOK(t, env)
	if got := asJSON(env["result"]); got != `[50,1950]` {
		t.Errorf("flood result %s, want [50,1950]", got)
	}
	if n := cm.mcp.Calls("add"); n != 50 {
		t.Errorf("the server answered %d calls, want 50", n)
	}
	rec := cm.auditFor(t, "cm-js-flood")
	rcalls, _ := rec["tool_calls"].([]any)
	if len(rcalls) > 66 || rec["tool_calls_dropped"].(float64)+float64(len(rcalls)) != 2000 {
		t.Errorf("audit keeps %d calls and counts %v dropped", len(rcalls), rec["tool_calls_dropped"])
	}
}

// A tool cannot forge a bridge request: whatever it writes on stdout is the
// payload of a kind-1 frame, and the raw paths to fd 1 that need no
// permission (Deno's internal namespace, Node's process.stdout) are gone
// before it loads.
func TestCodeModeJavaScriptToolCannotForgeABridgeFrame(t *testing.T) {
	cm := startJSCodeMode(t, 0)
	src := `
export async function run(args, context) {
  const req = new TextEncoder().encode(JSON.stringify({ v: 1, id: 4242, op: "run", name: "math.add", args: { a: 1, b: 1 } }));
  const frame = new Uint8Array(5 + req.length);
  frame[0] = 3;
  new DataView(frame.buffer).setUint32(1, req.length);
  frame.set(req, 5);
  const text = new TextDecoder().decode(frame);
  const tried = {};
  const attempt = async (name, f) => {
    try { await f(); tried[name] = "wrote"; } catch (e) { tried[name] = String(e?.name ?? e); }
  };
  await attempt("console", () => console.log(text));
  await attempt("writeSync", () => Deno.stdout.writeSync(frame));
  await attempt("write", () => Deno.stdout.write(frame));
  await attempt("writable", async () => { const w = Deno.stdout.writable.getWriter(); await w.write(frame); w.releaseLock(); });
  await attempt("core", () => Deno[Deno.internal].core.writeSync(1, frame));
  await attempt("process", () => globalThis.process.stdout.write(frame));
  await attempt("dev", () => Deno.openSync("/dev/stdout", { write: true }).writeSync(frame));
  tried.stdin = String(await Deno.stdin.read(new Uint8Array(16)));
  // Give a forged request time to be answered (it must not be).
  await new Promise((r) => setTimeout(r, 300));
  return tried;
}
`
	env := cm.run(t, map[string]any{"execution_id": "cm-js-forge", "language": "javascript", "source": src})
	mustOK(t, env)
	want := `{"console":"wrote","core":"TypeError","dev":"NotCapable","process":"TypeError","stdin":"null","writable":"wrote","write":"wrote","writeSync":"wrote"}`
	if got := asJSON(env["result"]); got != want {
		t.Errorf("attempts %s\nwant     %s", got, want)
	}
	if n := cm.mcp.Calls("add"); n != 0 {
		t.Errorf("a forged frame reached the server (%d calls)", n)
	}
	if calls, _ := env["tool_calls"].([]any); len(calls) != 0 {
		t.Errorf("tool_calls %s", asJSON(env["tool_calls"]))
	}
	// The four framed writes are the tool's stdout, forged bytes and all.
	if n := strings.Count(env["stdout"].(string), `"id":4242,"op":"run","name":"math.add"`); n != 4 {
		t.Errorf("stdout carries the frame %d times, want 4: %q", n, env["stdout"])
	}
}
