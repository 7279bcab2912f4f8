package sandbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// newJSRunner is a runner over a rootfs with Deno. Under CI=true a host
// without root, nsjail or Deno fails these tests instead of skipping them.
func newJSRunner(t *testing.T, mod func(*sandbox.Config), opts ...sandbox.Option) *sandbox.Runner {
	t.Helper()
	testenv.Nsjail(t)
	testenv.Deno(t)
	return newRunner(t, mod, opts...)
}

func runJS(t *testing.T, r *sandbox.Runner, lang, src string, mod func(*sandbox.Spec)) sandbox.Result {
	t.Helper()
	// The default limits, the time ones stretched: under TCG emulation a
	// TypeScript probe's transpile took over the default 5 s.
	lim := sandbox.Limits{TimeoutMS: stretch(limits.Default.TimeoutMS), CPUMS: stretch(limits.Default.CPUMS)}.Or(limits.Default)
	spec := sandbox.Spec{ExecutionID: "js-test", TenantID: "acme", Language: lang, Source: src, Limits: lim}
	if mod != nil {
		mod(&spec)
	}
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, detail(err))
	}
	return res
}

func wantOK(t *testing.T, res sandbox.Result, result string) {
	t.Helper()
	if res.Status != sandbox.StatusOK {
		t.Fatalf("status %s, error %+v\nstdout: %q\nstderr: %q\nlog: %s", res.Status, res.Error, res.Stdout, res.Stderr, strings.Join(res.NsjailLog, "\n"))
	}
	if result != "" && !jsonEqual(t, res.Result, result) {
		t.Fatalf("result %s, want %s", res.Result, result)
	}
}

func wantErr(t *testing.T, res sandbox.Result, typ, msgPart string) {
	t.Helper()
	if res.ErrorType() != typ {
		t.Fatalf("error type %q (%+v), want %s\nresult %s\nstdout: %q\nstderr: %q\nlog: %s", res.ErrorType(), res.Error, typ, res.Result, res.Stdout, res.Stderr, strings.Join(res.NsjailLog, "\n"))
	}
	if msgPart != "" && !strings.Contains(res.Error.Message+"\n"+res.Error.Traceback, msgPart) {
		t.Fatalf("error %+v does not mention %q", res.Error, msgPart)
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("result %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("want %q is not JSON: %v", want, err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// The DESIGN §4 probe, in JavaScript and in TypeScript.
func TestJavaScriptProbeReturnsOK(t *testing.T) {
	r := newJSRunner(t, nil)
	for _, tc := range []struct{ name, lang, src string }{
		{"javascript, async named export", sandbox.LanguageJavaScript, "export async function run(args, context) {\n  return {ok: true};\n}\n"},
		{"typescript, typed async export", sandbox.LanguageTypeScript, "export async function run(args: unknown, context: {tenantId: string}): Promise<{ok: boolean}> {\n  return {ok: true};\n}\n"},
		{"javascript, sync default export", sandbox.LanguageJavaScript, "export default function (args, context) { return {ok: true} }\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, tc.lang, tc.src, nil)
			wantOK(t, res, `{"ok": true}`)
		})
	}
}

// attempt runs body inside run() and returns {"ok": true, "value": …} or
// {"denied": error name, "message": …}: what the tool saw.
const attemptJS = `
export async function run(args, context) {
  try {
    const value = await (async () => { %s })();
    return {ok: true, value: value === undefined ? null : String(value).slice(0, 200)};
  } catch (e) {
    return {denied: e?.name ?? typeof e, message: String(e?.message ?? e).split("\n")[0]};
  }
}
`

type attemptResult struct {
	OK      bool   `json:"ok"`
	Value   string `json:"value"`
	Denied  string `json:"denied"`
	Message string `json:"message"`
}

// The reference runner's containment assertions (CONTAINMENT.md item 28 and
// the general items), each run as its own tool in a real jail: the attempt
// must fail inside the tool with the named error and message. The runner
// skips the import check (WithoutImportCheck), so the import attempts reach
// the jail and prove that its second wall, the import map and Deno's
// flags, holds on its own (TestJavaScriptImportsAreRefusedBeforeTheJail is
// the first wall). Every attempt runs at both isolation levels: at level
// process the tool's Deno was execve'd by a process forked from the
// zygote, with the same flags and import map.
func TestJavaScriptContainmentDeniesEachAttempt(t *testing.T) {
	r := newJSRunner(t, nil, sandbox.WithoutImportCheck())
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		t.Run("level "+level, func(t *testing.T) { jsContainmentAttempts(t, r, level) })
	}
}

func jsContainmentAttempts(t *testing.T, r *sandbox.Runner, level string) {
	for _, tc := range []struct {
		name, body  string
		wantDenied  string // the error's name seen by the tool
		wantMessage string // a part of its message
	}{
		{"fetch needs net permission", `return await fetch("http://127.0.0.1:6379/")`, "NotCapable", "net access"},
		{"a file read needs read permission", `return Deno.readTextFileSync("/etc/passwd")`, "NotCapable", "read access"},
		{"/proc/self/environ is not readable", `return Deno.readTextFileSync("/proc/self/environ")`, "NotCapable", "read access"},
		{"/proc/self/mem is not openable", `return Deno.openSync("/proc/self/mem", {read: true, write: true})`, "NotCapable", "access"},
		{"a file write needs write permission", `Deno.writeTextFileSync("/tmp/x", "x"); return "written"`, "NotCapable", "write access"},
		{"Deno's code cache is not readable", `return Deno.readFileSync("/opt/execgate/deno-cache/v8_code_cache_v2").length`, "NotCapable", "read access"},
		{"Deno's code cache is not writable", `Deno.writeFileSync("/opt/execgate/deno-cache/v8_code_cache_v2", new Uint8Array(1)); return "written"`, "NotCapable", "write access"},
		{"Deno.env needs env permission", `return Deno.env.get("PATH")`, "NotCapable", "env access"},
		{"Deno.env.toObject needs env permission", `return JSON.stringify(Deno.env.toObject())`, "NotCapable", "env access"},
		{"Deno.Command needs run permission", `return (await new Deno.Command("/usr/bin/python3", {args: ["-c", "print(1)"]}).output()).code`, "NotCapable", "run access"},
		{"Deno.dlopen (FFI) needs ffi permission", `return Deno.dlopen("/lib/x86_64-linux-gnu/libc.so.6", {getpid: {parameters: [], result: "i32"}})`, "NotCapable", "ffi access"},
		{"Deno.connect needs net permission", `return await Deno.connect({hostname: "127.0.0.1", port: 6379})`, "NotCapable", "net access"},
		{"node:fs is blocked by the import map", `return (await import("node:fs")).readFileSync("/etc/passwd", "utf8")`, "TypeError", "blocked://import/node/fs"},
		{"node:child_process is blocked by the import map", `return (await import("node:child_process")).execSync("id")`, "TypeError", "blocked://import/node/child_process"},
		{"bare node builtins are blocked", `return (await import("fs")).readFileSync("/etc/passwd")`, "TypeError", "blocked://import/node/fs"},
		{"npm: is blocked", `return await import("npm:left-pad")`, "TypeError", "--no-npm is specified"},
		{"jsr: is blocked", `return await import("jsr:@std/path")`, "TypeError", "--no-remote is specified"},
		{"remote imports are blocked", `return await import("https://deno.land/std/path/mod.ts")`, "TypeError", "blocked://import/https/"},
		{"relative imports are blocked", `return await import("./other.js")`, "TypeError", `Import "./other.js" not a dependency and not in import map`},
		{"absolute file imports are blocked", `return await import("/etc/passwd")`, "TypeError", `Import "/etc/passwd" not a dependency and not in import map`},
		{"a relative text import is blocked", `return await import("./tool.js", {with: {type: "text"}})`, "TypeError", "not in import map"},
		{"a text import of a host file is blocked", `return await import("file:///etc/passwd", {with: {type: "text"}})`, "TypeError", "blocked://import/file/"},
		{"a JSON import is blocked", `return await import("file:///opt/execgate/harness/import_map.json", {with: {type: "json"}})`, "TypeError", "blocked://import/file/"},
		{"new Function is disallowed", `return new Function("return import('node:fs')")()`, "EvalError", "Code generation from strings disallowed"},
		{"eval is disallowed", `return (0, eval)("1 + 1")`, "EvalError", "Code generation from strings disallowed"},
		{"blob: URLs cannot be made", `return await import(URL.createObjectURL(new Blob(["export default 1"], {type: "text/javascript"})))`, "TypeError", "blob: imports are blocked"},
		{"a made-up blob: URL does not load", `return await import("blob:null/4b1c1b5e-0000-4000-8000-000000000000")`, "TypeError", "blob"},
		{"a data: module gets no more than its importer: node:", `return await import("data:text/javascript,export * from 'node:fs'")`, "TypeError", "blocked://import/node/fs"},
		{"a data: module gets no more than its importer: files", `return await import("data:text/javascript,export default Deno.readTextFileSync('/etc/passwd')")`, "NotCapable", "read access"},
		{"Deno.permissions.request cannot prompt", `const s = (await Deno.permissions.request({name: "read"})).state; if (s !== "denied") return s; throw new Error(s)`, "Error", "denied"},
		{"workers cannot be started", `return new Worker("file:///opt/execgate/harness/execgate_harness.js", {type: "module"})`, "TypeError", "Worker is not available to tools"},
		{"a worker from a data: URL cannot be started", `return new Worker("data:text/javascript,postMessage(1)", {type: "module"})`, "TypeError", "Worker is not available to tools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, sandbox.LanguageJavaScript, strings.Replace(attemptJS, "%s", tc.body, 1), func(s *sandbox.Spec) { s.Isolation = level })
			wantOK(t, res, "")
			if res.Usage.Isolation != level {
				t.Fatalf("the run ran at level %q, not %s", res.Usage.Isolation, level)
			}
			var got attemptResult
			if err := json.Unmarshal(res.Result, &got); err != nil {
				t.Fatalf("result %s: %v", res.Result, err)
			}
			t.Logf("tool saw: %+v", got)
			if got.OK || got.Denied != tc.wantDenied || !strings.Contains(got.Message, tc.wantMessage) {
				t.Fatalf("tool saw %+v, want %s mentioning %q", got, tc.wantDenied, tc.wantMessage)
			}
		})
	}
}

// Deno's code cache (built into the rootfs, package rootfs) is in every
// jail, and read-only there: a tool of any language can change nothing in
// what the next run's Deno loads. (A JavaScript tool cannot even read it:
// TestJavaScriptContainmentDeniesEachAttempt.)
func TestDenosCodeCacheIsInTheJailReadOnly(t *testing.T) {
	testenv.Deno(t)
	r := newRunner(t, nil)
	res := run(t, r, sandbox.Spec{Source: `import errno, os

def run(args, context):
    d = "/opt/execgate/deno-cache"
    p = d + "/v8_code_cache_v2"
    def attempt(f):
        try:
            f()
            return "done"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
    return {
        "size": os.path.getsize(p) if os.path.isfile(p) else -1,
        "write": attempt(lambda: open(p, "r+b").close()),
        "create": attempt(lambda: open(d + "/new", "xb").close()),
        "remove": attempt(lambda: os.remove(p)),
        "chmod": attempt(lambda: os.chmod(p, 0o666)),
    }
`, Limits: limits.Default})
	wantOK(t, res, "")
	var got struct {
		Size                         int64
		Write, Create, Remove, Chmod string
	}
	if err := json.Unmarshal(res.Result, &got); err != nil {
		t.Fatalf("result %s: %v", res.Result, err)
	}
	if got.Size <= 0 {
		t.Errorf("no code cache in the jail (size %d)", got.Size)
	}
	for what, e := range map[string]string{"write": got.Write, "create": got.Create, "remove": got.Remove, "chmod": got.Chmod} {
		if e != "EROFS" && e != "EACCES" && e != "EPERM" {
			t.Errorf("%s on the code cache: %s, want it refused", what, e)
		}
	}
}

// What a JavaScript tool may do, and how each way of failing is reported.
func TestJavaScriptOutcomes(t *testing.T) {
	r := newJSRunner(t, nil)
	fixtures := func(s *sandbox.Spec) {
		s.Mode = "test"
		s.ToolFixtures = json.RawMessage(`{"crm_lookup": {"id": 7, "name": "Ada"}, "search_docs": ["a", "b"]}`)
		s.Variables = json.RawMessage(`{"region": "eu"}`)
	}
	for _, tc := range []struct {
		name, lang, src string
		mod             func(*sandbox.Spec)
		check           func(t *testing.T, res sandbox.Result)
	}{
		{"compute is allowed", sandbox.LanguageJavaScript,
			"export function run(args) { let s = 0n; for (let i = 0n; i < 100000n; i++) s += i; return {sum: String(s), sha: [...new Uint8Array(8)].length} }", nil,
			func(t *testing.T, res sandbox.Result) { wantOK(t, res, `{"sum": "4999950000", "sha": 8}`) }},
		{"console output lands in stdout and stderr, apart from the result", sandbox.LanguageJavaScript,
			"export function run() { console.log('hello', {a: 1}); console.info('info'); console.error('oops'); Deno.stdout.writeSync(new TextEncoder().encode('raw\\n')); return 1 }", nil,
			func(t *testing.T, res sandbox.Result) {
				wantOK(t, res, `1`)
				if res.Stdout != "hello { a: 1 }\ninfo\nraw\n" || !strings.Contains(res.Stderr, "oops") {
					t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
				}
			}},
		{"the context carries ids, variables, the deadline and logs", sandbox.LanguageTypeScript,
			"export async function run(args: {n: number}, context: any) { context.log('starting', 'warning'); context.log('x', 'bogus'); return {t: context.tenantId, e: context.executionId, v: context.variables.region, left: context.remaining() > 1000 && context.remaining() <= 5000, n: args.n} }",
			func(s *sandbox.Spec) { fixtures(s); s.Args = json.RawMessage(`{"n": 3}`) },
			func(t *testing.T, res sandbox.Result) {
				wantOK(t, res, `{"t": "acme", "e": "js-test", "v": "eu", "left": true, "n": 3}`)
				if len(res.Logs) != 2 || res.Logs[0] != (sandbox.LogLine{Level: "warning", Message: "starting"}) || res.Logs[1].Level != "info" {
					t.Fatalf("logs %+v", res.Logs)
				}
			}},
		{"bridge calls answer from fixtures in test mode", sandbox.LanguageJavaScript,
			"export async function run(args, context) { const a = await context.tools.crm_lookup({id: 7}); const b = await context.tools.run('search_docs', {q: 'x'}); const found = await context.tools.search('crm'); const d = await context.tools.describe('crm_lookup'); return {a, b, found, d: d.name} }",
			fixtures,
			func(t *testing.T, res sandbox.Result) {
				wantOK(t, res, `{"a": {"id": 7, "name": "Ada"}, "b": ["a", "b"], "found": [{"name": "crm_lookup", "description": "test fixture"}], "d": "crm_lookup"}`)
				if len(res.ToolCalls) != 2 || res.ToolCalls[0].Server != "fixture" || res.ToolCalls[1].Tool != "search_docs" {
					t.Fatalf("the fixture calls are not the runner's (FixtureBridge): %+v", res.ToolCalls)
				}
			}},
		{"a bridge call without a fixture is the tool's error", sandbox.LanguageJavaScript,
			"export async function run(args, context) { return await context.tools.nope({}) }", fixtures,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrToolError, `ToolDenied: tool "nope" has no fixture in this test run`)
			}},
		{"a run granted no tools is denied every call, typed", sandbox.LanguageJavaScript,
			"export async function run(args, context) { try { await context.tools.crm_lookup({}) } catch (e) { return [e instanceof context.ToolDenied, e instanceof context.ToolFailure, e.type, e.name, e.tool, e.message] } }", nil,
			func(t *testing.T, res sandbox.Result) {
				wantOK(t, res, `[true, true, "ToolDenied", "ToolDenied", "crm_lookup", "tool \"crm_lookup\" is not granted to this run (no host tools are available to it)"]`)
			}},
		{"a thrown error is ToolError with the user's frames only", sandbox.LanguageTypeScript,
			"function inner(x: number): number {\n  throw new RangeError('bad ' + x);\n}\nexport function run() {\n  return inner(4);\n}\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrToolError, "RangeError: bad 4")
				tb := res.Error.Traceback
				if !strings.Contains(tb, "at inner (tool.ts:2:9)") || !strings.Contains(tb, "at run (tool.ts:5:10)") || strings.Contains(tb, "execgate_harness") || res.Error.Line != 2 {
					t.Fatalf("traceback %q line %d", tb, res.Error.Line)
				}
			}},
		{"InvalidInput is the tool's typed failure", sandbox.LanguageJavaScript,
			"export function run(args, context) { throw new context.InvalidInput('name is required') }", nil,
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrInvalidInput, "name is required") }},
		{"a tool cannot claim a sandbox outcome", sandbox.LanguageJavaScript,
			"export function run(args, context) { throw new context.ToolFailure('MemoryLimit', 'fake') }", nil,
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrToolError, "MemoryLimit: fake") }},
		{"a syntax error is InvalidSource with its line", sandbox.LanguageJavaScript,
			"export function run() {\n  return 1 +* 2;\n}\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrInvalidSource, "")
				if res.Error.Line != 2 {
					t.Fatalf("line %d in %+v", res.Error.Line, res.Error)
				}
			}},
		{"TypeScript syntax in a .js tool is InvalidSource", sandbox.LanguageJavaScript,
			"export function run(args: number) { return 1 }\n", nil,
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrInvalidSource, "") }},
		{"a static relative import is InvalidSource", sandbox.LanguageJavaScript,
			"import {x} from './helpers.js';\nexport function run() { return x }\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrInvalidSource, `imports are not available to tools: "./helpers.js" at line 1, column 17`)
			}},
		{"a static import of node:fs is InvalidSource", sandbox.LanguageJavaScript,
			"import fs from 'node:fs';\nexport function run() { return fs.readFileSync('/etc/passwd', 'utf8') }\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrInvalidSource, `imports are not available to tools: "node:fs" at line 1, column 16`)
			}},
		{"Deno.exit before the result is the tool's error", sandbox.LanguageJavaScript,
			"export function run() { Deno.exit(0) }\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrToolError, "without a valid result envelope")
			}},
		{"no unload handler runs after the envelope, even one that guards Deno's flag", sandbox.LanguageJavaScript,
			`export function run() {
  let took = "no";
  try {
    Object.defineProperty(globalThis, Symbol.for("Deno.isUnloadDispatched"), {get: () => false});
    took = "yes";
  } catch {}
  globalThis.addEventListener("unload", () => { for (;;) {} });
  globalThis.onunload = () => { for (;;) {} };
  return took;
}
`, func(s *sandbox.Spec) {
				s.Limits = sandbox.Limits{TimeoutMS: stretch(5000), CPUMS: stretch(1000)}.Or(limits.Default)
			},
			func(t *testing.T, res sandbox.Result) { wantOK(t, res, `"no"`) }},
		{"runaway recursion is the tool's error", sandbox.LanguageJavaScript,
			"function f(n) { return f(n + 1) + 1 }\nexport function run() { return f(0) }\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrToolError, "Maximum call stack size exceeded")
			}},
		{"a missing entrypoint is EntrypointNotFound", sandbox.LanguageJavaScript,
			"export function main() { return 1 }\n", nil,
			func(t *testing.T, res sandbox.Result) {
				wantErr(t, res, sandbox.ErrEntrypointNotFound, "it exports: main")
			}},
		{"a non-JSON result is InvalidResult", sandbox.LanguageJavaScript,
			"export function run() { return {n: NaN} }\n", nil,
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrInvalidResult, "NaN") }},
		{"a busy loop past the wall limit is Timeout", sandbox.LanguageJavaScript,
			"export function run() { for (;;) {} }\n", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{TimeoutMS: 1500, CPUMS: 10000}.Or(limits.Default) },
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrTimeout, "") }},
		{"a pending promise past the wall limit is Timeout", sandbox.LanguageJavaScript,
			"export async function run() { await new Promise(() => setInterval(() => {}, 1000)) }\n", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{TimeoutMS: 1000}.Or(limits.Default) },
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrTimeout, "") }},
		{"CPU burn past the CPU limit is CPULimit", sandbox.LanguageJavaScript,
			"export function run() { for (;;) {} }\n", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{TimeoutMS: 10000, CPUMS: 800}.Or(limits.Default) },
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrCPULimit, "") }},
		{"a heap bomb is MemoryLimit, not SandboxCrashed", sandbox.LanguageJavaScript,
			"export function run() { const a = []; for (;;) a.push(new Array(100000).fill(Math.random())) }\n", func(s *sandbox.Spec) {
				s.Limits = sandbox.Limits{MemoryMB: 128, TimeoutMS: 20000, CPUMS: 20000}.Or(limits.Default)
			},
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrMemoryLimit, "heap") }},
		{"an off-heap bomb is MemoryLimit", sandbox.LanguageJavaScript,
			"export function run() { const a = []; for (;;) { const b = new Uint8Array(16 << 20); b.fill(1); a.push(b) } }\n", func(s *sandbox.Spec) {
				s.Limits = sandbox.Limits{MemoryMB: 128, TimeoutMS: 20000, CPUMS: 20000}.Or(limits.Default)
			},
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrMemoryLimit, "") }},
		{"an output flood is truncated at the cap", sandbox.LanguageJavaScript,
			"export function run() { const s = 'x'.repeat(4096); for (let i = 0; i < 2000; i++) console.log(s); return 'done' }\n", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{OutputBytes: 64 << 10}.Or(limits.Default) },
			func(t *testing.T, res sandbox.Result) {
				wantOK(t, res, `"done"`)
				// The cap counts stdout as the envelope encodes it (each
				// newline two bytes, quotes excluded), as for Python.
				if n := jsonsize.StringLen(res.Stdout) - 2; !res.Truncated.Stdout || n > 64<<10 || n < 63<<10 {
					t.Fatalf("truncated %v, %d bytes (%d encoded)", res.Truncated, len(res.Stdout), n)
				}
			}},
		{"a result over the cap is OutputLimit", sandbox.LanguageJavaScript,
			"export function run() { return 'x'.repeat(100000) }\n", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{OutputBytes: 10000}.Or(limits.Default) },
			func(t *testing.T, res sandbox.Result) { wantErr(t, res, sandbox.ErrOutputLimit, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, runJS(t, r, tc.lang, tc.src, tc.mod))
		})
	}
}

// Mode validate type-checks in the jail (deno check, offline, read-only
// DENO_DIR): syntax and type errors with line and column; nothing runs.
func TestJavaScriptValidateReportsSyntaxAndTypeErrors(t *testing.T) {
	r := newJSRunner(t, nil)
	type problem struct {
		Line, Col int
		Message   string
	}
	type verdict struct {
		Valid  bool
		Errors []problem
	}
	for _, tc := range []struct {
		name, lang, src string
		valid           bool
		line, col       int
		msgPart         string
	}{
		{"valid TypeScript", sandbox.LanguageTypeScript, "export function run(args: {n: number}): number {\n  return args.n + 1;\n}\n", true, 0, 0, ""},
		{"a type error", sandbox.LanguageTypeScript, "export function run(args: unknown): number {\n  const s: string = 42;\n  return 1;\n}\n", false, 2, 9, "not assignable to type 'string'"},
		{"a syntax error in JavaScript", sandbox.LanguageJavaScript, "export function run() {\n  return 1 +* 2;\n}\n", false, 2, 13, `syntax error: Unexpected "*"`},
		{"a data: import", sandbox.LanguageTypeScript, "export async function run(): Promise<number> {\n  return (await import(\"data:text/javascript,export default 1\")).default;\n}\n", false, 2, 24, `imports are not available to tools: "data:text/javascript,export default 1" at line 2, column 24`},
		{"a missing entrypoint", sandbox.LanguageJavaScript, "export function main() { return 1 }\n", false, 0, 0, "entrypoint 'run' is not exported"},
		{"the validator runs nothing of the tool", sandbox.LanguageTypeScript, "await new Promise(() => { for (;;) {} });\nexport function run() { return 1 }\n", true, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, tc.lang, tc.src, func(s *sandbox.Spec) {
				s.Mode = sandbox.ModeValidate
				s.Limits = sandbox.Limits{TimeoutMS: 20000, CPUMS: 20000}.Or(limits.Default)
			})
			wantOK(t, res, "")
			var v verdict
			if err := json.Unmarshal(res.Result, &v); err != nil {
				t.Fatalf("result %s: %v", res.Result, err)
			}
			t.Logf("verdict %+v", v)
			if v.Valid != tc.valid {
				t.Fatalf("valid %v, want %v: %+v", v.Valid, tc.valid, v.Errors)
			}
			if !tc.valid {
				e := v.Errors[0]
				if e.Line != tc.line || e.Col != tc.col || !strings.Contains(e.Message, tc.msgPart) {
					t.Fatalf("first error %+v, want %d:%d %q", e, tc.line, tc.col, tc.msgPart)
				}
			}
		})
	}
}

// The first wall: every import is refused before any jail starts
// (InvalidSource at the import, nothing run), because Deno lets any module
// import data: URLs whatever its permissions. What only looks like an
// import runs.
func TestJavaScriptImportsAreRefusedBeforeTheJail(t *testing.T) {
	r := newJSRunner(t, nil)
	for _, tc := range []struct {
		name, lang, src string
		line, col       int    // of the refusal; 0: the tool runs
		want            string // a part of the refusal, or the result
	}{
		{"a static data: import", sandbox.LanguageJavaScript,
			"const one = 1;\n\nimport x from \"data:text/javascript,export default 1\";\nexport function run() { return x + one }\n",
			3, 15, `imports are not available to tools: "data:text/javascript,export default 1" at line 3, column 15`},
		{"a dynamic data: import of a literal", sandbox.LanguageJavaScript,
			"export async function run() {\n  return (await import(\"data:text/javascript,export default 1\")).default;\n}\n",
			2, 24, `"data:text/javascript,export default 1"`},
		{"an import() of a specifier built at run time", sandbox.LanguageJavaScript,
			"export async function run(args) {\n  const p = [\"data:text/javascript\", \"export default 1\"].join(\",\");\n  return (await import(p)).default;\n}\n",
			3, 17, "an import() whose specifier or options are computed at run time at line 3"},
		{"an import() of a template literal", sandbox.LanguageJavaScript,
			"export async function run() { return (await import(`data:text/javascript,export default 1`)).default }\n",
			1, 52, `"data:text/javascript,export default 1"`},
		{"export * from a data: URL", sandbox.LanguageJavaScript,
			"export * from \"data:text/javascript,export const a = 1\";\nexport function run() { return 1 }\n",
			1, 15, `"data:text/javascript,export const a = 1"`},
		{"a TypeScript import whose binding is unused", sandbox.LanguageTypeScript,
			"import {x} from \"data:text/javascript,globalThis.ran = 1; export const x = 1\";\nexport function run(): number { return 1 }\n",
			1, 17, `"data:text/javascript,globalThis.ran = 1; export const x = 1"`},
		{"a blob: import", sandbox.LanguageJavaScript,
			"export async function run() { return await import(\"blob:null/4b1c1b5e-0000-4000-8000-000000000000\") }\n",
			1, 51, `"blob:null/4b1c1b5e-0000-4000-8000-000000000000"`},
		{"the word import in a string and a comment runs", sandbox.LanguageJavaScript,
			"// import x from \"data:text/javascript,1\"\nexport function run() { return \"import('data:x')\" }\n",
			0, 0, `"import('data:x')"`},
		{"import.meta runs", sandbox.LanguageJavaScript,
			"export function run() { return typeof import.meta.url }\n",
			0, 0, `"string"`},
		{"import type in TypeScript runs", sandbox.LanguageTypeScript,
			"import type {X} from \"data:text/javascript,export const x = 1\";\nexport function run(args: X): number { return 7 }\n",
			0, 0, `7`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, tc.lang, tc.src, nil)
			if tc.line == 0 {
				wantOK(t, res, tc.want)
				return
			}
			wantErr(t, res, sandbox.ErrInvalidSource, tc.want)
			if res.Error.Line != tc.line || res.Error.Column != tc.col {
				t.Fatalf("refused at %d:%d, want %d:%d: %+v", res.Error.Line, res.Error.Column, tc.line, tc.col, res.Error)
			}
			if res.Usage != (sandbox.Usage{}) || len(res.NsjailLog) > 0 || res.Stdout != "" {
				t.Fatalf("a jail ran: usage %+v, log %q", res.Usage, res.NsjailLog)
			}
		})
	}
}

// The second wall alone (WithoutImportCheck): a static import reaches the
// jail and the harness reports Deno's refusal of it as InvalidSource.
func TestJavaScriptImportMapRefusesStaticImportsInTheJail(t *testing.T) {
	r := newJSRunner(t, nil, sandbox.WithoutImportCheck())
	for _, tc := range []struct{ name, src, want string }{
		{"a relative import", "import {x} from './helpers.js';\nexport function run() { return x }\n", "imports are closed: relative, absolute and bare specifiers are blocked (./helpers.js)"},
		{"node:fs", "import fs from 'node:fs';\nexport function run() { return fs.readFileSync('/etc/passwd', 'utf8') }\n", "imports are closed: node: specifiers are blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, sandbox.LanguageJavaScript, tc.src, nil)
			wantErr(t, res, sandbox.ErrInvalidSource, tc.want)
			if res.Usage.WallMS == 0 {
				t.Fatalf("no jail ran: %+v", res.Usage)
			}
		})
	}
}

// Deno starts its threads (V8's platform workers, its runtime's) within the
// run's pids cgroup: at Deno's minimum of 8 it runs, and a lower limit is
// refused before anything starts (at 2, measured, Deno exits 1 at start;
// on a 6.1 kernel it fails or hangs below 7).
func TestJavaScriptRunsWithinThePidsLimit(t *testing.T) {
	r := newJSRunner(t, nil)
	res := runJS(t, r, sandbox.LanguageJavaScript, "export function run() { return [1, 2].map((x) => x * 2) }", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{Pids: 8}.Or(limits.Default) })
	wantOK(t, res, "[2, 4]")
	res = runJS(t, r, sandbox.LanguageJavaScript, "export function run() { return 1 }", func(s *sandbox.Spec) { s.Limits = sandbox.Limits{Pids: 7}.Or(limits.Default) })
	wantErr(t, res, sandbox.ErrInvalidInput, "limits.pids: 7 is below javascript's minimum of 8")
}

// A JavaScript profile is kept warm after its first run: the next run is
// handed to a started Deno, whose wait does not count, and a warm Deno jail
// serves one run only (a global set by run A is absent in run B).
func TestJavaScriptWarmPool(t *testing.T) {
	r := newJSRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	waitWarm(t, r, 1) // the default (python) profile
	first := runJS(t, r, sandbox.LanguageTypeScript, "export function run(): string { (globalThis as any).marker = 'run A'; return 'cold' }", nil)
	wantOK(t, first, `"cold"`)
	waitWarm(t, r, 2)                  // now the javascript profile too
	time.Sleep(500 * time.Millisecond) // age the waiting jail: its wait must not count
	hits := sandbox.WarmHits(r)
	start := time.Now()
	res := runJS(t, r, sandbox.LanguageJavaScript, "export function run() { return globalThis.marker ?? 'fresh' }", nil)
	took := time.Since(start)
	wantOK(t, res, `"fresh"`)
	if sandbox.WarmHits(r) != hits+1 {
		t.Fatalf("the JavaScript run did not use a warm jail")
	}
	// Run's own duration bounds a wall counted from the hand-off; one
	// counted from Deno's start holds the 500 ms wait too.
	if res.Usage.WallMS > took.Milliseconds() {
		t.Errorf("wall %d ms, but Run took %v: the wall includes the time the jail waited", res.Usage.WallMS, took)
	}
}
