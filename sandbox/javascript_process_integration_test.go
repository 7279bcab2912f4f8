package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// Level process for JavaScript and TypeScript: a run's process, forked from
// the zygote of the Deno profile, execve's Deno on the harness after its
// setup. The guarantees of level process (zygote_integration_test.go for
// Python), each through the real nsjail, rootfs, seccomp and cgroups.

// runJSProc runs a JavaScript or TypeScript tool at level process for
// tenant "acme", and checks that it ran there (a zygote budget that is
// full would run it at level jail).
func runJSProc(t *testing.T, r *sandbox.Runner, lang, src string, mod func(*sandbox.Spec)) sandbox.Result {
	t.Helper()
	res := runJS(t, r, lang, src, func(s *sandbox.Spec) {
		s.Isolation = sandbox.IsolationProcess
		if mod != nil {
			mod(s)
		}
	})
	if res.Usage.Isolation != sandbox.IsolationProcess {
		t.Fatalf("usage.isolation %q, want process: %+v %+v", res.Usage.Isolation, res.Error, res.Usage)
	}
	return res
}

// jsProbe reports the run's process, what a previous run of the same
// zygote may have left in globalThis and in a module-level global, and
// what /workspace/out holds; then it leaves its own marks in all three.
const jsProbe = `
let mine = 0;
export function run(args, context) {
  const seen = globalThis.__execgateSeen ?? null;
  globalThis.__execgateSeen = context.executionId;
  mine++;
  const out = [...Deno.readDirSync("/workspace/out")].map((e) => e.name).sort();
  Deno.writeTextFileSync("/workspace/out/mark-" + context.executionId, "x");
  Object.defineProperty(Array.prototype, "__execgatePolluted", {value: context.executionId, configurable: true});
  return {pid: Deno.pid, ppid: Deno.ppid, seen, mine, out, polluted: [].__execgatePolluted !== context.executionId ? "before" : null};
}
`

func TestJavaScriptProcessRunsAreFreshDenoProcesses(t *testing.T) {
	r := newJSRunner(t, nil)
	pids := map[float64]bool{}
	for i, lang := range []string{sandbox.LanguageJavaScript, sandbox.LanguageTypeScript, sandbox.LanguageJavaScript, sandbox.LanguageTypeScript} {
		src := jsProbe
		if lang == sandbox.LanguageTypeScript {
			src = strings.Replace(src, "run(args, context)", "run(args: unknown, context: {executionId: string}): Record<string, unknown>", 1)
		}
		res := runJSProc(t, r, lang, src, func(s *sandbox.Spec) { s.ExecutionID = fmt.Sprintf("run-%d", i) })
		var m struct {
			PID, PPID float64
			Seen      any
			Mine      float64
			Out       []string
			Polluted  any
		}
		wantOK(t, res, "")
		if err := json.Unmarshal(res.Result, &m); err != nil {
			t.Fatal(err)
		}
		// A jail's Deno is PID 1 of its namespace; a run's Deno is the
		// zygote's (PID 1's) child, a new process each time.
		if m.PPID != 1 || m.PID == 1 || pids[m.PID] {
			t.Fatalf("run %d (%s): pid %v ppid %v (earlier pids %v): not a fresh process of the zygote", i, lang, m.PID, m.PPID, pids)
		}
		pids[m.PID] = true
		if m.Seen != nil || m.Mine != 1 || len(m.Out) != 0 || m.Polluted != nil {
			t.Fatalf("run %d (%s) sees an earlier run's state: globalThis %v, module global %v, /workspace/out %v, prototype %v", i, lang, m.Seen, m.Mine, m.Out, m.Polluted)
		}
		if !res.Usage.Warm {
			t.Errorf("run %d: usage.warm is false", i)
		}
		if len(res.Artifacts) != 1 {
			t.Errorf("run %d: artifacts %+v, want its own mark", i, res.Artifacts)
		}
	}
	// JavaScript and TypeScript share the Deno profile, so its zygote.
	if n := sandbox.Zygotes(r); n != 1 {
		t.Fatalf("%d zygotes for one tenant and profile, want 1", n)
	}
	// The same profile at level jail is still a jail of its own.
	res := runJS(t, r, sandbox.LanguageJavaScript, jsProbe, nil)
	wantOK(t, res, "")
	if !strings.Contains(string(res.Result), `"pid":1,`) || res.Usage.Isolation != sandbox.IsolationJail {
		t.Fatalf("a level-jail run after level-process runs: %s %+v", res.Result, res.Usage)
	}
}

func TestJavaScriptProcessServesTheToolBridgeStdinAndOutput(t *testing.T) {
	r := newJSRunner(t, nil)
	src := `export async function run(args, context) {
  console.log("to stdout");
  console.error("to stderr");
  const answer = await context.tools.run("wait", {n: args.n});
  return {answer, stdin: await new Response(Deno.stdin.readable).text()};
}`
	spec := sandbox.Spec{ExecutionID: "bridge", TenantID: "acme", Language: sandbox.LanguageJavaScript, Source: src,
		Args: json.RawMessage(`{"n": 7}`), Stdin: "in put", Limits: limits.Default, Isolation: sandbox.IsolationProcess}
	res := whileInToolCall(t, r, spec, func() {})
	wantOK(t, res, `{"answer": true, "stdin": "in put"}`)
	if res.Stdout != "to stdout\n" || !strings.Contains(res.Stderr, "to stderr") || res.Usage.Isolation != sandbox.IsolationProcess {
		t.Fatalf("stdout %q stderr %q usage %+v", res.Stdout, res.Stderr, res.Usage)
	}
}

// Timers, intervals and promises a run leaves pending never execute after
// its envelope: its Deno is killed with its whole cgroup (or, on cgroup v1,
// as soon as its envelope is whole). Neither does an unload handler (Deno
// would dispatch unload on the harness's Deno.exit, after the envelope).
func TestJavaScriptProcessLeavesNoSurvivor(t *testing.T) {
	r := newJSRunner(t, nil)
	src := `export function run() {
  let n = 0;
  setInterval(() => { n++; console.log("late interval " + n); }, 1);
  setTimeout(() => console.log("late timeout"), 0);
  new Promise((ok) => setTimeout(ok, 5)).then(() => console.log("late promise"));
  return "returned";
}`
	for i := range 3 {
		start := time.Now()
		res := runJSProc(t, r, sandbox.LanguageJavaScript, src, nil)
		wantOK(t, res, `"returned"`)
		if strings.Contains(res.Stdout, "late") || time.Since(start) > 5*time.Second {
			t.Fatalf("run %d: stdout %q after %s: a timer ran after the envelope", i, res.Stdout, time.Since(start))
		}
	}
	spin := `export function run() {
  globalThis.addEventListener("unload", () => { for (;;) {} });
  return "returned";
}`
	res := runJSProc(t, r, sandbox.LanguageJavaScript, spin, func(s *sandbox.Spec) { s.Limits = sandbox.Limits{TimeoutMS: 3000, CPUMS: 1000}.Or(limits.Default) })
	// The harness keeps Deno from dispatching unload after the envelope.
	wantOK(t, res, `"returned"`)
	if live := sandbox.LiveProcessesOfEndedRuns(r); len(live) > 0 {
		t.Fatalf("processes of ended runs can still execute: %v", live)
	}
	assertRunCgroupsGone(t, r)
	wantOK(t, runJSProc(t, r, sandbox.LanguageJavaScript, "export function run() { return 1 }", nil), "1")
}

// Limits from kernel facts: the run's cgroup (CPU, memory), V8's heap
// limit, the wall deadline; each outcome is the run's alone, and the next
// run of the same zygote works.
func TestJavaScriptProcessLimitsAreTheKernels(t *testing.T) {
	r := newJSRunner(t, nil)
	long := stretch(20000)
	for _, tc := range []struct {
		name, src string
		limits    sandbox.Limits
		want, msg string
	}{
		{"cpu spin", "export function run() { for (;;) {} }", sandbox.Limits{CPUMS: 500, TimeoutMS: long}, sandbox.ErrCPULimit, ""},
		// V8's heap limit (--max-old-space-size, as at level jail) stops it.
		{"heap bomb", "export function run() { const a = []; for (;;) a.push(new Array(1e5).fill(1.5)) }", sandbox.Limits{MemoryMB: 128, CPUMS: long, TimeoutMS: long}, sandbox.ErrMemoryLimit, "JavaScript heap"},
		// The run's memory cgroup stops it.
		{"off-heap bomb", "export function run() { const a = []; for (;;) { const b = new Uint8Array(8 << 20); b.fill(7); a.push(b) } }", sandbox.Limits{MemoryMB: 96, CPUMS: long, TimeoutMS: long}, sandbox.ErrMemoryLimit, ""},
		{"wall timeout", "export async function run() { await new Promise((ok) => setTimeout(ok, 60000)) }", sandbox.Limits{TimeoutMS: 500}, sandbox.ErrTimeout, ""},
		{"busy past the wall", "export function run() { for (;;) {} }", sandbox.Limits{TimeoutMS: 1000, CPUMS: long}, sandbox.ErrTimeout, ""},
		{"output cap", "export function run() { return 'x'.repeat(5000) }", sandbox.Limits{OutputBytes: 1000}, sandbox.ErrOutputLimit, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := func(s *sandbox.Spec) { s.Limits = tc.limits.Or(limits.Default) }
			wantErr(t, runJSProc(t, r, sandbox.LanguageJavaScript, tc.src, lim), tc.want, tc.msg)
			wantOK(t, runJSProc(t, r, sandbox.LanguageJavaScript, "export function run() { return 'next' }", lim), `"next"`)
		})
	}
	assertRunCgroupsGone(t, r)
}

// hostPIDOfRun finds the host pid of the Deno process whose pid in its
// namespace is nspid, among the processes of r's run cgroups.
func hostPIDOfRun(t *testing.T, r *sandbox.Runner, nspid int) int {
	t.Helper()
	parent := sandbox.CgroupParentName(r)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil || !strings.Contains(string(cg), parent+"/run-") {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) > 1 && f[len(f)-1] == strconv.Itoa(nspid) {
					return pid
				}
			}
		}
	}
	t.Fatalf("no process of a run cgroup under %s has pid %d in its namespace", parent, nspid)
	return 0
}

// pidBridge records the pid a run's tool passes to tool "wait", then
// blocks it there until release is closed.
type pidBridge struct {
	gateBridge
	pid chan int
}

func (b *pidBridge) Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	var a struct{ PID int }
	_ = json.Unmarshal(args, &a)
	select {
	case b.pid <- a.PID:
	default:
	}
	return b.gateBridge.Call(ctx, name, args)
}

// A Deno that crashes (killed by a signal, as a V8 abort would; a tool
// without permissions cannot signal itself, so the test does) ends its own
// run as SandboxCrashed; the zygote and the next runs are unharmed.
// (SIGSEGV sent with kill(2) is not a crash to Deno: V8's fault handler
// takes it and the process goes on.)
func TestJavaScriptProcessCrashHurtsOnlyItsRun(t *testing.T) {
	r := newJSRunner(t, nil)
	wantOK(t, runJSProc(t, r, sandbox.LanguageJavaScript, "export function run() { return 1 }", nil), "1")
	zygotes := fmt.Sprint(sandbox.ZygoteIDs(r))
	for _, sig := range []syscall.Signal{syscall.SIGABRT, syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			b := &pidBridge{gateBridge: gateBridge{entered: make(chan struct{}), release: make(chan struct{})}, pid: make(chan int, 1)}
			src := "export async function run(args, context) { await context.tools.run('wait', {pid: Deno.pid}); return 'survived' }"
			done := make(chan sandbox.Result, 1)
			go func() {
				res, _ := r.Run(context.Background(), sandbox.Spec{TenantID: "acme", Language: sandbox.LanguageJavaScript, Source: src,
					Bridge: b, Isolation: sandbox.IsolationProcess, Limits: limits.Default})
				done <- res
			}()
			var nspid int
			select {
			case nspid = <-b.pid:
			case res := <-done:
				t.Fatalf("the run ended before its tool call: %+v %s", res.Error, res.Stderr)
			}
			if err := syscall.Kill(hostPIDOfRun(t, r, nspid), sig); err != nil {
				t.Fatal(err)
			}
			var res sandbox.Result
			select {
			case res = <-done:
			case <-time.After(time.Duration(stretch(10000)) * time.Millisecond):
				close(b.release)
				t.Fatal("the run outlived its Deno")
			}
			close(b.release)
			wantErr(t, res, sandbox.ErrSandboxCrashed, "")
			wantOK(t, runJSProc(t, r, sandbox.LanguageJavaScript, "export function run() { return 2 }", nil), "2")
			if got := fmt.Sprint(sandbox.ZygoteIDs(r)); got != zygotes {
				t.Fatalf("zygotes %s after the crash, were %s: the crash reached the zygote", got, zygotes)
			}
		})
	}
	assertRunCgroupsGone(t, r)
}

func TestJavaScriptProcessConcurrentRunsOfOneTenant(t *testing.T) {
	r := newJSRunner(t, nil)
	const workers, each = 4, 4
	var wg sync.WaitGroup
	errs := make(chan string, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				res, err := r.Run(context.Background(), sandbox.Spec{ExecutionID: id, TenantID: "acme", Language: sandbox.LanguageJavaScript,
					Source: jsProbe, Isolation: sandbox.IsolationProcess, Limits: limits.Default})
				switch {
				case err != nil:
					errs <- fmt.Sprintf("%s: %v", id, err)
				case res.Status != sandbox.StatusOK || res.Usage.Isolation != sandbox.IsolationProcess:
					errs <- fmt.Sprintf("%s: %s %+v %+v %s", id, res.Status, res.Error, res.Usage, res.Stderr)
				case !strings.Contains(string(res.Result), `"seen":null`):
					errs <- fmt.Sprintf("%s: %s", id, res.Result)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := sandbox.Zygotes(r); n != 1 {
		t.Errorf("%d zygotes for one tenant and profile, want 1", n)
	}
	assertRunCgroupsGone(t, r)
}
