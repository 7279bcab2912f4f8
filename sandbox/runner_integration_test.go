package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/zygote"
)

// shared is one rootfs for all integration tests (a build takes seconds).
var shared struct {
	once sync.Once
	dir  string
	err  error
	log  string
}

// cgroupParent is this test binary's own parent cgroup, so the tests can
// assert that nothing is left behind without racing other users of the host.
var cgroupParent = fmt.Sprintf("execgate-test-%d", os.Getpid())

// stretch is a wall or CPU time (ms) a test allows, stretched on a slow
// host (testenv.TimeScale: the cgroup v2 VM under emulation) and kept
// within the platform's maximum.
func stretch(ms int64) int64 {
	return min(ms*int64(testenv.TimeScale()), limits.Max.TimeoutMS)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(filepath.Dir(shared.dir))
	}
	for _, c := range []string{"memory", "pids", "cpu", "unified", ""} {
		os.Remove(filepath.Join("/sys/fs/cgroup", c, cgroupParent))
	}
	os.Exit(code)
}

// needJail skips when this host cannot run jails at all.
func needJail(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t) // skips, or fails under CI=true
	if _, err := sandbox.FindNsjail(sandbox.Config{}); err != nil {
		testenv.Nsjail(t) // skips, or fails under CI=true, unless the repository's own nsjail is there
		t.Fatalf("integration test needs nsjail on the runner's search path: %v", err)
	}
}

func rootfsDir(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		parent, err := os.MkdirTemp("", "sandbox-test-")
		if err != nil {
			shared.err = err
			return
		}
		// The jail's user must be able to traverse to the rootfs.
		if err := os.Chmod(parent, 0o755); err != nil {
			shared.err = err
			return
		}
		shared.dir = filepath.Join(parent, "rootfs")
		var log logBuf
		_, shared.err = rootfs.Build(context.Background(), rootfs.Options{Dir: shared.dir, Progress: &log})
		shared.log = log.String()
	})
	if shared.err != nil {
		t.Fatalf("building the test rootfs: %v\n%s", shared.err, shared.log)
	}
	return shared.dir
}

type logBuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *logBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return string(l.b) }

func newRunner(t *testing.T, mod func(*sandbox.Config), opts ...sandbox.Option) *sandbox.Runner {
	t.Helper()
	needJail(t)
	cfg := sandbox.Config{RootfsDir: rootfsDir(t), WorkDir: t.TempDir(), CgroupParent: cgroupParent,
		Zygotes: zygote.Config{StartMS: stretch(zygote.DefaultStartMS)}}
	if mod != nil {
		mod(&cfg)
	}
	r, err := sandbox.NewRunner(cfg, opts...)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoCgroupsLeft(t, r)
	})
	return r
}

func assertNoCgroupsLeft(t *testing.T, r *sandbox.Runner) {
	t.Helper()
	for _, d := range sandbox.CgroupDirs(r) {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Errorf("reading %s: %v", d, err)
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("cgroup left behind: %s/%s", d, e.Name())
			}
		}
	}
}

func run(t *testing.T, r *sandbox.Runner, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, detail(err))
	}
	return res
}

func detail(err error) string {
	if u, ok := err.(*sandbox.UnavailableError); ok {
		return u.Detail()
	}
	return ""
}

func dump(res sandbox.Result) string {
	b, _ := json.MarshalIndent(res, "", "  ")
	return string(b) + "\nnsjail log:\n" + fmt.Sprint(res.NsjailLog)
}

func TestProbeToolReturnsOK(t *testing.T) {
	r := newRunner(t, nil)
	res := run(t, r, sandbox.Spec{ExecutionID: "probe", TenantID: "demo",
		Source: "async def run(args, context):\n    return {\"ok\": True}\n", Entrypoint: "run",
		Limits: limits.Default})
	if res.Status != sandbox.StatusOK || string(res.Result) != `{"ok":true}` {
		t.Fatalf("want ok/{\"ok\":true}, got %s", dump(res))
	}
	t.Logf("usage %+v", res.Usage)
}

func TestRunOutcomes(t *testing.T) {
	r := newRunner(t, nil)
	small := sandbox.Limits{TimeoutMS: stretch(1500), CPUMS: stretch(1000), MemoryMB: 64}.Or(limits.Default)
	tests := []struct {
		name    string
		spec    sandbox.Spec
		status  sandbox.Status
		errType string
		check   func(t *testing.T, res sandbox.Result)
	}{
		{
			name:   "a sync tool gets its args and context",
			spec:   sandbox.Spec{ExecutionID: "e-1", TenantID: "t-1", Source: "def run(args, context):\n    context.log('adding', level='debug')\n    return {'sum': args['a'] + args['b'], 'tenant': context.tenant_id, 'id': context.execution_id, 'left': context.remaining() > 0}\n", Args: json.RawMessage(`{"a": 2, "b": 3}`), Limits: limits.Default},
			status: sandbox.StatusOK,
			check: func(t *testing.T, res sandbox.Result) {
				if string(res.Result) != `{"sum":5,"tenant":"t-1","id":"e-1","left":true}` {
					t.Errorf("result %s", res.Result)
				}
				if len(res.Logs) != 1 || res.Logs[0] != (sandbox.LogLine{Level: "debug", Message: "adding"}) {
					t.Errorf("logs %+v", res.Logs)
				}
			},
		},
		{
			name:   "prints go to stdout and stderr, not into the result",
			spec:   sandbox.Spec{Source: "import sys\ndef run(args, context):\n    print('to stdout')\n    print('to stderr', file=sys.stderr)\n    return 7\n", Limits: limits.Default},
			status: sandbox.StatusOK,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Stdout != "to stdout\n" || res.Stderr != "to stderr\n" || string(res.Result) != "7" {
					t.Errorf("stdout %q stderr %q result %s", res.Stdout, res.Stderr, res.Result)
				}
			},
		},
		{
			name:    "a raised exception is a ToolError with only the tool's frames",
			spec:    sandbox.Spec{Source: "def helper(x):\n    raise ValueError('bad value %d' % x)\n\ndef run(args, context):\n    return helper(3)\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrToolError,
			check: func(t *testing.T, res sandbox.Result) {
				tb := res.Error.Traceback
				if res.Error.Message != "ValueError: bad value 3" || res.Error.Line != 2 {
					t.Errorf("message %q line %d", res.Error.Message, res.Error.Line)
				}
				if !strings.Contains(tb, `File "tool.py", line 5, in run`) || !strings.Contains(tb, `File "tool.py", line 2, in helper`) {
					t.Errorf("traceback lacks the tool's frames:\n%s", tb)
				}
				for _, h := range []string{"harness", "execgate_runtime", "/opt/execgate"} {
					if strings.Contains(tb, h) {
						t.Errorf("traceback shows harness frames (%s):\n%s", h, tb)
					}
				}
			},
		},
		{
			name:    "a syntax error is InvalidSource with its line",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    return 1\n\ndef broken(:\n    pass\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrInvalidSource,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Error.Line != 4 {
					t.Errorf("line %d, want 4 (%+v)", res.Error.Line, res.Error)
				}
			},
		},
		{
			name:    "an import-time exception is InvalidSource with its line",
			spec:    sandbox.Spec{Source: "X = 1\nraise RuntimeError('boom at import')\ndef run(a, c):\n    return 1\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrInvalidSource,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Error.Line != 2 || !strings.Contains(res.Error.Message, "boom at import") {
					t.Errorf("%+v", res.Error)
				}
			},
		},
		{
			name:    "a missing entrypoint is EntrypointNotFound naming what exists",
			spec:    sandbox.Spec{Source: "def main(args, context):\n    return 1\n", Entrypoint: "run", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrEntrypointNotFound,
			check: func(t *testing.T, res sandbox.Result) {
				if !strings.Contains(res.Error.Message, "main") {
					t.Errorf("%+v", res.Error)
				}
			},
		},
		{
			name:    "a result that is not JSON is InvalidResult",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    return {'s': {1, 2}}\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrInvalidResult,
		},
		{
			name:    "a result over the output cap is OutputLimit",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    return 'x' * 5000\n", Limits: sandbox.Limits{OutputBytes: 1000}.Or(limits.Default)},
			status:  sandbox.StatusError,
			errType: sandbox.ErrOutputLimit,
		},
		{
			name:    "InvalidInput from execgate_runtime is reported as such",
			spec:    sandbox.Spec{Source: "from execgate_runtime import InvalidInput\ndef run(args, context):\n    raise InvalidInput('args.name is required')\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrInvalidInput,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Error.Message != "args.name is required" {
					t.Errorf("%+v", res.Error)
				}
			},
		},
		{
			name:    "a busy loop past the wall limit is a Timeout, not a MemoryLimit",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    while True:\n        pass\n", Limits: sandbox.Limits{TimeoutMS: stretch(1000), CPUMS: stretch(5000), MemoryMB: 64}.Or(limits.Default)},
			status:  sandbox.StatusError,
			errType: sandbox.ErrTimeout,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Usage.WallMS < stretch(1000) || res.Usage.WallMS > stretch(3000) {
					t.Errorf("wall %d ms for a %d ms timeout", res.Usage.WallMS, stretch(1000))
				}
			},
		},
		{
			name:    "a sleeping tool past the wall limit is a Timeout",
			spec:    sandbox.Spec{Source: "import time\ndef run(args, context):\n    print('before', flush=True)\n    time.sleep(30)\n", Limits: sandbox.Limits{TimeoutMS: stretch(500)}.Or(limits.Default)},
			status:  sandbox.StatusError,
			errType: sandbox.ErrTimeout,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Stdout != "before\n" {
					t.Errorf("output before the kill is lost: %q", res.Stdout)
				}
			},
		},
		{
			name:    "a Python CPU burn past the CPU limit is a CPULimit",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    n = 0\n    while True:\n        n += 1\n", Limits: sandbox.Limits{TimeoutMS: stretch(10000), CPUMS: stretch(1000)}.Or(limits.Default)},
			status:  sandbox.StatusError,
			errType: sandbox.ErrCPULimit,
			check: func(t *testing.T, res sandbox.Result) {
				// rusage and RLIMIT_CPU sample CPU time differently; allow slack.
				if res.Usage.CPUMS < stretch(700) || res.Usage.WallMS > stretch(5000) {
					t.Errorf("usage %+v", res.Usage)
				}
			},
		},
		{
			name:    "a CPU burn inside C code past the CPU limit is a CPULimit",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    return sum(range(10**12))\n", Limits: sandbox.Limits{TimeoutMS: 10000, CPUMS: 1000}.Or(limits.Default)},
			status:  sandbox.StatusError,
			errType: sandbox.ErrCPULimit,
		},
		{
			name:    "touching more memory than the cgroup allows is a MemoryLimit, not a Timeout",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    blob = b'x' * (200 * 2**20)\n    return len(blob)\n", Limits: small},
			status:  sandbox.StatusError,
			errType: sandbox.ErrMemoryLimit,
			check: func(t *testing.T, res sandbox.Result) {
				if res.Usage.PeakMemoryKB < 32<<10 {
					t.Errorf("peak %d KiB: the kernel's peak should be near the 64 MiB limit", res.Usage.PeakMemoryKB)
				}
			},
		},
		{
			// The address-space limit refuses the allocation before any
			// memory is charged: the kernel records no limit hit, so the
			// harness's MemoryLimit report is the tool's MemoryError.
			name:    "an allocation beyond the address space limit is the tool's MemoryError, not a MemoryLimit the kernel never saw",
			spec:    sandbox.Spec{Source: "def run(args, context):\n    return len(bytearray(8 * 2**30))\n", Limits: small},
			status:  sandbox.StatusError,
			errType: sandbox.ErrToolError,
			check: func(t *testing.T, res sandbox.Result) {
				if !strings.Contains(res.Error.Message, "MemoryError") {
					t.Errorf("%+v", res.Error)
				}
			},
		},
		{
			name:    "a segfault is SandboxCrashed naming the signal",
			spec:    sandbox.Spec{Source: "import ctypes\ndef run(args, context):\n    return ctypes.string_at(0)\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrSandboxCrashed,
			check: func(t *testing.T, res sandbox.Result) {
				if !strings.Contains(res.Error.Message, "SIGSEGV") || !strings.Contains(res.Error.Traceback, "nsjail log:") {
					t.Errorf("%+v", res.Error)
				}
			},
		},
		{
			name:    "garbage written over the result channel is the tool's error, not a crash",
			spec:    sandbox.Spec{Source: "import os\ndef run(args, context):\n    os.write(3, b'not json')\n    os._exit(0)\n", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrToolError,
		},
		{
			name:    "a bad spec is InvalidInput and runs nothing",
			spec:    sandbox.Spec{Source: "def run(a, c): return 1", Entrypoint: "not-an-identifier", Limits: limits.Default},
			status:  sandbox.StatusError,
			errType: sandbox.ErrInvalidInput,
		},
		{
			name:   "test mode offers fixture variables and tools",
			spec:   sandbox.Spec{Mode: "test", Variables: json.RawMessage(`{"city": "Oslo"}`), ToolFixtures: json.RawMessage(`{"weather": {"temp": 3}}`), Source: "def run(args, context):\n    w = context.tools.weather(city=context.variables['city'])\n    return {'city': context.variables['city'], 'temp': w['temp']}\n", Limits: limits.Default},
			status: sandbox.StatusOK,
			check: func(t *testing.T, res sandbox.Result) {
				if string(res.Result) != `{"city":"Oslo","temp":3}` {
					t.Errorf("result %s", res.Result)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, tt.spec)
			if res.Status != tt.status || res.ErrorType() != tt.errType {
				t.Fatalf("want %s/%q, got %s/%q\n%s", tt.status, tt.errType, res.Status, res.ErrorType(), dump(res))
			}
			if tt.check != nil {
				tt.check(t, res)
			}
		})
	}
}

// jailFacts runs a tool that reports facts about its jail as a JSON object.
func jailFacts(t *testing.T, r *sandbox.Runner, spec sandbox.Spec) map[string]any {
	t.Helper()
	res := run(t, r, spec)
	if res.Status != sandbox.StatusOK {
		t.Fatalf("facts tool failed: %s", dump(res))
	}
	var facts map[string]any
	if err := json.Unmarshal(res.Result, &facts); err != nil {
		t.Fatalf("facts: %v: %s", err, res.Result)
	}
	return facts
}

const factsTool = `
import ctypes, errno, os, resource, socket, threading

libc = ctypes.CDLL(None, use_errno=True)

def sys(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

def fd_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False

def writable(path):
    try:
        with open(path, "a"):
            return "writable"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

def mounts():
    # mount point -> per-mount options (uid 99999 gets EACCES before EROFS,
    # so read-only-ness is read from mountinfo).
    out = {}
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        out[f[4]] = f[5]
    return out

def run(args, context):
    t = threading.Thread(target=lambda: None)
    t.start(); t.join()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return {
        "uid_map": open("/proc/self/uid_map").read().split(),
        "gid_map": open("/proc/self/gid_map").read().split(),
        "uid": os.getuid(), "gid": os.getgid(),
        "rlimit_nproc": resource.getrlimit(resource.RLIMIT_NPROC),
        "rlimit_stack": resource.getrlimit(resource.RLIMIT_STACK),
        "env": dict(os.environ),
        "fd4_open": fd_open(4),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "dev": sorted(os.listdir("/dev")),
        # Escape-class calls kill the run (the containment suite tries
        # each); these are the ones refused with an errno.
        "clone3": sys(435, 0, 0),
        "io_setup": sys(206, 1, 0),
        "syslog": sys(103, 3, 0, 0),
        "personality": sys(135, 0x0040000),
        "personality_query": sys(135, 0xffffffff),
        "etc_passwd": writable("/etc/passwd"),
        "tmp": writable("/tmp/x"),
        "mounts": mounts(),
        "cap_eff": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0],
    }
`

func TestJailIsolation(t *testing.T) {
	r := newRunner(t, nil)
	f := jailFacts(t, r, sandbox.Spec{Source: factsTool, Limits: limits.Default})
	want := map[string]any{
		"uid": float64(99999), "gid": float64(99999),
		"fd4_open":          false,
		"clone3":            "ENOSYS",
		"io_setup":          "ENOSYS",
		"syslog":            "EPERM",
		"personality":       "EPERM",
		"personality_query": "ok",
		"etc_passwd":        "EACCES",
		"tmp":               "writable",
		"cap_eff":           "0000000000000000",
	}
	for k, v := range want {
		if fmt.Sprint(f[k]) != fmt.Sprint(v) {
			t.Errorf("%s: got %v, want %v", k, f[k], v)
		}
	}
	// 99999 inside, the jail's own host uid of sandbox.uid_range outside
	// (never host 0), the same number for the gid.
	host := hostUID(t, f)
	if host < 100000 || host > 165535 {
		t.Errorf("uid_map %v: host uid %d is outside the default uid_range 100000-165535", f["uid_map"], host)
	}
	if got, want := fmt.Sprint(f["gid_map"]), fmt.Sprintf("[99999 %d 1]", host); got != want {
		t.Errorf("gid_map %s, want %s", got, want)
	}
	// The rendered rlimits are what the jail sees (nsjail's default for
	// these two is its own soft limit).
	if got := fmt.Sprint(f["rlimit_nproc"]); got != "[4096 4096]" {
		t.Errorf("RLIMIT_NPROC in the jail %s, want the rendered [4096 4096]", got)
	}
	if got, want := fmt.Sprint(f["rlimit_stack"]), fmt.Sprint([]float64{8 << 20, 8 << 20}); got != want {
		t.Errorf("RLIMIT_STACK in the jail %s, want the rendered 8 MiB", got)
	}
	if got := fmt.Sprint(f["interfaces"]); got != "[lo]" {
		t.Errorf("network none: interfaces %s, want only lo", got)
	}
	mounts := f["mounts"].(map[string]any)
	for mnt, want := range map[string][]string{
		"/":            {"ro", "nosuid", "nodev"},
		"/tmp":         {"rw", "nosuid", "nodev", "noexec"},
		"/dev":         {"ro", "nosuid", "noexec"},
		"/dev/null":    {"ro", "nosuid", "noexec"},
		"/dev/urandom": {"ro"},
		"/dev/shm":     {"rw", "nosuid", "nodev", "noexec"},
		"/proc":        {"ro", "nosuid", "nodev", "noexec"},
	} {
		opts := strings.Split(fmt.Sprint(mounts[mnt]), ",")
		for _, w := range want {
			if !slices.Contains(opts, w) {
				t.Errorf("mount %s has options %v, want %s", mnt, opts, w)
			}
		}
	}
	if _, ok := mounts["/etc/resolv.conf"]; ok {
		t.Errorf("network none binds the host's /etc/resolv.conf")
	}
	if got := fmt.Sprint(f["dev"]); got != "[null shm urandom zero]" {
		t.Errorf("/dev holds %s", got)
	}
	env := f["env"].(map[string]any)
	wantEnv := []string{"HOME", "LANG", "MPLBACKEND", "MPLCONFIGDIR", "PATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "TMPDIR"}
	var keys []string
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if fmt.Sprint(keys) != fmt.Sprint(wantEnv) {
		t.Errorf("environment %v, want exactly %v", env, wantEnv)
	}
}

func TestHostNetworkBindsResolverFilesReadOnly(t *testing.T) {
	r := newRunner(t, nil)
	f := jailFacts(t, r, sandbox.Spec{Source: factsTool, Network: sandbox.NetworkHost, Limits: limits.Default})
	// A read-only parent does not make a bind submount read-only: each
	// host file must be its own read-only bind.
	mounts := f["mounts"].(map[string]any)
	for _, p := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if opts := strings.Split(fmt.Sprint(mounts[p]), ","); !slices.Contains(opts, "ro") {
			t.Errorf("host mode: %s mounted with %v, want ro", p, opts)
		}
	}
	host, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f["interfaces"].([]any)); n != len(host) {
		t.Errorf("host mode sees %d interfaces, the host has %d", n, len(host))
	}
}

func TestOutputFloodIsTruncatedAndMemoryStaysBounded(t *testing.T) {
	r := newRunner(t, nil)
	// The peak counts from here: what earlier tests of this package held
	// (the import check's hostile sources take hundreds of MiB) is given
	// back to the OS and the high-water mark reset (proc(5), clear_refs 5).
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	res := run(t, r, sandbox.Spec{
		Source: "import sys\ndef run(args, context):\n    chunk = 'x' * 65536\n    for _ in range(800):\n        sys.stdout.write(chunk)\n        sys.stderr.write(chunk)\n    return 'done'\n",
		Limits: sandbox.Limits{TimeoutMS: 20000, CPUMS: 20000}.Or(limits.Default),
	})
	if res.Status != sandbox.StatusOK || string(res.Result) != `"done"` {
		t.Fatalf("%s", dump(res))
	}
	limit := int(limits.Default.OutputBytes)
	if !res.Truncated.Stdout || !res.Truncated.Stderr || len(res.Stdout) != limit || len(res.Stderr) != limit {
		t.Errorf("truncated %+v, stdout %d bytes, stderr %d bytes, want %d each", res.Truncated, len(res.Stdout), len(res.Stderr), limit)
	}
	if hwm := peakRSS(t); hwm > 100<<20 {
		t.Errorf("test process peak RSS %d MiB after a 2×50 MiB flood, want < 100 MiB", hwm>>20)
	}
}

// peakRSS is this process's peak resident set (VmHWM).
func peakRSS(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func TestMissingNsjailIsUnavailable(t *testing.T) {
	_, err := sandbox.NewRunner(sandbox.Config{RootfsDir: t.TempDir(), NsjailPath: "/nonexistent/nsjail"})
	var u *sandbox.UnavailableError
	if !errors.As(err, &u) {
		t.Fatalf("want *UnavailableError, got %v", err)
	}
	if !strings.Contains(u.Hint, "scripts/setup.sh") {
		t.Errorf("hint %q does not point at scripts/setup.sh", u.Hint)
	}
}

func TestBrokenSeccompPolicyIsUnavailable(t *testing.T) {
	r := newRunner(t, nil)
	sandbox.SetSeccompPolicy(r, "POLICY p { ERRNO(1) { no_such_syscall } } USE p DEFAULT ALLOW")
	_, err := r.Run(context.Background(), sandbox.Spec{Source: "def run(a, c):\n    return 1\n", Limits: limits.Default})
	var u *sandbox.UnavailableError
	if !errors.As(err, &u) {
		t.Fatalf("want *UnavailableError, got %v", err)
	}
	if !strings.Contains(u.Detail(), "Could not compile policy") {
		t.Errorf("detail lacks nsjail's complaint:\n%s", u.Detail())
	}
}

// TestSeccompPolicyCompiles compiles the shipped policy with the real
// nsjail: one syscall name Kafel does not know breaks every run.
func TestSeccompPolicyCompiles(t *testing.T) {
	needJail(t)
	nsjail, _ := sandbox.FindNsjail(sandbox.Config{})
	cmd := exec.Command(nsjail, "-Mo", "--chroot", "/", "-q", "--disable_clone_newnet",
		"--seccomp_string", sandbox.SeccompPolicy(), "--", "/bin/true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nsjail rejected the policy: %v\n%s", err, out)
	}
}

func TestRunsInParallel(t *testing.T) {
	r := newRunner(t, nil)
	var wg sync.WaitGroup
	results := make([]sandbox.Result, 4)
	errs := make([]error, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = r.Run(context.Background(), sandbox.Spec{Source: fmt.Sprintf("def run(a, c):\n    return %d\n", i), Limits: limits.Default})
		}()
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil || res.Status != sandbox.StatusOK || string(res.Result) != fmt.Sprint(i) {
			t.Errorf("run %d: %v %s", i, errs[i], dump(res))
		}
	}
}

// startedBridge answers every tool call with {} and closes started at the
// first: the tool's way of saying "I am running now".
type startedBridge struct {
	once    sync.Once
	started chan struct{}
}

func (b *startedBridge) Search(context.Context, string, int) ([]sandbox.ToolInfo, error) {
	return nil, nil
}

func (b *startedBridge) Describe(context.Context, string) (sandbox.ToolInfo, error) {
	return sandbox.ToolInfo{}, nil
}

func (b *startedBridge) Call(context.Context, string, json.RawMessage) (json.RawMessage, error) {
	b.once.Do(func() { close(b.started) })
	return json.RawMessage(`{}`), nil
}

func TestCancelledContextStopsTheRun(t *testing.T) {
	r := newRunner(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &startedBridge{started: make(chan struct{})}
	// Cancel once the tool is inside its body (it says so through the
	// bridge), so the cancellation meets a running tool.
	var cancelledAt atomic.Int64
	go func() {
		select {
		case <-b.started:
			cancelledAt.Store(time.Now().UnixNano())
			cancel()
		case <-ctx.Done():
		}
	}()
	src := "import time\ndef run(a, c):\n    c.tools.run('signal.started', {})\n    time.sleep(30)\n"
	res, err := r.Run(ctx, sandbox.Spec{Source: src, Bridge: b, Limits: sandbox.Limits{TimeoutMS: 20000}.Or(limits.Default)})
	if err != nil {
		t.Fatal(err)
	}
	at := cancelledAt.Load()
	if at == 0 {
		t.Fatalf("the tool never reached its body: %s", dump(res))
	}
	if took := time.Since(time.Unix(0, at)); res.ErrorType() != sandbox.ErrCancelled || took > 5*time.Second { // a caller that went away: Cancelled (was Timeout)
		t.Errorf("%v after the cancellation: %s", took, dump(res))
	}
}

func waitWarm(t *testing.T, r *sandbox.Runner, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sandbox.WarmIdle(r) < n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool did not fill to %d within 10s (idle %d)", n, sandbox.WarmIdle(r))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWarmPool(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	probe := sandbox.Spec{Source: "async def run(args, context):\n    return {\"ok\": True}\n", Limits: limits.Default}

	t.Run("a warm run returns ok and wall time counts from the hand-off", func(t *testing.T) {
		waitWarm(t, r, 1)
		wait := time.Duration(stretch(500)) * time.Millisecond
		time.Sleep(wait) // age the waiting jail: its wait must not count
		hits := sandbox.WarmHits(r)
		start := time.Now()
		res := run(t, r, probe)
		took := time.Since(start)
		if res.Status != sandbox.StatusOK || string(res.Result) != `{"ok":true}` {
			t.Fatalf("%s", dump(res))
		}
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("the run did not use the warm jail")
		}
		// Run's own duration bounds a wall counted from the hand-off; a
		// wall counted from the jail's start holds the jail's wait too,
		// and exceeds it by about that wait. (Against the wait itself, a
		// loaded host that made the run as slow as the wait would fail it.)
		if res.Usage.WallMS > took.Milliseconds() {
			t.Errorf("wall %d ms, but Run took %v: the wall includes the time the jail waited (%v)", res.Usage.WallMS, took, wait)
		}
	})
	t.Run("the pool refills", func(t *testing.T) {
		waitWarm(t, r, 1)
	})
	t.Run("a warm jail settles once its harness waits for its request", func(t *testing.T) {
		// The pool's filler starts the next jail once one has settled
		// (while the pool is more than half full): Settle must return
		// before its bound, and only once the jail uses no more CPU.
		max := time.Duration(stretch(5000)) * time.Millisecond
		took, cpu, later, err := sandbox.SettleWarmJail(r, max)
		if err != nil {
			t.Fatal(err)
		}
		if took >= max {
			t.Errorf("Settle took its whole bound (%v)", took)
		}
		// Settled is the harness using no more CPU. nsjail itself is born
		// in the jail's cgroup and, in mode ONCE, wakes on a 1 s SIGALRM
		// timer (its time-limit check): 30-100 µs of CPU a tick, measured
		// on cpuacct.usage. A tick falls within the 100 ms window whenever
		// Settle returns in the last tenth of a second before one (a jail
		// starting for about a second on a loaded host, any phase under
		// emulation), so exact equality can fail; a harness still starting
		// uses tens of ms of CPU in 100 ms, far above this slack.
		const nsjailTicks = 2 * time.Millisecond
		if cpu <= 0 || later-cpu > nsjailTicks {
			t.Errorf("the jail used %v of CPU when Settle returned (after %v), %v 100 ms later: it had not settled", cpu, took, later)
		}
	})
	t.Run("a jail is never reused", func(t *testing.T) {
		waitWarm(t, r, 1)
		res := run(t, r, sandbox.Spec{Source: "def run(a, c):\n    open('/tmp/marker', 'w').write('run A')\n    return 'written'\n", Limits: limits.Default})
		if res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		waitWarm(t, r, 1)
		hits := sandbox.WarmHits(r)
		res = run(t, r, sandbox.Spec{Source: "import os\ndef run(a, c):\n    return os.path.exists('/tmp/marker')\n", Limits: limits.Default})
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("the second run did not use a warm jail")
		}
		if res.Status != sandbox.StatusOK || string(res.Result) != "false" {
			t.Errorf("run B saw run A's file: %s", dump(res))
		}
	})
	t.Run("another profile starts cold and is warmed for next time", func(t *testing.T) {
		spec := probe
		spec.Limits = sandbox.Limits{MemoryMB: 128}.Or(limits.Default)
		hits := sandbox.WarmHits(r)
		if res := run(t, r, spec); res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		if sandbox.WarmHits(r) != hits {
			t.Fatalf("a new profile was served warm")
		}
		waitWarm(t, r, 2)
		if res := run(t, r, spec); res.Status != sandbox.StatusOK || sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("second run of the profile not warm: %s", dump(res))
		}
	})
	t.Run("Close stops the idle jails", func(t *testing.T) {
		waitWarm(t, r, 1)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if n := sandbox.WarmIdle(r); n != 0 {
			t.Errorf("%d idle jails after Close", n)
		}
		assertNoCgroupsLeft(t, r)
	})
}

// TestWarmJailsAreSharedFairlyBetweenTenants: tenant a cycles through more
// limit profiles than the pool keeps warm; tenant b's profile still gets a
// warm jail, and keeps it while a goes on cycling (issue #11 §1).
func TestWarmJailsAreSharedFairlyBetweenTenants(t *testing.T) {
	r := newRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
	probe := "async def run(args, context):\n    return {\"ok\": True}\n"
	aSpec := func(i int) sandbox.Spec {
		return sandbox.Spec{TenantID: "a", Source: probe, Limits: sandbox.Limits{TimeoutMS: 5000 + int64(i)*100}.Or(limits.Default)}
	}
	bSpec := sandbox.Spec{TenantID: "b", Source: probe, Limits: sandbox.Limits{MemoryMB: 200}.Or(limits.Default)}
	waitIdleOf := func(spec sandbox.Spec) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for sandbox.WarmIdleOf(r, spec) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("tenant %s's profile got no warm jail within 20s (pool: %v profiles per tenant)", spec.TenantID, sandbox.WarmProfiles(r))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	warmRun := func(spec sandbox.Spec) {
		t.Helper()
		waitIdleOf(spec)
		hits := sandbox.WarmHits(r)
		if res := run(t, r, spec); res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("tenant %s's run was not served warm", spec.TenantID)
		}
	}

	for i := range 10 {
		if res := run(t, r, aSpec(i)); res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
	}
	if res := run(t, r, bSpec); res.Status != sandbox.StatusOK { // cold: registers b's profile
		t.Fatalf("%s", dump(res))
	}
	warmRun(bSpec)
	for i := 10; i < 20; i++ {
		if res := run(t, r, aSpec(i)); res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
	}
	held := sandbox.WarmProfiles(r)
	if held["b"] != 1 || held["a"] < 1 {
		t.Fatalf("warm profiles per tenant after a cycled on: %v, want b 1 and a the rest", held)
	}
	warmRun(bSpec)
	// a's own recent profiles are warm too: it replaced its least recently
	// used ones, not nothing.
	warmRun(aSpec(19))
}
