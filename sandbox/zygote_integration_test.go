package sandbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/zygote"
)

// Level process (package sandbox/zygote): the containment list of CONTAINMENT 38,
// each through the real nsjail, rootfs, seccomp and cgroups.

// runProc runs spec at level process for tenant "t1".
func runProc(t *testing.T, r *sandbox.Runner, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	spec.Isolation = sandbox.IsolationProcess
	// A test names the limits it is about; the rest are the platform's
	// defaults, as the policy would decide them.
	spec.Limits = spec.Limits.Or(limits.Default)
	if spec.TenantID == "" {
		spec.TenantID = "t1"
	}
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Status == sandbox.StatusOK && res.Usage.Isolation == "" {
		t.Fatalf("a run that ran has no usage.isolation")
	}
	return res
}

func resultMap(t *testing.T, res sandbox.Result) map[string]any {
	t.Helper()
	if res.Status != sandbox.StatusOK {
		t.Fatalf("run failed: %+v\nstdout: %s\nstderr: %s", res.Error, res.Stdout, res.Stderr)
	}
	var m map[string]any
	if err := json.Unmarshal(res.Result, &m); err != nil {
		t.Fatalf("result %s: %v", res.Result, err)
	}
	return m
}

const probeSource = `
import os, sys
def run(args, context):
    seen = getattr(sys, "_execgate_seen", None)
    sys._execgate_seen = context.execution_id
    return {"pid": os.getpid(), "ppid": os.getppid(), "seen": seen,
            "tmp": sorted(os.listdir("/tmp")), "uid": os.getuid()}
`

func TestProcessRunsAreFreshProcessesForkedFromTheZygote(t *testing.T) {
	r := newRunner(t, nil)
	var pids []float64
	for i := range 3 {
		res := runProc(t, r, sandbox.Spec{ExecutionID: fmt.Sprintf("run-%d", i), Source: probeSource})
		m := resultMap(t, res)
		// A jail's harness is PID 1 of its namespace; a run forked from a
		// zygote is the zygote's (PID 1's) child.
		if m["ppid"] != float64(1) || m["pid"] == float64(1) {
			t.Fatalf("run %d: pid %v ppid %v: not a process forked from a zygote", i, m["pid"], m["ppid"])
		}
		if m["seen"] != nil {
			t.Fatalf("run %d sees a previous run's module global: %v", i, m["seen"])
		}
		if tmp := m["tmp"].([]any); len(tmp) != 0 {
			t.Fatalf("run %d: /tmp is not empty: %v", i, tmp)
		}
		if m["uid"] != float64(jaillayout.ToolUID) {
			t.Fatalf("run %d: uid %v", i, m["uid"])
		}
		for _, p := range pids {
			if p == m["pid"] {
				t.Fatalf("run %d reuses pid %v", i, p)
			}
		}
		pids = append(pids, m["pid"].(float64))
		if !res.Usage.Warm {
			t.Errorf("run %d: Usage.Warm is false", i)
		}
	}
	if n := sandbox.Zygotes(r); n != 1 {
		t.Fatalf("%d zygotes for one tenant and profile, want 1", n)
	}
	// The same profile at level jail is still a jail of its own.
	jail, err := r.Run(context.Background(), sandbox.Spec{TenantID: "t1", Source: probeSource, Limits: limits.Default})
	if err != nil {
		t.Fatal(err)
	}
	if m := resultMap(t, jail); m["pid"] != float64(1) {
		t.Fatalf("a level-jail run after level-process runs has pid %v, not its jail's PID 1", m["pid"])
	}
}

// gateBridge blocks a run's call to tool "wait" until release is closed,
// and reports on entered that the run got there.
type gateBridge struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *gateBridge) Search(context.Context, string, int) ([]sandbox.ToolInfo, error) {
	return nil, nil
}

func (b *gateBridge) Describe(_ context.Context, name string) (sandbox.ToolInfo, error) {
	return sandbox.ToolInfo{Name: name}, nil
}

func (b *gateBridge) Call(ctx context.Context, name string, _ json.RawMessage) (json.RawMessage, error) {
	b.once.Do(func() { close(b.entered) })
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return json.RawMessage(`true`), nil
}

// whileInToolCall runs spec until its tool calls tool "wait", calls during
// while it waits there, then lets it finish and returns its result.
func whileInToolCall(t *testing.T, r *sandbox.Runner, spec sandbox.Spec, during func()) sandbox.Result {
	t.Helper()
	gate := &gateBridge{entered: make(chan struct{}), release: make(chan struct{})}
	spec.Bridge = gate
	var res sandbox.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, _ = r.Run(context.Background(), spec)
	}()
	select {
	case <-gate.entered:
	case <-done:
		t.Fatalf("the run ended before its tool call: %+v %s", res.Error, res.Stderr)
	}
	var once sync.Once
	finish := func() { once.Do(func() { close(gate.release); <-done }) }
	defer finish() // also when during fails the test
	during()
	finish()
	return res
}

func TestProcessTmpIsPrivateFromConcurrentRunsOfTheSameTenant(t *testing.T) {
	r := newRunner(t, nil)
	srcA := `
import os
def run(args, context):
    with open("/tmp/a-secret", "w") as f:
        f.write("A")
    os.mkdir("/dev/shm/a-dir")
    context.tools.run("wait")
    return {"tmp": sorted(os.listdir("/tmp")), "shm": sorted(os.listdir("/dev/shm"))}
`
	srcB := `
import os
def run(args, context):
    before = sorted(os.listdir("/tmp"))
    shm = sorted(os.listdir("/dev/shm"))
    try:
        open("/tmp/a-secret").read()
        read = True
    except OSError:
        read = False
    with open("/tmp/b-file", "w") as f:
        f.write("B")
    return {"before": before, "shm": shm, "read": read}
`
	var b map[string]any
	resA := whileInToolCall(t, r, sandbox.Spec{Source: srcA, Isolation: sandbox.IsolationProcess, TenantID: "t1", Limits: limits.Default}, func() {
		b = resultMap(t, runProc(t, r, sandbox.Spec{Source: srcB}))
	})
	a := resultMap(t, resA)
	if got := fmt.Sprint(b["before"], b["shm"], b["read"]); got != "[] [] false" {
		t.Errorf("run B saw /tmp %v, /dev/shm %v, read A's file: %v", b["before"], b["shm"], b["read"])
	}
	if got := fmt.Sprint(a["tmp"], a["shm"]); got != "[a-secret] [a-dir]" {
		t.Errorf("run A sees /tmp %v and /dev/shm %v, want only its own files", a["tmp"], a["shm"])
	}
}

func TestProcessKillsDaemonsWhenTheEnvelopeIsProduced(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import os, time
def run(args, context):
    pids = []
    for how in ("setsid", "double"):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if how == "double" and os.fork() != 0:
                os._exit(0)
            os.write(w, str(os.getpid()).encode() + b"\n")
            while True:
                time.sleep(1)
        os.close(w)
        pids.append(int(os.read(r, 64)))
    return {"daemons": pids}
`
	res := runProc(t, r, sandbox.Spec{Source: src})
	m := resultMap(t, res)
	if len(m["daemons"].([]any)) != 2 {
		t.Fatalf("daemons: %v", m["daemons"])
	}
	// Every run cgroup is gone (Run removes it only when it is empty).
	assertRunCgroupsGone(t, r)
}

// assertRunCgroupsGone checks that only the zygotes' cgroups are left
// under the runner's parent: each zygote's own and its spare processes'.
func assertRunCgroupsGone(t *testing.T, r *sandbox.Runner) {
	t.Helper()
	count := func() (map[string]int, int) {
		held := sandbox.ZygoteCgroups(r)
		got := map[string]int{}
		for _, d := range sandbox.CgroupDirs(r) {
			entries, err := os.ReadDir(d)
			if err != nil {
				t.Fatalf("reading %s: %v", d, err)
			}
			for _, e := range entries {
				if e.IsDir() && strings.HasPrefix(e.Name(), "run-") {
					got[d]++
				}
			}
		}
		return got, held
	}
	// A retired zygote and its spare are removed in the background: wait
	// for the count to settle.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, held := count()
		ok := true
		for _, d := range sandbox.CgroupDirs(r) {
			ok = ok && got[d] == held
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, d := range sandbox.CgroupDirs(r) {
				if got[d] != held {
					t.Errorf("%s holds %d run cgroups, the zygotes %d: a run's cgroup (and its processes) survived", d, got[d], held)
				}
			}
			return
		}
		time.Sleep(10 * time.Millisecond) // polling interval, bounded by the deadline
	}
}

func TestProcessLimitsAreTheKernels(t *testing.T) {
	r := newRunner(t, nil)
	cases := []struct {
		name   string
		src    string
		limits sandbox.Limits
		want   string
	}{
		{"memory bomb", "def run(a, c):\n    x = []\n    while True:\n        x.append(bytearray(16 << 20))\n", sandbox.Limits{MemoryMB: 64}, sandbox.ErrMemoryLimit},
		{"cpu spin", "def run(a, c):\n    while True:\n        pass\n", sandbox.Limits{CPUMS: 300, TimeoutMS: 5000}, sandbox.ErrCPULimit},
		{"wall timeout", "import time\ndef run(a, c):\n    time.sleep(30)\n", sandbox.Limits{TimeoutMS: 300}, sandbox.ErrTimeout},
		{"output cap", "def run(a, c):\n    return 'x' * 5000\n", sandbox.Limits{OutputBytes: 1000}, sandbox.ErrOutputLimit},
		{"escape syscall", "import ctypes\ndef run(a, c):\n    ctypes.CDLL(None).unshare(0x10000000)\n", sandbox.Limits{}, sandbox.ErrSyscallDenied},
		{"mount", "import ctypes\ndef run(a, c):\n    ctypes.CDLL(None).mount(b'tmpfs', b'/tmp', b'tmpfs', 14, None)\n", sandbox.Limits{}, sandbox.ErrSyscallDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runProc(t, r, sandbox.Spec{Source: tc.src, Limits: tc.limits})
			if res.ErrorType() != tc.want {
				t.Fatalf("outcome %q (%+v), want %s\nstderr: %s", res.ErrorType(), res.Error, tc.want, res.Stderr)
			}
		})
	}
	t.Run("stdout flood", func(t *testing.T) {
		res := runProc(t, r, sandbox.Spec{Source: "import sys\ndef run(a, c):\n    for _ in range(1000):\n        sys.stdout.write('y' * 1000)\n    return 1\n", Limits: sandbox.Limits{OutputBytes: 4096}})
		if res.Status != sandbox.StatusOK || !res.Truncated.Stdout || len(res.Stdout) > 4096 {
			t.Fatalf("stdout flood: status %s, truncated %v, %d bytes kept", res.Status, res.Truncated.Stdout, len(res.Stdout))
		}
	})
	assertRunCgroupsGone(t, r)
}

func TestProcessForkBombIsHeldByThePidsLimit(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import os
def run(args, context):
    n, err = 0, None
    try:
        while n < 1000:
            if os.fork() == 0:
                import time
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError as e:
        err = e.errno
    return {"forked": n, "errno": err}
`
	m := resultMap(t, runProc(t, r, sandbox.Spec{Source: src, Limits: sandbox.Limits{Pids: 16}}))
	if m["errno"] != float64(syscall.EAGAIN) || m["forked"].(float64) >= 16 {
		t.Fatalf("fork bomb: %v", m)
	}
	assertRunCgroupsGone(t, r)
}

func TestProcessNetworkNoneIsNone(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import socket
def run(args, context):
    ifs = [n for _, n in socket.if_nameindex()]
    s = socket.socket()
    s.settimeout(1)
    try:
        s.connect(("127.0.0.1", int(args)))
        reached = True
    except OSError:
        reached = False
    return {"ifs": ifs, "reached": reached}
`
	ln := listenLoopback(t)
	m := resultMap(t, runProc(t, r, sandbox.Spec{Source: src, Args: json.RawMessage(fmt.Sprint(ln))}))
	if fmt.Sprint(m["ifs"]) != "[lo]" || m["reached"] != false {
		t.Fatalf("network none: %v", m)
	}
}

func TestProcessRunThatSignalsItsZygoteHurtsOnlyItself(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import os, signal
def run(args, context):
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGCHLD):
        for pid in (1, os.getppid()):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return "done"
`
	first := runProc(t, r, sandbox.Spec{Source: probeSource})
	resultMap(t, first)
	res := runProc(t, r, sandbox.Spec{Source: src})
	if res.Status != sandbox.StatusOK && res.ErrorType() != sandbox.ErrSandboxCrashed {
		t.Fatalf("signalling the zygote: %+v", res.Error)
	}
	next := resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	if next["seen"] != nil {
		t.Fatalf("next run sees %v", next["seen"])
	}
}

func TestProcessZygoteDeathEndsItsRunsAsSandboxCrashed(t *testing.T) {
	r := newRunner(t, nil)
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	gate := &gateBridge{entered: make(chan struct{}), release: make(chan struct{})}
	src := "def run(a, context):\n    context.tools.run('wait')\n    return 'finished'\n"
	var res sandbox.Result
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, _ = r.Run(context.Background(), sandbox.Spec{Source: src, Bridge: gate, Isolation: sandbox.IsolationProcess, TenantID: "t1", Limits: limits.Default})
	}()
	<-gate.entered
	if err := sandbox.KillZygotes(r); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(gate.release)
		t.Fatal("the run outlived its zygote")
	}
	close(gate.release)
	if res.ErrorType() != sandbox.ErrSandboxCrashed {
		t.Fatalf("run in flight when its zygote died: %q %+v", res.ErrorType(), res.Error)
	}
	next := resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	if next["ppid"] != float64(1) {
		t.Fatalf("next run: %v", next)
	}
}

// listenLoopback opens a listener on the host's loopback for the test's
// lifetime and returns its port.
func listenLoopback(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestZygotesAreRetiredAfterMaxRunsAndIdleTime(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.Zygotes = zygote.Config{MaxRuns: 2, IdleMS: stretch(300)} })
	ids := func() string { return fmt.Sprint(sandbox.ZygoteIDs(r)) }
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	first := ids()
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	// The second run was the zygote's last: the third starts another.
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	if third := ids(); third == first || len(sandbox.ZygoteIDs(r)) != 1 {
		t.Fatalf("zygotes %s after max_runs, before %s: want one new zygote", third, first)
	}
	deadline := time.Now().Add(10 * time.Second)
	for sandbox.Zygotes(r) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("zygotes %s still live after idle_ms", ids())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
	assertRunCgroupsGone(t, r)
}

func TestZygoteBudgetIsSharedBetweenTenants(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.Zygotes = zygote.Config{Max: 1} })
	resultMap(t, runProc(t, r, sandbox.Spec{TenantID: "a", Source: probeSource}))
	// b's miss replaces a's idle zygote.
	resultMap(t, runProc(t, r, sandbox.Spec{TenantID: "b", Source: probeSource}))
	if got := sandbox.ZygoteIDs(r); len(got) != 1 || !strings.HasPrefix(got[0], "b/") {
		t.Fatalf("zygotes %v, want b's alone", got)
	}
	// While b's zygote runs something, a cannot take its place: a's run
	// gets a fresh jail (stronger isolation, never weaker).
	gate := &gateBridge{entered: make(chan struct{}), release: make(chan struct{})}
	done := make(chan sandbox.Result)
	go func() {
		res, _ := r.Run(context.Background(), sandbox.Spec{TenantID: "b", Isolation: sandbox.IsolationProcess, Bridge: gate,
			Source: "def run(a, context):\n    return context.tools.run('wait')\n", Limits: limits.Default})
		done <- res
	}()
	select {
	case <-gate.entered:
	case res := <-done:
		t.Fatalf("b's run ended before its tool call: %+v", res.Error)
	}
	fallback := runProc(t, r, sandbox.Spec{TenantID: "a", Source: probeSource})
	m := resultMap(t, fallback)
	close(gate.release)
	if res := <-done; res.Status != sandbox.StatusOK {
		t.Fatalf("b's run: %+v", res.Error)
	}
	if m["pid"] != float64(1) || fallback.Usage.Isolation != sandbox.IsolationJail {
		t.Fatalf("a's run with the budget full: pid %v, usage.isolation %q; want a jail's PID 1, jail", m["pid"], fallback.Usage.Isolation)
	}
	if got := sandbox.ZygoteIDs(r); len(got) != 1 || !strings.HasPrefix(got[0], "b/") {
		t.Fatalf("zygotes %v, want b's alone", got)
	}
}

// The zygote preloads asyncio but hides it until the tool imports it (so a
// coroutine that never suspends is stepped without an event loop, as in a
// fresh jail); a tool that imports it gets the real, whole package.
func TestProcessAsyncToolsSeeAsyncioAsInAJail(t *testing.T) {
	r := newRunner(t, nil)
	cases := map[string]string{
		"awaits":             "import asyncio\nasync def run(a, c):\n    await asyncio.sleep(0)\n    return 'slept'\n",
		"loop without await": "import asyncio\nasync def run(a, c):\n    asyncio.get_running_loop()\n    return 'loop'\n",
		"submodule first":    "import asyncio.events\nimport asyncio\nasync def run(a, c):\n    await asyncio.sleep(0)\n    return asyncio.events.__name__ + ' ' + asyncio.__spec__.origin.rsplit('/', 2)[-2]\n",
		"no asyncio":         "import sys\nasync def run(a, c):\n    return 'asyncio' in sys.modules\n",
	}
	want := map[string]string{"awaits": `"slept"`, "loop without await": `"loop"`, "submodule first": `"asyncio.events asyncio"`, "no asyncio": `false`}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			res := runProc(t, r, sandbox.Spec{Source: src})
			if res.Status != sandbox.StatusOK || string(res.Result) != want[name] {
				t.Fatalf("%s: %s %s %+v\n%s", name, res.Status, res.Result, res.Error, res.Stderr)
			}
		})
	}
}

// The zygote keeps the stdlib's fork hooks (threading's, logging's) out of
// its own forks and registers them in each run's process: a tool that forks
// after starting a thread gets a child whose threading state was repaired,
// as in a jail.
func TestProcessToolForksRunTheStdlibForkHooksAsInAJail(t *testing.T) {
	r := newRunner(t, nil)
	const src = `
import os, threading
def run(args, context):
    done = threading.Event()
    threading.Thread(target=done.wait, daemon=True).start()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, str(threading.active_count()).encode())
        os._exit(0)
    os.close(w)
    n = int(os.read(r, 16))
    os.waitpid(pid, 0)
    done.set()
    return {"parent": threading.active_count(), "child": n}
`
	for _, level := range []string{sandbox.IsolationJail, sandbox.IsolationProcess} {
		res, err := r.Run(context.Background(), sandbox.Spec{TenantID: "t1", Isolation: level, Source: src, Limits: limits.Default})
		if err != nil {
			t.Fatal(err)
		}
		if m := resultMap(t, res); m["child"] != float64(1) {
			t.Fatalf("level %s: a forked child of a tool with two threads counts %v threads, want 1 (threading's fork hook did not run)", level, m["child"])
		}
	}
}

// A zygote near max_runs has its successor started ahead: when it retires,
// the next run takes the successor, already warm, instead of waiting for a
// zygote to start.
func TestZygoteSuccessorIsReadyWhenItsPredecessorRetires(t *testing.T) {
	const maxRuns = 100 // twice the successor's lead: the least that has one
	r := newRunner(t, func(c *sandbox.Config) { c.Zygotes = zygote.Config{MaxRuns: maxRuns} })
	ids := func() []string { return sandbox.ZygoteIDs(r) }
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	first := ids()
	for i := 1; i < maxRuns; i++ {
		resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	}
	// The zygote served its last run; its successor was started 50 runs
	// ago and waits, ready.
	deadline := time.Now().Add(10 * time.Second)
	for sandbox.Zygotes(r) != 0 || sandbox.NextZygotes(r) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d runs: %d zygotes %v, %d successors; want the retired one gone and one successor ready", maxRuns, sandbox.Zygotes(r), ids(), sandbox.NextZygotes(r))
		}
		time.Sleep(10 * time.Millisecond) // polling interval, bounded by the deadline
	}
	resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
	if now := ids(); len(now) != 1 || now[0] == first[0] || sandbox.NextZygotes(r) != 0 {
		t.Fatalf("zygotes %v (before %v), %d successors left: the run after max_runs did not take the successor", now, first, sandbox.NextZygotes(r))
	}
	assertRunCgroupsGone(t, r)
}

// A run at level process gets one CPU of bandwidth, as a jail does: two
// processes spinning side by side use at most about as much CPU as wall
// time (without the cap, about twice as much on an idle 2-core host).
func TestProcessRunGetsOneCPUOfBandwidth(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import os, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
def run(args, context):
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        spin(1.5)
        os._exit(0)
    spin(1.5)
    os.waitpid(pid, 0)
    return {"wall_ms": int((time.monotonic() - start) * 1000)}
`
	res := runProc(t, r, sandbox.Spec{Source: src, Limits: sandbox.Limits{TimeoutMS: 20000, CPUMS: 20000}})
	m := resultMap(t, res)
	wall := m["wall_ms"].(float64)
	if cpu := float64(res.Usage.CPUMS); cpu > 1.2*wall+100 {
		t.Fatalf("two spinning processes used %.0f ms of CPU in %.0f ms of wall time: more than one CPU", cpu, wall)
	}
}

// Closing the runner right after a run, while the zygote is preparing the
// next runs' processes in the background, leaves no cgroup behind (a
// spare being prepared is waited for and removed).
func TestProcessCloseRightAfterARunLeavesNoCgroup(t *testing.T) {
	needJail(t)
	for i := range 8 {
		cfg := sandbox.Config{RootfsDir: rootfsDir(t), WorkDir: t.TempDir(), CgroupParent: cgroupParent}
		r, err := sandbox.NewRunner(cfg)
		if err != nil {
			t.Fatalf("NewRunner: %v", err)
		}
		if res := runProc(t, r, sandbox.Spec{Source: "def run(a, c):\n    return 1\n"}); res.Status != sandbox.StatusOK {
			r.Close()
			t.Fatalf("run %d: %s %+v", i, res.Status, res.Error)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		assertNoCgroupsLeft(t, r)
		if t.Failed() {
			t.Fatalf("after run %d", i)
		}
	}
}

// A finished run's cgroup is reset and reused for a later run of the same
// zygote (cgroup v1; on v2 every run gets a new one), and every outcome stays the run's own: a trivial run
// after a memory hog, an OOM kill or a CPU spin reports its own small peak
// and CPU time, status ok.
func TestProcessReusedCgroupsStartEachRunAfresh(t *testing.T) {
	r := newRunner(t, nil)
	const hog = "def run(a, c):\n    x = bytearray(48 << 20)\n    for i in range(0, len(x), 4096):\n        x[i] = 1\n    return len(x)\n"
	// The bomb writes every page it takes (b"\x01" * n), so it reaches the
	// memory limit within little CPU even under emulation: a calloc'd
	// bytearray's pages are touched lazily, which cost a VM under TCG the
	// whole CPU limit first.
	const oom = "def run(a, c):\n    x = []\n    while True:\n        x.append(b\"\\x01\" * (16 << 20))\n"
	const spin = "def run(a, c):\n    while True:\n        pass\n"
	lim := sandbox.Limits{MemoryMB: 128, CPUMS: stretch(300), TimeoutMS: stretch(5000)}
	// The bomb gets CPU enough to reach the memory limit wherever it runs:
	// under TCG emulation page faults are dear, and one bomb in a CI run
	// spent 2400 ms of CPU (the stretched 300 ms) before its 128 MiB.
	bombLim := lim
	bombLim.CPUMS = stretch(3000)
	bombLim.TimeoutMS = stretch(10000)
	// Enough trivial runs after each other run that the pool of reset
	// cgroups (zygoteCgroups at most) comes round to the other run's.
	trivial := func(after string) {
		t.Helper()
		for range 10 {
			res := runProc(t, r, sandbox.Spec{Source: probeSource, Limits: lim})
			if res.Status != sandbox.StatusOK || res.Usage.Isolation != sandbox.IsolationProcess {
				t.Fatalf("a trivial run after %s: %s %+v, usage.isolation %q", after, res.Status, res.Error, res.Usage.Isolation)
			}
			if res.Usage.PeakMemoryKB > 24<<10 || res.Usage.CPUMS > stretch(150) {
				t.Fatalf("a trivial run after %s reports peak %d KiB, CPU %d ms: the earlier run's counters leaked into it", after, res.Usage.PeakMemoryKB, res.Usage.CPUMS)
			}
		}
	}
	for round := range 3 {
		res := runProc(t, r, sandbox.Spec{Source: hog, Limits: lim})
		if res.Status != sandbox.StatusOK || res.Usage.PeakMemoryKB < 48<<10 {
			t.Fatalf("round %d: the hog: %s %+v, peak %d KiB", round, res.Status, res.Error, res.Usage.PeakMemoryKB)
		}
		trivial("a 48 MiB hog")
		if res := runProc(t, r, sandbox.Spec{Source: oom, Limits: bombLim}); res.ErrorType() != sandbox.ErrMemoryLimit {
			t.Fatalf("round %d: the memory bomb: %q %+v", round, res.ErrorType(), res.Error)
		}
		trivial("an OOM kill")
		if res := runProc(t, r, sandbox.Spec{Source: spin, Limits: lim}); res.ErrorType() != sandbox.ErrCPULimit {
			t.Fatalf("round %d: the spin: %q %+v", round, res.ErrorType(), res.Error)
		}
		trivial("a CPU spin")
	}
	// cgroup v1 resets and reuses a finished run's cgroup; v2 cannot reset
	// memory.peak for a fresh reader, so each run gets a new one there and
	// the same rounds prove v2's counters are read per run.
	if n := sandbox.CgroupsReused(r); sandbox.CgroupVersion(r) == 1 && n < 45 {
		t.Fatalf("%d of 99 runs' cgroups were reused, want most", n)
	} else if sandbox.CgroupVersion(r) == 2 && n != 0 {
		t.Fatalf("cgroup v2: %d runs' cgroups were reused, want none", n)
	}
	assertRunCgroupsGone(t, r)
}

// A run whose harness is its one process ends as soon as the harness
// closes a whole envelope, its process killed and not waited for (the
// kernel's teardown of a forked interpreter, about a millisecond, is off
// the run's path); a run with another process ends once every process is
// gone, as before. Either way, when Run returns no process of the run can
// execute again: each is gone, dying or has SIGKILL pending, also when a
// thread of the tool forks while the harness finishes.
func TestProcessRunEndsWithItsEnvelope(t *testing.T) {
	r := newRunner(t, nil)
	noLive := func(what string) {
		t.Helper()
		if live := sandbox.LiveProcessesOfEndedRuns(r); len(live) > 0 {
			t.Fatalf("%s: processes of ended runs still live: %v", what, live)
		}
	}
	for range 20 {
		resultMap(t, runProc(t, r, sandbox.Spec{Source: probeSource}))
		noLive("a trivial run")
	}
	// A run whose exit the zygote reports before the runner saw its
	// envelope's end ends the other way: no harm, nothing to gain. With
	// three CPU burners beside the test, 7 to 10 runs in 10 ended with
	// their envelope.
	// On cgroup v2 every run ends once its processes are gone (ending
	// with the envelope reads v1's pids hierarchy): none ends early, and
	// no process of an ended run may execute all the same.
	early := sandbox.EndedWithEnvelope(r)
	if v := sandbox.CgroupVersion(r); v == 1 && early < 5 {
		t.Fatalf("%d of 20 trivial runs ended with their envelope, want most", early)
	} else if v == 2 && early != 0 {
		t.Fatalf("cgroup v2: %d of 20 trivial runs ended with their envelope, want none", early)
	}
	const daemon = "import os, time\ndef run(a, c):\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(60)\n        os._exit(0)\n    return 'left a daemon'\n"
	if res := runProc(t, r, sandbox.Spec{Source: daemon}); res.Status != sandbox.StatusOK || string(res.Result) != `"left a daemon"` {
		t.Fatalf("daemon run: %s %s %+v", res.Status, res.Result, res.Error)
	}
	noLive("a run that left a daemon")
	if n := sandbox.EndedWithEnvelope(r); n != early {
		t.Fatal("a run that left a daemon ended with its envelope")
	}
	// A thread forks children that stay (so the harness is never alone),
	// or that exit at once and are reaped (so it mostly is, and a fork can
	// be under way when the harness is killed).
	const forker = `import os, sys, threading, time
def forks(stay):
    while True:
        try:
            pid = os.fork()
        except OSError:
            time.sleep(0.001)
            continue
        if pid == 0:
            if stay:
                time.sleep(60)
            os._exit(0)
        if not stay:
            os.waitpid(pid, 0)
def run(a, c):
    threading.Thread(target=forks, args=(a['stay'],), daemon=True).start()
    time.sleep(0.005)
    return 'forking'
`
	for i := range 30 {
		res := runProc(t, r, sandbox.Spec{Source: forker, Args: json.RawMessage(fmt.Sprintf(`{"stay": %v}`, i%2 == 0)), Limits: sandbox.Limits{Pids: 64}})
		if res.Status != sandbox.StatusOK || string(res.Result) != `"forking"` {
			t.Fatalf("forking run: %s %s %+v", res.Status, res.Result, res.Error)
		}
		noLive("a run whose thread forks while it returns")
	}
	assertRunCgroupsGone(t, r)
}

// leakFamilies is what no run may leave for another run of the same tenant,
// at either level (testdata/leak_probe.py plants and looks for each).
var leakFamilies = []string{
	"module", "builtins", "env", "/tmp", "/dev/shm", "thread", "heap",
	"sysv_shm", "sysv_sem", "sysv_msg", "posix_mqueue",
}

// Run A leaves a secret in every family of leakFamilies and waits in a tool
// call; run B of the same tenant runs meanwhile, run C after A ended: each
// looks for A's state by name, by key and (SysV) by id, and finds nothing.
// At level process A, B and C are forks of one zygote; each has its own
// IPC namespace (SysV shm, semaphores, message queues, POSIX mqueue; the
// jail has no /dev/mqueue, the queues are reached by mq_open). At level
// jail each run is a jail of its own, with nsjail's own IPC namespace.
func TestProcessRunLeavesNothingToAnotherRun(t *testing.T) {
	probe, err := os.ReadFile("testdata/leak_probe.py")
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, nil)
	type seen struct {
		Seen      map[string]any `json:"seen"`
		IPCNS     string         `json:"ipc_ns"`
		DevMqueue bool           `json:"dev_mqueue"`
	}
	decodeSeen := func(res sandbox.Result) seen {
		t.Helper()
		var s seen
		if res.Status != sandbox.StatusOK {
			t.Fatalf("run failed: %+v\nstderr: %s", res.Error, res.Stderr)
		}
		if err := json.Unmarshal(res.Result, &s); err != nil {
			t.Fatalf("result %s: %v", res.Result, err)
		}
		return s
	}
	for _, level := range []string{sandbox.IsolationProcess, sandbox.IsolationJail} {
		t.Run(level, func(t *testing.T) {
			const secret = "run-A-secret-6f1c"
			spec := func(args string) sandbox.Spec {
				return sandbox.Spec{TenantID: "t1", Isolation: level, Source: string(probe) + "\n" + waitHook,
					Args: json.RawMessage(args), Limits: limits.Default}
			}
			var runB sandbox.Result
			resA := whileInToolCall(t, r, spec(`{"plant": "`+secret+`", "wait": true}`), func() {
				runB = run(t, r, spec(`{}`))
			})
			runC := run(t, r, spec(`{}`))
			a, b, c := decodeSeen(resA), decodeSeen(runB), decodeSeen(runC)
			if level == sandbox.IsolationProcess {
				for name, res := range map[string]sandbox.Result{"A": resA, "B": runB, "C": runC} {
					if res.Usage.Isolation != sandbox.IsolationProcess {
						t.Fatalf("run %s ran at level %q, want process", name, res.Usage.Isolation)
					}
				}
			}
			for _, f := range leakFamilies {
				// The probe finds what A left, in A itself.
				want := map[string]string{"thread": "execgate-leak", "sysv_sem": fmt.Sprintf("value %d", len(secret))}[f]
				if want == "" {
					want = secret
				}
				if v := a.Seen[f]; v == nil || !strings.Contains(fmt.Sprint(v), want) {
					t.Errorf("run A does not find its own %s (%v, want %q): the probe is broken", f, v, want)
				}
				for name, s := range map[string]seen{"B (during A)": b, "C (after A)": c} {
					if v, ok := s.Seen[f]; !ok || v != nil {
						t.Errorf("level %s: run %s finds run A's %s: %v", level, name, f, v)
					}
				}
			}
			// Namespace inode numbers are reused once a namespace is gone:
			// only A's and B's, alive at once, must differ.
			if a.IPCNS == "" || a.IPCNS == b.IPCNS {
				t.Errorf("level %s: runs A and B, alive together, share IPC namespace %s", level, a.IPCNS)
			}
			if a.DevMqueue {
				t.Logf("level %s: /dev/mqueue is mounted in the run", level)
			}
		})
	}
}

// waitHook makes a probe with args {"wait": true} wait in a tool call
// before it returns (gateBridge holds it there).
const waitHook = `
_probe_run = run
def run(args, context):
    out = _probe_run(args, context)
    if args and args.get("wait"):
        context.tools.run("wait")
    return out
`

// SysV shared memory a run creates is charged to the run and ends with it.
// Each run creates a segment, touches every page of it and leaves it
// behind (no IPC_RMID): its peak counts the segment, and once the runs are
// over the memory the kernel charges to the runner's cgroups (zygote,
// spares, runs, and the removed cgroups of ended runs, whose charges stay
// in their parent's counter) comes back to what it was before them. A
// segment larger than the run's memory limit ends the run at its limit.
func TestProcessSysVSharedMemoryEndsWithItsRun(t *testing.T) {
	// A parent cgroup of this test's own: its counter is this runner's.
	parent := cgroupParent + "/sysv-shm"
	t.Cleanup(func() {
		for _, c := range []string{"memory", "pids", "cpu", "unified", ""} {
			os.Remove(filepath.Join("/sys/fs/cgroup", c, parent))
		}
	})
	r := newRunner(t, func(c *sandbox.Config) { c.CgroupParent = parent })
	counter := filepath.Join(sandbox.CgroupDirs(r)[0], "memory.usage_in_bytes")
	if sandbox.CgroupVersion(r) == 2 {
		counter = filepath.Join(sandbox.CgroupDirs(r)[0], "memory.current")
	}
	usage := func() int64 {
		t.Helper()
		sandbox.ZygoteCgroups(r) // no spare being prepared
		data, err := os.ReadFile(counter)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const src = `
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def run(args, context):
    size = args["mib"] << 20
    shm = libc.syscall(29, 0, ctypes.c_long(size), 0o1600)  # shmget(IPC_PRIVATE, size, IPC_CREAT|0600)
    if shm < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    addr = libc.syscall(30, ctypes.c_long(shm), 0, 0)  # shmat
    if addr < 0:
        raise OSError(ctypes.get_errno(), "shmat")
    ctypes.memset(addr, 1, size)
    libc.syscall(67, ctypes.c_long(addr))  # shmdt; no IPC_RMID
    return shm
`
	const mib, runs = 64, 4
	lim := sandbox.Limits{MemoryMB: 128}
	spec := sandbox.Spec{Source: src, Args: json.RawMessage(`{"mib": 1}`), Limits: lim}
	for range 2 { // the zygote, its spares and ctypes's pages in place
		if res := runProc(t, r, spec); res.Status != sandbox.StatusOK {
			t.Fatalf("warm-up run: %+v %s", res.Error, res.Stderr)
		}
	}
	before := usage()
	spec.Args = json.RawMessage(fmt.Sprintf(`{"mib": %d}`, mib))
	for i := range runs {
		res := runProc(t, r, spec)
		if res.Status != sandbox.StatusOK {
			t.Fatalf("run %d: %+v %s", i, res.Error, res.Stderr)
		}
		if res.Usage.PeakMemoryKB < mib<<10 {
			t.Fatalf("run %d: peak %d KiB with a touched %d MiB segment: the segment is not charged to the run", i, res.Usage.PeakMemoryKB, mib)
		}
	}
	// The kernel frees an IPC namespace's objects shortly after its last
	// process is gone (a work item after an RCU grace period): wait for
	// the counter, generously; before the fix it never came back (the
	// segments lived in the zygote's namespace until it retired).
	const slack = mib << 20 / 2
	var after int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) { // polling interval, bounded by the deadline
		if after = usage(); after <= before+slack || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("the runner's cgroups: %d KiB before %d runs, %d KiB after", before>>10, runs, after>>10)
	if after > before+slack {
		t.Fatalf("%d runs each left a touched %d MiB SysV segment: the runner's cgroups hold %d MiB, %d MiB before them", runs, mib, after>>20, before>>20)
	}
	spec.Args = json.RawMessage(`{"mib": 192}`)
	if res := runProc(t, r, spec); res.ErrorType() != sandbox.ErrMemoryLimit {
		t.Fatalf("a 192 MiB segment in a 128 MiB run: %s %q %+v", res.Status, res.ErrorType(), res.Error)
	}
	assertRunCgroupsGone(t, r)
}

// The runs of a zygote share its network namespace and with it the
// abstract unix socket namespace: a run that could connect to another's
// socket could be handed descriptors (its IPC namespace, a memfd, a /tmp
// file) that keep the other run's objects and memory alive after it ended.
// Each run is in a Landlock domain of its own that scopes abstract
// sockets: run B reaches neither run A's stream nor its datagram socket,
// while A's own child reaches both and is handed a descriptor. At level
// jail each jail has a network namespace of its own.
func TestProcessRunsCannotReachEachOthersAbstractSockets(t *testing.T) {
	r := newRunner(t, nil)
	const src = `
import array, errno, os, socket
def connect(kind, name):
    s = socket.socket(socket.AF_UNIX, kind)
    try:
        if kind == socket.SOCK_STREAM:
            s.connect(name)
        else:
            s.sendto(b"x", name)
        return s, "reached"
    except OSError as e:
        s.close()
        return None, errno.errorcode.get(e.errno, str(e.errno))
def run(args, context):
    stream, dgram = b"\0execgate-relay-stream", b"\0execgate-relay-dgram"
    if args["role"] == "B":
        return {"stream": connect(socket.SOCK_STREAM, stream)[1], "dgram": connect(socket.SOCK_DGRAM, dgram)[1]}
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(stream)
    ls.listen(4)
    ds = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ds.bind(dgram)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # A's own child: same run, same domain
        s, how = connect(socket.SOCK_STREAM, stream)
        got = "no descriptor"
        if s is not None:
            _, anc, _, _ = s.recvmsg(1, socket.CMSG_SPACE(4))
            got = "descriptor" if anc else got
        os.write(w, ("%s %s %s" % (how, connect(socket.SOCK_DGRAM, dgram)[1], got)).encode())
        os._exit(0)
    os.close(w)
    c, _ = ls.accept()
    ns = os.open("/proc/self/ns/ipc", os.O_RDONLY)
    c.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [ns]))])
    child = os.read(r, 256).decode()
    os.waitpid(pid, 0)
    context.tools.run("wait")
    return {"child": child}
`
	for _, level := range []string{sandbox.IsolationProcess, sandbox.IsolationJail} {
		t.Run(level, func(t *testing.T) {
			spec := func(role string) sandbox.Spec {
				return sandbox.Spec{TenantID: "t1", Isolation: level, Source: src, Args: json.RawMessage(`{"role": "` + role + `"}`), Limits: limits.Default}
			}
			var b map[string]any
			resA := whileInToolCall(t, r, spec("A"), func() { b = resultMap(t, run(t, r, spec("B"))) })
			a := resultMap(t, resA)
			if a["child"] != "reached reached descriptor" {
				t.Errorf("level %s: run A's own child: %v, want both of A's sockets reached and a descriptor passed", level, a["child"])
			}
			// A kernel without Landlock's abstract-socket scope (before
			// 6.12, e.g. Debian 12's 6.1 in the cgroup v2 VM) cannot hold
			// this at level process: the zygote says so and the runner
			// warns (README: the documented gap).
			if scoped, ok := sandbox.ZygoteScoped(r); level == sandbox.IsolationProcess && ok && !scoped {
				t.Logf("level process on a kernel without the scope (the documented gap): run B: stream %v, datagram %v", b["stream"], b["dgram"])
				return
			}
			for _, k := range []string{"stream", "dgram"} {
				if b[k] == "reached" {
					t.Errorf("level %s: run B reached run A's abstract %s socket", level, k)
				}
			}
			t.Logf("level %s: run B: stream %v, datagram %v", level, b["stream"], b["dgram"])
		})
	}
}
