package containment

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// The gateway's secrets for this test process: one in the environment, one
// in a config file on the host (see TestMain). No jail may ever see them.
var (
	secret           string
	secretConfigFile string
)

const secretEnv = "EXECGATE_CONTAINMENT_SECRET"

// cgroupPrefix names this test binary's parent cgroups, so "nothing left
// behind" can be checked without racing other users of the host.
var cgroupPrefix = fmt.Sprintf("execgate-containment-%d", os.Getpid())

func TestMain(m *testing.M) {
	secret = "eg-secret-" + randomHex(16)
	os.Setenv(secretEnv, secret)
	os.Setenv("EXECGATE_QUOTA_REDIS_URL", "redis://:"+secret+"@127.0.0.1:6379/0")
	dir, err := os.MkdirTemp("", "containment-config-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	secretConfigFile = filepath.Join(dir, "execgate.yaml")
	cfg := "quota:\n  backend: redis\n  redis_url: redis://:" + secret + "@127.0.0.1:6379/0\n"
	if err := os.WriteFile(secretConfigFile, []byte(cfg), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	removeCgroupParents()
	os.Exit(code)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// newRunner returns a runner on the real sandbox (sandboxConfig) whose
// runs live below their own parent cgroup named after group (and the
// runtime, for another than the default).
func newRunner(t *testing.T, group string) (*sandbox.Runner, sandbox.Config) {
	t.Helper()
	cfg := sandboxConfig(t)
	cfg.CgroupParent = cgroupParent(t, group)
	r, err := sandbox.NewRunner(cfg)
	if err != nil {
		t.Fatalf("NewRunner: %v\n%s", err, unavailableDetail(err))
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("closing the runner: %v", err)
		}
	})
	return r, cfg
}

func unavailableDetail(err error) string {
	var ue *sandbox.UnavailableError
	if errors.As(err, &ue) {
		return ue.Detail()
	}
	return ""
}

// job is one tool run.
type job struct {
	tool    string // testdata/<tool>.py
	args    any
	limits  sandbox.Limits
	network sandbox.Network
	tenant  string // default "containment"
	// isolation is the run's level (process_test.go); "" is jail.
	isolation string
}

func source(t *testing.T, tool string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", tool+".py"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// runTool runs a tool through the runner; a jail that cannot be created
// fails the test (the host can jail, or testenv would have skipped).
func runTool(t *testing.T, r *sandbox.Runner, j job) sandbox.Result {
	t.Helper()
	res, err := startTool(t, r, j)()
	if err != nil {
		t.Fatalf("Run %s: %v\n%s", j.tool, err, unavailableDetail(err))
	}
	return res
}

// startTool starts a run in the background; the returned function waits
// for it. Call it from the test goroutine (it must not call t.Fatal).
func startTool(t *testing.T, r *sandbox.Runner, j job) func() (sandbox.Result, error) {
	t.Helper()
	args, err := json.Marshal(j.args)
	if err != nil {
		t.Fatal(err)
	}
	tenant := j.tenant
	if tenant == "" {
		tenant = "containment"
	}
	spec := sandbox.Spec{
		ExecutionID: "containment-" + randomHex(4),
		TenantID:    tenant,
		Source:      source(t, j.tool),
		Entrypoint:  "run",
		Args:        args,
		Network:     j.network,
		// A job names the limits it is about; the rest are the platform's
		// defaults, as the policy would decide them (their times stretched
		// on a slow host: defaultLimits).
		Limits:    j.limits.Or(defaultLimits()),
		Isolation: j.isolation,
	}
	type outcome struct {
		res sandbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := r.Run(ctx, spec)
		done <- outcome{res, err}
	}()
	return func() (sandbox.Result, error) {
		o := <-done
		done <- o
		return o.res, o.err
	}
}

// describe renders a result for failure messages.
func describe(res sandbox.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s", res.Status)
	if res.Error != nil {
		fmt.Fprintf(&b, " error=%s: %s", res.Error.Type, res.Error.Message)
		if res.Error.Traceback != "" {
			fmt.Fprintf(&b, "\ntraceback:\n%s", tailOf(res.Error.Traceback, 2000))
		}
	}
	fmt.Fprintf(&b, "\nusage=%+v truncated=%+v", res.Usage, res.Truncated)
	if len(res.Result) > 0 {
		fmt.Fprintf(&b, "\nresult=%s", tailOf(string(res.Result), 2000))
	}
	if res.Stderr != "" {
		fmt.Fprintf(&b, "\nstderr=%s", tailOf(res.Stderr, 2000))
	}
	if len(res.NsjailLog) > 0 && (res.Error == nil || !strings.Contains(res.Error.Traceback, "Executing")) {
		fmt.Fprintf(&b, "\nnsjail log:\n%s", tailOf(strings.Join(res.NsjailLog, "\n"), 2000))
	}
	return b.String()
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// decode requires an ok run and decodes its result into v.
func decode(t *testing.T, res sandbox.Result, v any) {
	t.Helper()
	if res.Status != sandbox.StatusOK {
		t.Fatalf("tool did not finish: %s", describe(res))
	}
	if err := json.Unmarshal(res.Result, v); err != nil {
		t.Fatalf("decoding result %s: %v", tailOf(string(res.Result), 500), err)
	}
}

// wantError requires the run to end with error type typ.
func wantError(t *testing.T, res sandbox.Result, typ string) {
	t.Helper()
	if res.ErrorType() != typ {
		t.Fatalf("outcome %q, want %q: %s", res.ErrorType(), typ, describe(res))
	}
}

// Errno values (x86_64 Linux).
const (
	EPERM        = int(syscall.EPERM)
	EINVAL       = int(syscall.EINVAL)
	ENOENT       = int(syscall.ENOENT)
	EAGAIN       = int(syscall.EAGAIN)
	EBADF        = int(syscall.EBADF)
	EACCES       = int(syscall.EACCES)
	EBUSY        = int(syscall.EBUSY)
	EFBIG        = int(syscall.EFBIG)
	ENOSPC       = int(syscall.ENOSPC)
	EROFS        = int(syscall.EROFS)
	ENOSYS       = int(syscall.ENOSYS)
	ENOMEM       = int(syscall.ENOMEM)
	ENETUNREACH  = int(syscall.ENETUNREACH)
	ECONNREFUSED = int(syscall.ECONNREFUSED)
)

func errnoName(e int) string {
	if e == 0 {
		return "0 (success)"
	}
	return fmt.Sprintf("%d (%s)", e, syscall.Errno(e).Error())
}

// ---- host-side views of processes and cgroups ----

// hostProcsWith returns the live (non-zombie) host pids whose command line
// contains marker.
func hostProcsWith(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// hostCgroupDirs returns the host directories of the cgroups pid is in.
func hostCgroupDirs(pid int, info sandbox.Info) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if info.CgroupVersion == 2 && parts[0] == "0" {
			dirs = append(dirs, filepath.Join(info.CgroupRoot, parts[2]))
		}
		if info.CgroupVersion == 1 {
			for _, ctrl := range strings.Split(parts[1], ",") {
				if ctrl == "memory" || ctrl == "pids" || ctrl == "cpu" {
					dirs = append(dirs, filepath.Join(info.CgroupRoot, ctrl, parts[2]))
				}
			}
		}
	}
	return dirs
}

// parentCgroupDirs are the host directories of a runner's parent cgroup.
func parentCgroupDirs(info sandbox.Info, parent string) []string {
	if info.CgroupVersion == 2 {
		return []string{filepath.Join(info.CgroupRoot, parent)}
	}
	var dirs []string
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		dirs = append(dirs, filepath.Join(info.CgroupRoot, ctrl, parent))
	}
	return dirs
}

// procsBelow returns every pid in a cgroup at or below dir.
func procsBelow(dir string) []string {
	var procs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err == nil {
			for _, f := range strings.Fields(string(data)) {
				procs = append(procs, p+":"+f)
			}
		}
		return nil
	})
	return procs
}

// assertNoProcessesLeft checks that no process is left in the runner's
// cgroups once its runs have returned.
func assertNoProcessesLeft(t *testing.T, r *sandbox.Runner, cfg sandbox.Config) {
	t.Helper()
	for _, d := range parentCgroupDirs(r.Info(), cfg.CgroupParent) {
		if left := procsBelow(d); len(left) > 0 {
			t.Errorf("processes left in the run cgroups after Run returned: %v", left)
		}
	}
}

// removeCgroupParents removes this binary's parent cgroups (deepest first).
func removeCgroupParents() {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified"} {
		matches, _ := filepath.Glob(filepath.Join(root, cgroupPrefix+"-*"))
		for _, m := range matches {
			var dirs []string
			filepath.WalkDir(m, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				os.Remove(dirs[i])
			}
		}
	}
}

// ---- 1–7: process and kernel limits ----

// defaultLimits are the platform's default limits with the wall and CPU
// times a test leaves at their defaults stretched on a slow host
// (allowance): a default is no limit the test is about.
func defaultLimits() sandbox.Limits {
	d := limits.Default
	d.TimeoutMS = allowance(d.TimeoutMS, limits.Max.TimeoutMS)
	d.CPUMS = allowance(d.CPUMS, limits.Max.CPUMS)
	return d
}

// allowance is a wall or CPU time (ms) a test grants a tool that must get
// somewhere before a limit stops it, stretched on a slow host
// (testenv.TimeScale: the cgroup v2 VM under emulation) and kept within
// the platform's maximum.
func allowance(ms, max int64) int64 {
	return min(ms*int64(testenv.TimeScale()), max)
}

// 1. A busy loop past the wall limit is a Timeout, not a MemoryLimit, and
// neither it nor the child it started survives in any cgroup or on the host.
func TestBusyLoopPastTheWallLimitIsATimeoutAndLeavesNoProcess(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "busy")
	marker := "containment-busy-" + randomHex(8)
	timeout := allowance(1500, limits.Max.TimeoutMS)
	wait := startTool(t, r, job{tool: "busy_loop", args: map[string]any{"marker": marker},
		limits: sandbox.Limits{TimeoutMS: timeout, CPUMS: limits.Max.CPUMS, MemoryMB: 128}})
	// While it runs, find the child on the host and remember its cgroups.
	var cgroups []string
	for deadline := time.Now().Add(10 * time.Second * testenv.TimeScale()); len(cgroups) == 0 && time.Now().Before(deadline); {
		for _, pid := range hostProcsWith(marker) {
			cgroups = append(cgroups, hostCgroupDirs(pid, r.Info())...)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	wantError(t, res, sandbox.ErrTimeout)
	if res.Usage.WallMS < timeout {
		t.Errorf("wall %d ms < the %d ms limit", res.Usage.WallMS, timeout)
	}
	if len(cgroups) == 0 {
		t.Fatalf("never saw the tool's child (marker %s) on the host while it ran", marker)
	}
	if left := hostProcsWith(marker); len(left) > 0 {
		t.Errorf("host processes left after the timeout: %v", left)
	}
	for _, d := range cgroups {
		if left := procsBelow(d); len(left) > 0 {
			t.Errorf("cgroup %s still has processes: %v", d, left)
		}
	}
	assertNoProcessesLeft(t, r, cfg)
}

// 2. CPU burnt past the CPU limit is CPULimit, well before the wall limit,
// whether one process burns it or several together.
func TestCPUBurnPastTheCPULimitIsCPULimit(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "cpu")
	for _, mode := range []string{"single", "processes"} {
		t.Run(mode, func(t *testing.T) {
			res := runTool(t, r, job{tool: "cpu_burn", args: map[string]any{"mode": mode, "processes": 3},
				limits: sandbox.Limits{CPUMS: 500, TimeoutMS: 10000}})
			wantError(t, res, sandbox.ErrCPULimit)
			if res.Usage.WallMS >= 10000 {
				t.Errorf("wall %d ms: the CPU limit did not act before the wall limit", res.Usage.WallMS)
			}
		})
	}
	assertNoProcessesLeft(t, r, cfg)
}

// 3. Memory allocated past the memory limit is MemoryLimit: by one process,
// behind Python's back through ctypes, or by several processes together.
func TestMemoryBombIsMemoryLimit(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "memory")
	for _, tc := range []struct {
		mode string
		args map[string]any
	}{
		{"single", map[string]any{"mode": "single", "mb": 0}},
		{"ctypes", map[string]any{"mode": "ctypes", "mb": 0}},
		{"fork", map[string]any{"mode": "fork", "mb": 40, "processes": 4}},
		{"multiprocessing", map[string]any{"mode": "multiprocessing", "mb": 40, "processes": 4}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			res := runTool(t, r, job{tool: "memory_bomb", args: tc.args,
				limits: sandbox.Limits{MemoryMB: 64, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)}})
			wantError(t, res, sandbox.ErrMemoryLimit)
		})
	}
	assertNoProcessesLeft(t, r, cfg)
}

// 4 and 27. Process creation past the pids limit fails inside with EAGAIN,
// however it is attempted, and the host is unaffected.
func TestProcessCreationPastThePidsLimitFailsWithEAGAIN(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "pids")
	const pids = 16
	for _, mode := range []string{"fork", "subprocess", "ctypes", "multiprocessing"} {
		t.Run(mode, func(t *testing.T) {
			res := runTool(t, r, job{tool: "fork_bomb", args: map[string]any{"mode": mode, "n": 500},
				limits: sandbox.Limits{Pids: pids, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(limits.Default.CPUMS, limits.Max.CPUMS)}})
			var out struct {
				Created int `json:"created"`
				Errno   int `json:"errno"`
			}
			decode(t, res, &out)
			if out.Errno != EAGAIN {
				t.Errorf("process creation stopped with errno %s after %d, want EAGAIN", errnoName(out.Errno), out.Created)
			}
			if out.Created < 1 || out.Created >= pids {
				t.Errorf("created %d processes under a pids limit of %d", out.Created, pids)
			}
		})
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("the host cannot start a process after the fork bombs: %v", err)
	}
	assertNoProcessesLeft(t, r, cfg)
}

// 5. Shared memory (memfd, /dev/shm, multiprocessing.shared_memory, one
// segment or many) cannot grow past the memory and tmpfs caps: the attempt
// fails inside or the run ends in MemoryLimit (a write through a mapping
// past the /dev/shm size is a SIGBUS, reported as MemoryLimit).
func TestSharedMemoryCannotExceedTheCaps(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "shm")
	const memMB, tmpMB, askMB = 64, 16, 160
	for _, mode := range []string{"memfd", "dev_shm", "shared_memory", "shared_memory_many"} {
		t.Run(mode, func(t *testing.T) {
			res := runTool(t, r, job{tool: "shm", args: map[string]any{"mode": mode, "mb": askMB},
				limits: sandbox.Limits{MemoryMB: memMB, TmpMB: tmpMB, TimeoutMS: allowance(20000, limits.Max.TimeoutMS)}})
			if res.ErrorType() == sandbox.ErrMemoryLimit {
				t.Logf("%s: MemoryLimit: %s", mode, res.Error.Message)
				return
			}
			var out struct {
				Written int64  `json:"written"`
				Errno   int    `json:"errno"`
				Where   string `json:"where"`
			}
			decode(t, res, &out)
			if out.Errno == 0 || out.Written >= askMB<<20 {
				t.Fatalf("wrote %d MiB of shared memory under a %d MiB memory limit without an error", out.Written>>20, memMB)
			}
			if out.Written > memMB<<20 {
				t.Errorf("wrote %d MiB before %s failed with %s; the memory limit is %d MiB", out.Written>>20, out.Where, errnoName(out.Errno), memMB)
			}
			t.Logf("%s: stopped at %s after %d MiB with %s", mode, out.Where, out.Written>>20, errnoName(out.Errno))
		})
	}
}

// 6. A segfault or an abort of the interpreter is a clean SandboxCrashed
// envelope naming the signal, and the runner keeps working.
func TestInterpreterCrashIsACleanErrorAndTheRunnerSurvives(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "crash")
	for _, tc := range []struct {
		mode    string
		signals []string
	}{
		{"segfault", []string{"SIGSEGV"}},
		// The harness is PID 1 of the jail's PID namespace, where the kernel
		// drops SIGABRT without a handler; glibc's abort() then ends the
		// process with a faulting instruction, i.e. SIGSEGV.
		{"abort", []string{"SIGABRT", "SIGSEGV"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			res := runTool(t, r, job{tool: "crash", args: map[string]any{"mode": tc.mode}})
			wantError(t, res, sandbox.ErrSandboxCrashed)
			named := false
			for _, s := range tc.signals {
				named = named || strings.Contains(res.Error.Message+res.Error.Traceback, s)
			}
			if !named {
				t.Errorf("crash report names none of %v: %s", tc.signals, describe(res))
			}
		})
	}
	var out map[string]any
	decode(t, runTool(t, r, job{tool: "identity", args: map[string]any{"log_fd": 4}}), &out)
}

// 7. Output floods are cut at the cap without growing the gateway's memory;
// a result over the cap is OutputLimit. Not parallel: it measures this
// process's allocations.
func TestOutputFloodIsTruncatedAndMemoryStaysBounded(t *testing.T) {
	r, _ := newRunner(t, "flood")
	const capBytes = 64 << 10
	const flood = 256 << 20
	for _, stream := range []string{"stdout", "stderr"} {
		t.Run(stream, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res := runTool(t, r, job{tool: "flood", args: map[string]any{"mode": stream, "bytes": flood},
				limits: sandbox.Limits{OutputBytes: capBytes, TimeoutMS: allowance(30000, limits.Max.TimeoutMS), CPUMS: allowance(30000, limits.Max.CPUMS)}})
			runtime.ReadMemStats(&after)
			if res.Status != sandbox.StatusOK {
				t.Fatalf("flooding %s is not an error, the stream is truncated: %s", stream, describe(res))
			}
			got, truncated := len(res.Stdout), res.Truncated.Stdout
			if stream == "stderr" {
				got, truncated = len(res.Stderr), res.Truncated.Stderr
			}
			if !truncated || got > capBytes || got < capBytes/2 {
				t.Errorf("%s: kept %d bytes, truncated=%v; want about %d and truncated", stream, got, truncated, capBytes)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
				t.Errorf("the runner allocated %d MiB while the tool wrote %d MiB to %s; output must be discarded past the cap", grew>>20, flood>>20, stream)
			}
		})
	}
	// Control bytes become six-byte escapes in the envelope: the cap holds
	// for the encoded text, so the gateway never sends six times the cap.
	t.Run("stdout of control bytes", func(t *testing.T) {
		res := runTool(t, r, job{tool: "flood", args: map[string]any{"mode": "stdout", "bytes": 16 << 20, "byte": 1},
			limits: sandbox.Limits{OutputBytes: capBytes, TimeoutMS: allowance(30000, limits.Max.TimeoutMS), CPUMS: allowance(30000, limits.Max.CPUMS)}})
		if res.Status != sandbox.StatusOK || !res.Truncated.Stdout {
			t.Fatalf("want ok and stdout truncated: %s", describe(res))
		}
		enc, _ := json.Marshal(res.Stdout)
		if len(enc) > capBytes+2 || len(enc) < capBytes/2 {
			t.Errorf("stdout encodes to %d bytes (%d kept); want at most the cap of %d and about it", len(enc), len(res.Stdout), capBytes)
		}
	})
	t.Run("result", func(t *testing.T) {
		res := runTool(t, r, job{tool: "flood", args: map[string]any{"mode": "result", "bytes": 4 * capBytes},
			limits: sandbox.Limits{OutputBytes: capBytes}})
		wantError(t, res, sandbox.ErrOutputLimit)
	})
}

// 35. The tool can write on the harness's result channel (fd 3), but what
// it writes there can only make a tool-level outcome: the sandbox types come
// from what the runner reads itself, and win over the channel.
func TestOutcomesTheToolForgesOnTheResultChannel(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "forge")
	for _, typ := range []string{sandbox.ErrTimeout, sandbox.ErrCPULimit, sandbox.ErrMemoryLimit, sandbox.ErrOutputLimit,
		sandbox.ErrSyscallDenied, sandbox.ErrSandboxCrashed, sandbox.ErrProtocolMismatch} {
		t.Run("a forged "+typ+" is the tool's error", func(t *testing.T) {
			t.Parallel()
			res := runTool(t, r, job{tool: "forge", args: map[string]any{"mode": "claim", "type": typ}})
			wantError(t, res, sandbox.ErrToolError)
			if !strings.Contains(res.Error.Message, typ) {
				t.Errorf("the message does not say what the tool claimed: %s", describe(res))
			}
		})
	}
	cases := []struct {
		name   string
		mode   string
		limits sandbox.Limits
		want   string
	}{
		{"an ok envelope, then past the wall limit, is a Timeout", "ok_then_busy_loop",
			sandbox.Limits{TimeoutMS: 1500, CPUMS: 20000}, sandbox.ErrTimeout},
		{"an error envelope, then asleep past the wall limit, is a Timeout", "error_then_sleep",
			sandbox.Limits{TimeoutMS: 1000}, sandbox.ErrTimeout},
		{"an ok envelope, then past the CPU limit, is a CPULimit", "ok_then_busy_loop",
			sandbox.Limits{TimeoutMS: 20000, CPUMS: 700}, sandbox.ErrCPULimit},
		{"an ok envelope, then a segfault, is SandboxCrashed", "ok_then_segfault", sandbox.Limits{}, sandbox.ErrSandboxCrashed},
		{"an ok envelope, then an escape call, is SyscallDenied", "ok_then_escape", sandbox.Limits{}, sandbox.ErrSyscallDenied},
		{"garbage and a clean exit is the tool's error, not a crash", "garbage_then_exit", sandbox.Limits{}, sandbox.ErrToolError},
		{"garbage before the harness's envelope is the tool's error, not a crash", "garbage_then_return", sandbox.Limits{}, sandbox.ErrToolError},
		{"a partial envelope and a clean exit is the tool's error, not a crash", "partial_then_exit", sandbox.Limits{}, sandbox.ErrToolError},
		{"a closed channel is the tool's error, not a crash", "close_channel", sandbox.Limits{}, sandbox.ErrToolError},
		{"more than the cap on the channel is an OutputLimit", "huge", sandbox.Limits{OutputBytes: 64 << 10}, sandbox.ErrOutputLimit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := runTool(t, r, job{tool: "forge", args: map[string]any{"mode": tc.mode}, limits: tc.limits})
			wantError(t, res, tc.want)
			if len(res.Result) > 0 && string(res.Result) != "null" {
				t.Errorf("the forged result reached the caller: %s", res.Result)
			}
		})
	}
}

// ---- 8–11, 19, 27: kernel attack surface ----

// escapeSyscalls are the escape-class calls (tests 8, 36 and 38): each
// must kill the run, reported as SyscallDenied naming the call.
var escapeSyscalls = []escapeCase{
	{"ptrace", nil, "ptrace"},
	{"mount", nil, "mount"},
	{"umount2", nil, "umount2"},
	{"pivot_root", nil, "pivot_root"},
	{"chroot", map[string]any{"name": "raw", "nr": 161, "args": []int{0}}, "chroot"},
	{"open_tree", nil, "open_tree"},
	{"move_mount", map[string]any{"name": "raw", "nr": 429, "args": []int{-1, 0, -1, 0, 0}}, "move_mount"},
	{"fsopen", nil, "fsopen"},
	{"unshare_noop", nil, "unshare"},
	{"setns_badfd", nil, "setns"},
	{"clone", map[string]any{"ns": "user"}, "clone"},
	{"keyctl", nil, "keyctl"},
	{"add_key", nil, "add_key"},
	{"request_key", nil, "request_key"},
	{"bpf", nil, "bpf"},
	{"perf_event_open", nil, "perf_event_open"},
	{"userfaultfd", nil, "userfaultfd"},
	{"io_uring_setup", nil, "io_uring_setup"},
	{"io_uring_enter", map[string]any{"name": "raw", "nr": 426, "args": []int{-1, 0, 0, 0, 0, 0}}, "io_uring_enter"},
	{"kexec_load", nil, "kexec_load"},
	{"kexec_file_load", map[string]any{"name": "raw", "nr": 320, "args": []int{-1, -1, 0, 0, 0}}, "kexec_file_load"},
	{"init_module", nil, "init_module"},
	{"finit_module", nil, "finit_module"},
	{"delete_module", map[string]any{"name": "raw", "nr": 176, "args": []int{0, 0}}, "delete_module"},
	{"process_vm_readv", nil, "process_vm_readv"},
	{"process_vm_writev", nil, "process_vm_writev"},
	{"pidfd_getfd", map[string]any{"name": "raw", "nr": 438, "args": []int{-1, 0, 0}}, "pidfd_getfd"},
	{"open_by_handle_at", map[string]any{"name": "raw", "nr": 304, "args": []int{-1, 0, 0}}, "open_by_handle_at"},
	// KILL_PROCESS, not KILL: a call from a thread ends the whole
	// process instead of leaving the harness waiting on a dead thread.
	{"unshare from a thread", map[string]any{"name": "unshare", "ns": "user", "thread": true}, "unshare"},
	// Any call through the 32-bit entry (int 0x80, its own numbers),
	// whatever it is, and any x86_64 number with the x32 bit set, kills
	// the process (a filter of execgate's own, sandbox/seccomp/abi_linux.go), from
	// the main thread or from a thread.
	{"ia32_unshare", nil, "foreign_arch"},
	{"ia32_getpid", nil, "foreign_arch"},
	{"ia32 getpid from a thread", map[string]any{"name": "ia32_getpid", "thread": true}, "foreign_arch"},
	{"x32 mount", map[string]any{"name": "x32", "call": "mount", "args": []int{1, 1, 1, 0, 0}}, "x32_abi"},
	{"x32 unshare from a thread", map[string]any{"name": "x32", "call": "unshare", "args": []int{0x10000000}, "thread": true}, "x32_abi"},
	{"x32 bpf", map[string]any{"name": "x32", "call": "bpf", "args": []int{-1, 0, 0}}, "x32_abi"},
	{"x32 getpid", map[string]any{"name": "raw", "nr": 0x40000000 | 39}, "x32_abi"},
}

// escapeCase is one call of the syscall tool and the name SyscallDenied
// must give it.
type escapeCase struct {
	name    string
	args    map[string]any
	syscall string
}

// runEscapes runs each case through job and wants SyscallDenied naming its
// call; parallel runs each case in parallel.
func runEscapes(t *testing.T, cases []escapeCase, parallel bool, run func(args map[string]any) sandbox.Result) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			wantSyscallDenied(t, tc.syscall, func() sandbox.Result { return run(syscallArgs(tc.name, tc.args)) })
		})
	}
}

// syscallArgs are the syscall tool's arguments: the call's name and any
// more.
func syscallArgs(name string, more map[string]any) map[string]any {
	args := map[string]any{"name": name}
	for k, v := range more {
		args[k] = v
	}
	return args
}

// 8 and 36. The seccomp deny list, called directly through ctypes: every
// escape-class call (namespaces, mounts, ptrace, bpf, keyrings, io_uring,
// userfaultfd, perf, modules, kexec), any call through the 32-bit entry
// and any call through the x32 ABI kills the run, which is reported as
// SyscallDenied naming the call (or the rule: foreign_arch, x32_abi); the calls libraries probe harmlessly fail
// with EPERM (ENOSYS for clone3 and Linux AIO) and the tool runs on.
func TestSeccompDeniesDangerousSyscalls(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "seccomp")
	runEscapes(t, escapeSyscalls, true, func(args map[string]any) sandbox.Result {
		return runTool(t, r, job{tool: "syscall", args: args})
	})
	probe := []struct {
		name string
		args map[string]any
		want int
	}{
		{"reboot", nil, EPERM},
		{"clone3", nil, ENOSYS},
		{"syslog", map[string]any{"name": "raw", "nr": 103, "args": []int{3, 0, 0}}, EPERM},
		{"settimeofday", map[string]any{"name": "raw", "nr": 164, "args": []int{0, 0}}, EPERM},
		{"personality ADDR_NO_RANDOMIZE", map[string]any{"name": "raw", "nr": 135, "args": []int{0x0040000}}, EPERM},
		{"io_setup", map[string]any{"name": "raw", "nr": 206, "args": []int{1, 0}}, ENOSYS},
	}
	for _, tc := range probe {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := syscallArgs(tc.name, tc.args)
			var out struct {
				Ret   int64 `json:"ret"`
				Errno int   `json:"errno"`
			}
			decode(t, runTool(t, r, job{tool: "syscall", args: args}), &out)
			if out.Ret != -1 || out.Errno != tc.want {
				t.Errorf("%s returned %d, errno %s; want -1 with %s", tc.name, out.Ret, errnoName(out.Errno), errnoName(tc.want))
			}
		})
	}
	// A process the tool started is killed just the same (only the tool
	// sees it: the runner hears of its own child's kill alone).
	t.Run("an escape call in a child process kills the child", func(t *testing.T) {
		t.Parallel()
		var out struct {
			Ret struct {
				Signal int `json:"signal"`
				Exit   int `json:"exit"`
			} `json:"ret"`
		}
		decode(t, runTool(t, r, job{tool: "syscall", args: map[string]any{"name": "unshare", "ns": "user", "child": true}}), &out)
		if out.Ret.Signal != int(syscall.SIGSYS) {
			t.Errorf("the child calling unshare ended with signal %d, exit %d; want SIGSYS", out.Ret.Signal, out.Ret.Exit)
		}
	})
}

// wantSyscallDenied runs a case and wants SyscallDenied naming name, in
// the message and in Result.DeniedSyscall (where this host lets the runner
// read the kernel's seccomp audit records; a run whose record never came
// runs once more: testenv.RunNamingSyscall).
func wantSyscallDenied(t *testing.T, name string, run func() sandbox.Result) {
	t.Helper()
	res := testenv.RunNamingSyscall(t, run)
	wantError(t, res, sandbox.ErrSyscallDenied)
	if err := seccomp.AuditErr(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Errorf("CI=true: the runner cannot read the kernel's seccomp audit records to name the syscall: %v", err)
		} else {
			t.Logf("not checking the syscall's name: %v", err)
		}
		return
	}
	if res.DeniedSyscall != name || !strings.Contains(res.Error.Message, ": "+name+" ") {
		t.Errorf("SyscallDenied names %q (message %q), want %q\n%s", res.DeniedSyscall, res.Error.Message, name, seccomp.AuditReport(16))
	}
}

// 32. Only AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE sockets can be
// created; every other family (AF_VSOCK is not namespaced and reaches the
// hypervisor) kills the run as SyscallDenied, through socket(2) and
// socketpair(2) called directly, with high bits set on the family, from a
// thread, or through Python's socket module.
func TestSocketFamiliesOutsideTheNamespaceAreDenied(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "sockets")
	const (
		afUnix, afInet, afNetlink, afInet6 = 1, 2, 16, 10
		sockStream, sockDgram, sockRaw     = 1, 2, 3
		netlinkRoute, netlinkAudit         = 0, 9
		netlinkKobjectUevent               = 15
	)
	denied := []struct {
		name     string
		family   int
		typ      int
		protocol int
	}{
		{"AF_VSOCK", 40, sockStream, 0},
		{"AF_PACKET", 17, sockRaw, 0},
		{"AF_BLUETOOTH", 31, sockRaw, 0},
		{"AF_ALG", 38, 5, 0}, // SOCK_SEQPACKET
		{"AF_KEY", 15, sockRaw, 2},
		{"AF_XDP", 44, sockRaw, 0},
		{"AF_TIPC", 30, sockDgram, 0},
		{"AF_RDS", 21, 5, 0},
		{"AF_CAN", 29, sockRaw, 1},
		{"AF_APPLETALK", 5, sockDgram, 0},
		{"AF_X25", 9, 5, 0},
		{"AF_NFC", 39, 5, 0},
		{"AF_QIPCRTR", 42, sockDgram, 0},
		{"AF_SMC", 43, sockStream, 0},
		{"AF_KCM", 41, sockDgram, 0},
		{"AF_UNSPEC", 0, sockStream, 0},
		{"AF_NETLINK NETLINK_AUDIT", afNetlink, sockRaw, netlinkAudit},
		{"AF_NETLINK NETLINK_KOBJECT_UEVENT", afNetlink, sockDgram, netlinkKobjectUevent},
		// The kernel reads only the low 32 bits of the family.
		{"AF_VSOCK with high bits set", 1<<32 | 40, sockStream, 0},
		{"AF_NETLINK NETLINK_AUDIT with high bits on the protocol", afNetlink, sockRaw, 1<<32 | netlinkAudit},
	}
	for _, tc := range denied {
		for _, call := range []string{"socket", "socketpair"} {
			t.Run(call+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				wantSyscallDenied(t, call, func() sandbox.Result {
					return runTool(t, r, job{tool: "sockets", args: map[string]any{"call": call, "family": tc.family, "type": tc.typ, "protocol": tc.protocol}})
				})
			})
		}
	}
	for name, args := range map[string]map[string]any{
		"socket AF_VSOCK from a thread":      {"call": "socket", "family": 40, "thread": true},
		"socket.socket(AF_VSOCK) in Python":  {"call": "module", "family": 40},
		"socket.socket(AF_PACKET) in Python": {"call": "module", "family": 17, "type": sockRaw},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantSyscallDenied(t, "socket", func() sandbox.Result { return runTool(t, r, job{tool: "sockets", args: args}) })
		})
	}
	allowed := []struct {
		name string
		args map[string]any
	}{
		{"socket AF_UNIX", map[string]any{"call": "socket", "family": afUnix}},
		{"socketpair AF_UNIX", map[string]any{"call": "socketpair", "family": afUnix}},
		{"socket AF_INET", map[string]any{"call": "socket", "family": afInet}},
		{"socket AF_INET6", map[string]any{"call": "socket", "family": afInet6, "type": sockDgram}},
		{"socket AF_NETLINK NETLINK_ROUTE", map[string]any{"call": "socket", "family": afNetlink, "type": sockRaw, "protocol": netlinkRoute}},
	}
	for _, tc := range allowed {
		t.Run(tc.name+" works", func(t *testing.T) {
			t.Parallel()
			var out struct {
				Ret   int64 `json:"ret"`
				Errno int   `json:"errno"`
			}
			decode(t, runTool(t, r, job{tool: "sockets", args: tc.args}), &out)
			if out.Ret < 0 {
				t.Errorf("%s: ret %d errno %s, want a socket", tc.name, out.Ret, errnoName(out.Errno))
			}
		})
	}
}

// 9 and 36. No process can ptrace another or read another's memory through
// /proc/<pid>/mem: not the tool's child (forked or exec'd), not its parent,
// not pid 1; and no process can make itself dumpable again. Every ptrace
// call kills the caller: the harness's is SyscallDenied naming ptrace, a
// child's ends the child with SIGSYS.
func TestPtraceAndProcMemOfOtherProcessesAreDenied(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "ptrace")
	for _, target := range []string{"child", "seize_child", "init", "exec_child"} {
		t.Run("ptrace of "+target, func(t *testing.T) {
			t.Parallel()
			wantSyscallDenied(t, "ptrace", func() sandbox.Result {
				return runTool(t, r, job{tool: "ptrace", args: map[string]any{"ptrace": target}, limits: sandbox.Limits{TimeoutMS: allowance(20000, limits.Max.TimeoutMS)}})
			})
		})
	}
	type mem struct {
		Read  int `json:"read"`
		Errno int `json:"errno"`
	}
	type dumpable struct {
		Ret   int `json:"ret"`
		Errno int `json:"errno"`
		Now   int `json:"now"`
	}
	var out struct {
		ChildMem  mem `json:"child_mem"`
		FromChild struct {
			ParentMem mem `json:"parent_mem"`
		} `json:"from_child"`
		ChildAttachParentSignal int `json:"child_attach_parent_signal"`
		Exec                    struct {
			ChildMem  mem `json:"child_mem"`
			FromChild struct {
				ParentMem mem `json:"parent_mem"`
			} `json:"from_child"`
		} `json:"exec"`
		SetDumpable         dumpable `json:"set_dumpable"`
		SetDumpableHighBits dumpable `json:"set_dumpable_high_bits"`
	}
	decode(t, runTool(t, r, job{tool: "ptrace", limits: sandbox.Limits{TimeoutMS: allowance(20000, limits.Max.TimeoutMS)}}), &out)
	if out.ChildAttachParentSignal != int(syscall.SIGSYS) {
		t.Errorf("a child's ptrace of its parent ended it with signal %d, want SIGSYS", out.ChildAttachParentSignal)
	}
	// Every process of the jail is non-dumpable (the interpreter is not
	// readable by the tool's uid) and cannot become dumpable again.
	for name, d := range map[string]dumpable{"PR_SET_DUMPABLE": out.SetDumpable, "PR_SET_DUMPABLE with high bits set": out.SetDumpableHighBits} {
		if d.Ret != -1 || d.Errno != EPERM || d.Now != 0 {
			t.Errorf("prctl(%s, 1): ret %d errno %s, dumpable now %d; want EPERM and 0", name, d.Ret, errnoName(d.Errno), d.Now)
		}
	}
	for name, m := range map[string]mem{"parent reads child": out.ChildMem, "child reads parent": out.FromChild.ParentMem,
		"parent reads exec'd child": out.Exec.ChildMem, "exec'd child reads parent": out.Exec.FromChild.ParentMem} {
		if m.Read != 0 || (m.Errno != EPERM && m.Errno != EACCES) {
			t.Errorf("/proc/<pid>/mem, %s: read %d bytes, errno %s; want EACCES or EPERM", name, m.Read, errnoName(m.Errno))
		}
	}
}

// 10. The tool has no capabilities, runs with no_new_privs and a seccomp
// filter, cannot become root, and every mount is nosuid.
func TestNoPrivilegesAndNoWayToGainThem(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "privileges")
	var out struct {
		Cap        map[string]string `json:"cap"`
		NoNewPrivs string            `json:"no_new_privs"`
		Seccomp    string            `json:"seccomp"`
		Setuid0    int               `json:"setuid0"`
		Setgid0    int               `json:"setgid0"`
		Setresuid0 int               `json:"setresuid0"`
		Mounts     []struct {
			Point   string `json:"point"`
			Options string `json:"options"`
		} `json:"mounts"`
	}
	decode(t, runTool(t, r, job{tool: "privileges"}), &out)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if out.Cap[k] != "0000000000000000" {
			t.Errorf("%s = %s, want 0", k, out.Cap[k])
		}
	}
	if out.NoNewPrivs != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", out.NoNewPrivs)
	}
	if out.Seccomp != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter)", out.Seccomp)
	}
	// EINVAL: id 0 is not mapped into the jail's user namespace at all;
	// EPERM: it is, but the caller lacks CAP_SETUID. Either way, no root.
	for name, e := range map[string]int{"setuid(0)": out.Setuid0, "setgid(0)": out.Setgid0, "setresuid(0,0,0)": out.Setresuid0} {
		if e != EINVAL && e != EPERM {
			t.Errorf("%s: errno %s, want EINVAL (0 unmapped) or EPERM", name, errnoName(e))
		}
	}
	if len(out.Mounts) == 0 {
		t.Fatal("no mounts reported")
	}
	for _, m := range out.Mounts {
		if !slices.Contains(strings.Split(m.Options, ","), "nosuid") {
			t.Errorf("mount %s (%s) is not nosuid", m.Point, m.Options)
		}
	}
}

// 11 and 36. No namespace of any kind can be created (unshare, clone) or
// joined: each attempt kills the run as SyscallDenied naming the call.
func TestNestedNamespacesCannotBeCreatedOrJoined(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "userns")
	type tc struct {
		name string
		args map[string]any
	}
	var cases []tc
	for _, ns := range []string{"user", "ns", "net", "pid", "uts", "ipc", "cgroup"} {
		cases = append(cases,
			tc{"unshare " + ns, map[string]any{"name": "unshare", "ns": ns}},
			tc{"clone " + ns, map[string]any{"name": "clone", "ns": ns}})
	}
	for _, ns := range []string{"net", "mnt", "user", "pid"} {
		cases = append(cases, tc{"setns " + ns, map[string]any{"name": "setns", "nsfile": ns}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			wantSyscallDenied(t, c.args["name"].(string), func() sandbox.Result { return runTool(t, r, job{tool: "syscall", args: c.args}) })
		})
	}
}

// 19. cgroupfs is not mounted in the jail and cannot be mounted.
func TestCgroupfsIsNotReachable(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "cgroupfs")
	var out struct {
		SysFsCgroup bool `json:"sys_fs_cgroup"`
		Mounts      []struct {
			Point  string `json:"point"`
			FSType string `json:"fstype"`
		} `json:"mounts"`
	}
	decode(t, runTool(t, r, job{tool: "procfs"}), &out)
	if out.SysFsCgroup {
		t.Error("/sys/fs/cgroup exists inside the jail")
	}
	for _, m := range out.Mounts {
		if strings.HasPrefix(m.FSType, "cgroup") || m.FSType == "sysfs" {
			t.Errorf("%s is mounted at %s inside the jail", m.FSType, m.Point)
		}
	}
	wantSyscallDenied(t, "mount", func() sandbox.Result {
		return runTool(t, r, job{tool: "syscall", args: map[string]any{"name": "mount_cgroup"}})
	})
}

// 27. Raising resource limits is refused by the kernel, not by Python.
func TestResourceLimitsCannotBeRaised(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "rlimit")
	var out struct {
		Ret map[string]string `json:"ret"`
	}
	decode(t, runTool(t, r, job{tool: "syscall", args: map[string]any{"name": "raise_rlimit"}}), &out)
	if len(out.Ret) == 0 {
		t.Fatal("no limits reported")
	}
	for name, outcome := range out.Ret {
		if outcome == "raised" {
			t.Errorf("%s: raised to infinity from inside the jail", name)
		}
	}
	for _, name := range []string{"RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"} {
		if !strings.HasPrefix(out.Ret[name], "refused") {
			t.Errorf("%s: %q, want refused (a finite hard limit)", name, out.Ret[name])
		}
	}
}

// ---- 12–17: filesystem ----

type fsProbe struct {
	Create int `json:"create"`
	Mkdir  int `json:"mkdir"`
	Open   int `json:"open_write"`
	Unlink int `json:"unlink"`
	Rename int `json:"rename"`
	Mount  struct {
		Point string `json:"point"`
		RO    bool   `json:"ro"`
	} `json:"mount"`
}

// 12. System directories and files are read-only mounts: creating anything
// fails with EROFS, files cannot be opened for writing, removed or renamed,
// including the per-file binds of /etc/resolv.conf and /etc/hosts (network
// host), which a read-only parent does not cover.
func TestSystemPathsAreReadOnly(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "readonly")
	m, err := jaillayout.ReadManifest(cfg.RootfsDir)
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{"/", "/etc", "/usr", "/lib", m.Stdlib, "/opt/execgate/deps", "/opt/execgate/harness", "/dev", "/etc/ssl/certs"}
	files := []string{"/etc/resolv.conf", "/etc/hosts", "/etc/passwd", "/usr/bin/python3", "/etc/ssl/certs/ca-certificates.crt"}
	for _, network := range []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkHost} {
		t.Run("network "+string(network), func(t *testing.T) {
			t.Parallel()
			var out map[string]fsProbe
			decode(t, runTool(t, r, job{tool: "filesystem", network: network,
				args: map[string]any{"check": "readonly", "dirs": dirs, "files": files}}), &out)
			for _, d := range dirs {
				p := out[d]
				if p.Create != EROFS || p.Mkdir != EROFS {
					t.Errorf("%s: create %s, mkdir %s; want EROFS", d, errnoName(p.Create), errnoName(p.Mkdir))
				}
				if !p.Mount.RO {
					t.Errorf("%s: its mount %s is not read-only", d, p.Mount.Point)
				}
			}
			for _, f := range files {
				p := out[f]
				if p.Open != EROFS && p.Open != EACCES {
					t.Errorf("%s: open for writing: %s, want EROFS or EACCES", f, errnoName(p.Open))
				}
				if p.Unlink != EROFS && p.Unlink != EBUSY {
					t.Errorf("%s: unlink: %s, want EROFS (or EBUSY for a mount point)", f, errnoName(p.Unlink))
				}
				if p.Rename != EROFS && p.Rename != EBUSY {
					t.Errorf("%s: rename: %s, want EROFS (or EBUSY for a mount point)", f, errnoName(p.Rename))
				}
				if !p.Mount.RO {
					t.Errorf("%s: its mount %s is not read-only", f, p.Mount.Point)
				}
			}
		})
	}
}

// 13. Writable scratch is bounded: one big file stops at the file-size
// limit, many small files at the tmpfs size.
func TestScratchSpaceIsBounded(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "scratch")
	const tmpMB = 8
	var out struct {
		Cap        int64 `json:"cap"`
		Big        int64 `json:"big"`
		BigErrno   int   `json:"big_errno"`
		SmallTotal int64 `json:"small_total"`
		SmallFiles int   `json:"small_files"`
		SmallErrno int   `json:"small_errno"`
	}
	decode(t, runTool(t, r, job{tool: "filesystem", args: map[string]any{"check": "scratch", "tmp_mb": tmpMB},
		limits: sandbox.Limits{TmpMB: tmpMB, MemoryMB: 128}}), &out)
	if out.BigErrno != EFBIG && out.BigErrno != ENOSPC {
		t.Errorf("one big file stopped with %s at %d bytes, want EFBIG or ENOSPC", errnoName(out.BigErrno), out.Big)
	}
	if out.Big > tmpMB<<20 {
		t.Errorf("one big file reached %d bytes, over the %d MiB cap", out.Big, tmpMB)
	}
	if out.SmallErrno != ENOSPC {
		t.Errorf("small files stopped with %s after %d files, want ENOSPC", errnoName(out.SmallErrno), out.SmallFiles)
	}
	if out.SmallTotal > tmpMB<<20 {
		t.Errorf("small files hold %d bytes, over the %d MiB tmpfs", out.SmallTotal, tmpMB)
	}
}

// 14. A symlink made inside the jail to a host path reaches nothing: the
// jail's root is the rootfs, and host paths resolve inside it.
func TestSymlinksCannotReachHostFiles(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "symlink")
	hostFile := filepath.Join(testenv.JailDir(t), "host-secret.txt")
	if err := os.WriteFile(hostFile, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := []string{hostFile, secretConfigFile, "/etc/shadow", "/root/.bashrc",
		filepath.Join(cfg.RootfsDir, "etc", "passwd"), "/proc/1/root" + hostFile, "/proc/self/root" + secretConfigFile}
	var out map[string]json.RawMessage
	decode(t, runTool(t, r, job{tool: "filesystem", args: map[string]any{"check": "symlinks", "targets": targets}}), &out)
	for _, target := range targets {
		var got struct {
			Read  string `json:"read"`
			Errno int    `json:"errno"`
		}
		if err := json.Unmarshal(out[target], &got); err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if got.Errno != ENOENT || got.Read != "" {
			t.Errorf("link to %s: read %q, errno %s; want ENOENT", target, tailOf(got.Read, 80), errnoName(got.Errno))
		}
	}
	var root string
	if err := json.Unmarshal(out["/proc/1/root"], &root); err != nil || root != "/" {
		t.Errorf("/proc/1/root -> %q, want /", root)
	}
}

// 15. Nothing survives between runs: a file written in /tmp by run A (one
// tenant) is absent in run B (another tenant).
func TestNothingSurvivesBetweenRuns(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "residue")
	name := "residue-" + randomHex(6)
	var a struct {
		Tmp []string `json:"tmp"`
	}
	decode(t, runTool(t, r, job{tool: "filesystem", args: map[string]any{"check": "write_marker", "name": name}}), &a)
	if !slices.Contains(a.Tmp, name) {
		t.Fatalf("run A could not write its marker: /tmp = %v", a.Tmp)
	}
	var b struct {
		Exists bool     `json:"exists"`
		Tmp    []string `json:"tmp"`
	}
	decode(t, runTool(t, r, job{tool: "filesystem", tenant: "containment-other",
		args: map[string]any{"check": "read_marker", "name": name}}), &b)
	if b.Exists || slices.Contains(b.Tmp, name) {
		t.Errorf("run B sees run A's /tmp/%s (/tmp = %v)", name, b.Tmp)
	}
}

// 16. Host paths are absent and /etc/passwd is the jail's own.
func TestHostPathsAreAbsent(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "hostpaths")
	paths := []string{"/root", "/home", "/var/lib/redis", "/var/lib/execgate", "/var/run/docker.sock",
		"/sys", "/boot", "/etc/shadow", "/etc/sudoers", "/work", "/usr/local", "/usr/lib/python3/dist-packages",
		cfg.WorkDir, filepath.Dir(cfg.RootfsDir), testenv.RepoRoot(t), filepath.Dir(secretConfigFile)}
	// The jail has a /run of its own (the mount point of brokered secrets,
	// /run/execgate/secrets): none of the host's /run may show in it.
	hostRun, err := os.ReadDir("/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hostRun {
		if e.Name() != "execgate" {
			paths = append(paths, "/run/"+e.Name())
		}
	}
	var out struct {
		Exists map[string]bool `json:"exists"`
		Passwd string          `json:"passwd"`
	}
	decode(t, runTool(t, r, job{tool: "filesystem", args: map[string]any{"check": "host_paths", "paths": paths}}), &out)
	for _, p := range paths {
		if exists, ok := out.Exists[p]; !ok || exists {
			t.Errorf("host path %s is visible in the jail", p)
		}
	}
	jailPasswd, err := os.ReadFile(filepath.Join(cfg.RootfsDir, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Passwd != string(jailPasswd) {
		t.Errorf("/etc/passwd in the jail is not the rootfs's:\n%s", out.Passwd)
	}
	if strings.Contains(out.Passwd, "root:") {
		t.Errorf("/etc/passwd in the jail lists root:\n%s", out.Passwd)
	}
}

// 17. /dev holds only null, zero and urandom (and, at most, the standard
// fd/std* links), plus shm, the jail's own small tmpfs for POSIX shared
// memory (mounted nosuid, nodev, noexec; item 5 bounds it): no kvm, mem,
// block devices or fuse.
func TestDevIsMinimal(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "dev")
	var out struct {
		Entries map[string]struct {
			Kind  string `json:"kind"`
			Major int    `json:"major"`
			Minor int    `json:"minor"`
		} `json:"entries"`
		ZeroOK       bool `json:"zero_ok"`
		UrandomBytes int  `json:"urandom_bytes"`
		Shm          *struct {
			Point   string `json:"point"`
			Options string `json:"options"`
			FSType  string `json:"fstype"`
		} `json:"shm"`
	}
	decode(t, runTool(t, r, job{tool: "filesystem", args: map[string]any{"check": "dev"}}), &out)
	devices := map[string][2]int{"null": {1, 3}, "zero": {1, 5}, "urandom": {1, 9}}
	links := []string{"fd", "stdin", "stdout", "stderr"}
	for name, e := range out.Entries {
		want, isDevice := devices[name]
		switch {
		case isDevice && (e.Kind != "char" || e.Major != want[0] || e.Minor != want[1]):
			t.Errorf("/dev/%s is %s %d:%d, want char %d:%d", name, e.Kind, e.Major, e.Minor, want[0], want[1])
		case name == "shm" && e.Kind == "dir":
		case !isDevice && !(e.Kind == "link" && slices.Contains(links, name)):
			t.Errorf("/dev/%s (%s %d:%d) should not exist in the jail", name, e.Kind, e.Major, e.Minor)
		}
	}
	if s := out.Shm; s == nil || s.Point != "/dev/shm" || s.FSType != "tmpfs" {
		t.Errorf("/dev/shm is not a tmpfs of its own: %+v", out.Shm)
	} else {
		for _, opt := range []string{"nosuid", "nodev", "noexec"} {
			if !slices.Contains(strings.Split(s.Options, ","), opt) {
				t.Errorf("/dev/shm is mounted %s, without %s", s.Options, opt)
			}
		}
	}
	for name := range devices {
		if _, ok := out.Entries[name]; !ok {
			t.Errorf("/dev/%s is missing", name)
		}
	}
	if !out.ZeroOK || out.UrandomBytes != 16 {
		t.Errorf("/dev/zero ok=%v, /dev/urandom gave %d bytes", out.ZeroOK, out.UrandomBytes)
	}
}

// ---- 18, 20–23: /proc, environment, descriptors, ids, secrets ----

// 18. /proc shows only the jail's processes, none of which carries a secret
// in its environ or cmdline; /proc/sys and /proc/sysrq-trigger are not
// writable and /proc/kcore is not readable.
func TestProcHygiene(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "proc")
	var out struct {
		Pids map[string]struct {
			Cmdline string `json:"cmdline"`
			Environ string `json:"environ"`
		} `json:"pids"`
		WriteProcSys int `json:"write_proc_sys"`
		WriteSysrq   int `json:"write_sysrq"`
		ReadKcore    int `json:"read_kcore"`
	}
	decode(t, runTool(t, r, job{tool: "procfs"}), &out)
	if len(out.Pids) == 0 || len(out.Pids) > 3 {
		t.Errorf("the jail sees %d pids, want only its own few: %v", len(out.Pids), out.Pids)
	}
	for pid, p := range out.Pids {
		if !strings.HasPrefix(p.Cmdline, "/usr/bin/python3 ") {
			t.Errorf("pid %s in the jail is not the tool: cmdline %q", pid, p.Cmdline)
		}
		for _, leak := range []string{secret, "EXECGATE_", "REDIS"} {
			if strings.Contains(p.Cmdline, leak) || strings.Contains(p.Environ, leak) {
				t.Errorf("pid %s leaks %q: cmdline %q environ %q", pid, leak, p.Cmdline, p.Environ)
			}
		}
	}
	if out.WriteProcSys == 0 {
		t.Error("/proc/sys/kernel/hostname was writable")
	}
	if out.WriteSysrq == 0 {
		t.Error("/proc/sysrq-trigger was writable")
	}
	if out.ReadKcore == 0 {
		t.Error("/proc/kcore was readable")
	}
}

// jailEnvAllowed is the environment whitelist the sandbox sets (DESIGN §8:
// keep_env false). A new variable must be added here on purpose.
var jailEnvAllowed = []string{"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "MPLBACKEND", "MPLCONFIGDIR"}

// 20–22. The environment is the whitelist only; no descriptor beyond 0–2,
// the result fd 3 and the tool bridge socket 5 is inherited, nsjail's log fd
// is unreachable; the ids map 99999 to the jail's own host uid of
// sandbox.uid_range, never to host root.
func TestEnvironmentDescriptorsAndIDs(t *testing.T) {
	t.Parallel()
	r, cfg := newRunner(t, "identity")
	const nsjailLogFD = 4
	var out struct {
		Environ             map[string]string `json:"environ"`
		InitialEnviron      []string          `json:"initial_environ"`
		InitialEnvironErrno int               `json:"initial_environ_errno"`
		FDs                 map[string]string `json:"fds"`
		WriteLogFD          int               `json:"write_log_fd_errno"`
		UIDMap              string            `json:"uid_map"`
		GIDMap              string            `json:"gid_map"`
		IDs                 []int             `json:"ids"`
		Groups              []int             `json:"groups"`
	}
	// While the tool holds, the host reads the environment the kernel
	// holds for every process of the jail (the process itself may not: it
	// is non-dumpable, item 9).
	wait := startTool(t, r, job{tool: "identity", args: map[string]any{"log_fd": nsjailLogFD, "hold_ms": 1500}})
	hostEnv := map[string][]string{}
	for deadline := time.Now().Add(10 * time.Second); len(hostEnv) == 0 && time.Now().Before(deadline); {
		for _, d := range parentCgroupDirs(r.Info(), cfg.CgroupParent) {
			for _, p := range procsBelow(d) {
				_, pid, _ := strings.Cut(p, ":")
				data, err := os.ReadFile("/proc/" + pid + "/environ")
				if err != nil || len(data) == 0 {
					continue
				}
				if cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline"); !bytes.Contains(cmdline, []byte("harness.py")) {
					continue // nsjail itself, not the jail
				}
				hostEnv[pid] = strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	decode(t, res, &out)
	t.Run("environment is the whitelist", func(t *testing.T) {
		if len(hostEnv) == 0 {
			t.Fatal("never saw the jail's processes from the host while the tool held")
		}
		keysOf := func(kvs []string) []string {
			var keys []string
			for _, kv := range kvs {
				k, _, _ := strings.Cut(kv, "=")
				keys = append(keys, k)
			}
			return keys
		}
		lists := [][]string{mapKeys(out.Environ), keysOf(out.InitialEnviron)}
		for _, kvs := range hostEnv {
			lists = append(lists, keysOf(kvs))
			for _, kv := range kvs {
				if strings.Contains(kv, secret) {
					t.Errorf("the jail's environment carries the gateway's secret: %s", kv)
				}
			}
		}
		for _, keys := range lists {
			for _, k := range keys {
				if !slices.Contains(jailEnvAllowed, k) {
					t.Errorf("variable %s is not on the whitelist %v", k, jailEnvAllowed)
				}
			}
		}
		for k, v := range out.Environ {
			if strings.Contains(v, secret) {
				t.Errorf("%s carries the gateway's secret", k)
			}
		}
		if out.InitialEnviron == nil && out.InitialEnvironErrno != EACCES {
			t.Errorf("reading /proc/1/environ inside: %s, want it readable or EACCES (non-dumpable)", errnoName(out.InitialEnvironErrno))
		}
	})
	t.Run("only descriptors 0-3 and the tool bridge 5 are open", func(t *testing.T) {
		for fd := range out.FDs {
			if !slices.Contains([]string{"0", "1", "2", "3", "5"}, fd) {
				t.Errorf("fd %s (%s) is open in the tool", fd, out.FDs[fd])
			}
		}
		if out.FDs["3"] != "fifo" {
			t.Errorf("fd 3 is %q, want the result pipe", out.FDs["3"])
		}
		if out.FDs["5"] != "sock" {
			t.Errorf("fd 5 is %q, want the tool bridge socket", out.FDs["5"])
		}
		if out.WriteLogFD != EBADF {
			t.Errorf("writing to nsjail's log fd %d: %s, want EBADF", nsjailLogFD, errnoName(out.WriteLogFD))
		}
	})
	t.Run("ids map 99999 to a host uid of the range", func(t *testing.T) {
		lo, hi, err := sandbox.ParseUIDRange(sandbox.DefaultUIDRange)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(out.UIDMap)
		host, _ := strconv.ParseUint(f[min(1, len(f)-1)], 10, 32)
		if len(f) != 3 || f[0] != "99999" || f[2] != "1" || host < uint64(lo) || host > uint64(hi) {
			t.Errorf("uid_map = %q, want 99999 <host uid in %s> 1", out.UIDMap, sandbox.DefaultUIDRange)
		}
		if g := strings.Fields(out.GIDMap); !slices.Equal(g, []string{"99999", strconv.FormatUint(host, 10), "1"}) {
			t.Errorf("gid_map = %q, want 99999 %d 1", out.GIDMap, host)
		}
		for _, id := range out.IDs {
			if id != 99999 {
				t.Errorf("ids = %v, want all 99999", out.IDs)
				break
			}
		}
		for _, g := range out.Groups {
			if g != 99999 {
				t.Errorf("supplementary groups = %v", out.Groups)
			}
		}
	})
}

func mapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// 23. A secret in the gateway's environment and config file is not
// findable by reading every readable file and every /proc/*/environ and
// cmdline in the jail; a control token the tool writes itself is found.
func TestGatewaySecretIsNotFindableInTheJail(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "secret")
	key := randomHex(len(secret))
	control := "eg-control-" + randomHex(8)
	mask := func(s string) string {
		k, _ := hex.DecodeString(key)
		out := make([]byte, len(s))
		for i := range s {
			out[i] = s[i] ^ k[i]
		}
		return hex.EncodeToString(out)
	}
	var out struct {
		Found struct {
			Secret  []string `json:"secret"`
			Control []string `json:"control"`
		} `json:"found"`
		Files      int   `json:"files"`
		Bytes      int64 `json:"bytes"`
		Unreadable int   `json:"unreadable"`
		Procs      int   `json:"procs"`
	}
	decode(t, runTool(t, r, job{tool: "secret_scan",
		args:   map[string]any{"secret": mask(secret), "control": mask(control), "key": key},
		limits: sandbox.Limits{TimeoutMS: 60000, CPUMS: 60000, MemoryMB: 256}}), &out)
	if len(out.Found.Secret) > 0 {
		t.Errorf("the gateway's secret is readable inside the jail at %v", out.Found.Secret)
	}
	if !slices.Contains(out.Found.Control, "/tmp/control.txt") {
		t.Errorf("the scan did not find its own control token (found at %v): it is not looking", out.Found.Control)
	}
	if out.Files < 1000 || out.Procs < 1 {
		t.Errorf("the scan read only %d files and %d processes", out.Files, out.Procs)
	}
	t.Logf("scanned %d files (%d MiB) and %d processes; %d unreadable", out.Files, out.Bytes>>20, out.Procs, out.Unreadable)
}

// ---- 24: network none ----

type netAttempt struct {
	OK    bool   `json:"ok"`
	Errno int    `json:"errno"`
	Error string `json:"error"`
}

// 24. Network none: only lo exists; DNS, TCP, UDP, ICMP, IPv6 and raw
// sockets fail; the host's loopback listeners (standing in for the gateway
// and Redis) receive nothing.
func TestNetworkNoneReachesNothing(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "network")
	tcpLn, accepted := listenLoopback(t)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	port := tcpLn.Addr().(*net.TCPAddr).Port
	var out struct {
		Interfaces []string   `json:"interfaces"`
		IPv4Routes [][]string `json:"ipv4_routes"`
		IPv6Routes [][]string `json:"ipv6_routes"`
		DNS        netAttempt `json:"dns"`
		TCPHost    netAttempt `json:"tcp_host_loopback"`
		TCPPublic  netAttempt `json:"tcp_public"`
		UDPPublic  netAttempt `json:"udp_public"`
		UDPHost    netAttempt `json:"udp_host_loopback"`
		TCP6Public netAttempt `json:"tcp6_public"`
		TCP6Host   netAttempt `json:"tcp6_host_loopback"`
		ICMP       netAttempt `json:"icmp"`
		Raw        netAttempt `json:"raw"`
		Raw6       netAttempt `json:"raw6"`
	}
	decode(t, runTool(t, r, job{tool: "network", network: sandbox.NetworkNone,
		args: map[string]any{"tcp_port": port, "udp_port": udp.LocalAddr().(*net.UDPAddr).Port}}), &out)

	if !slices.Equal(out.Interfaces, []string{"lo"}) {
		t.Errorf("interfaces = %v, want only lo", out.Interfaces)
	}
	if len(out.IPv4Routes) > 0 || len(out.IPv6Routes) > 0 {
		t.Errorf("routes besides lo: ipv4 %v ipv6 %v", out.IPv4Routes, out.IPv6Routes)
	}
	if out.DNS.OK {
		t.Error("DNS resolved example.com")
	}
	requireRefused(t, map[string]refusal{
		"TCP to the host's 127.0.0.1 listener": {out.TCPHost, []int{ECONNREFUSED}},
		"TCP to 192.0.2.1":                     {out.TCPPublic, []int{ENETUNREACH}},
		"UDP to 192.0.2.1":                     {out.UDPPublic, []int{ENETUNREACH}},
		"TCP to 2001:db8::1":                   {out.TCP6Public, []int{ENETUNREACH}},
		"TCP to the host's ::1":                {out.TCP6Host, []int{ECONNREFUSED, int(syscall.EADDRNOTAVAIL)}},
		"ICMP ping socket":                     {out.ICMP, []int{EACCES, EPERM}},
		"raw IPv4 socket":                      {out.Raw, []int{EPERM}},
		"raw IPv6 socket":                      {out.Raw6, []int{EPERM}},
		// Packet sockets and every other family outside the network
		// namespace kill the run: TestSocketFamiliesOutsideTheNamespaceAreDenied.
	})
	// The datagram to 127.0.0.1 may leave the socket (the jail has its own
	// lo); it must not arrive on the host's.
	requireHostUnreached(t, udp, tcpLn, accepted, "the host's TCP listener")
}

// refusal is what a jailed network attempt got and the errnos it may be
// refused with.
type refusal struct {
	got  netAttempt
	want []int
}

// requireRefused fails for every attempt that succeeded or failed with an
// errno other than those it may be refused with.
func requireRefused(t *testing.T, attempts map[string]refusal) {
	t.Helper()
	for name, tc := range attempts {
		if tc.got.OK || !slices.Contains(tc.want, tc.got.Errno) {
			t.Errorf("%s: ok=%v %s (%s), want it refused with %v", name, tc.got.OK, errnoName(tc.got.Errno), tc.got.Error, tc.want)
		}
	}
}

// requireHostUnreached fails when the host's UDP socket received a datagram
// (waiting 100 ms) or the host's TCP listener ln (named what) accepted a
// connection; it closes ln.
func requireHostUnreached(t *testing.T, udp net.PacketConn, ln net.Listener, accepted <-chan net.Conn, what string) {
	t.Helper()
	udp.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 64)
	if n, from, err := udp.ReadFrom(buf); err == nil {
		t.Errorf("the host's UDP listener received %q from %v", buf[:n], from)
	}
	ln.Close()
	for c := range accepted {
		t.Errorf("%s accepted a connection from %v", what, c.RemoteAddr())
		c.Close()
	}
}

// ---- 25–26: network proxy ----

// proxyResolver is the egress proxy's resolver in the proxy test: test
// names only, nothing reaches real DNS.
type proxyResolver map[string]string

func (f proxyResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// recordingDialer dials only the one backend the test opened and refuses,
// after recording it, every other address: no packet ever goes to a
// private, link-local or public address.
type recordingDialer struct {
	allow string

	mu     sync.Mutex // guards dialed
	dialed []string
}

func (d *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	d.mu.Unlock()
	if addr != d.allow {
		return nil, fmt.Errorf("test dialer: refusing %s", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *recordingDialer) seen() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// proxyWorld is what a network-proxy test runs against: a backend on the
// host's loopback (port) the allow-list can name, a listener (other) and a
// UDP socket the jail must not reach, and a runner whose egress proxy
// resolves the test names (api.test, other.test to 127.0.0.1;
// metadata.test to 169.254.169.254; private.test to 10.0.0.1) and dials
// only the backend (dialer records every address asked for).
type proxyWorld struct {
	r               *sandbox.Runner
	dialer          *recordingDialer
	port, otherPort int
	other           net.Listener
	otherAccepted   <-chan net.Conn
	udp             net.PacketConn
}

func newProxyWorld(t *testing.T, group string, backend http.HandlerFunc) *proxyWorld {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: backend}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	w := &proxyWorld{port: ln.Addr().(*net.TCPAddr).Port}
	w.other, w.otherAccepted = listenLoopback(t)
	w.otherPort = w.other.Addr().(*net.TCPAddr).Port
	if w.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.udp.Close() })
	w.dialer = &recordingDialer{allow: fmt.Sprintf("127.0.0.1:%d", w.port)}
	proxy, err := egress.New(egress.Config{AllowCIDRs: []string{"127.0.0.1/32"}}, egress.Options{
		Resolver: proxyResolver{"api.test": "127.0.0.1", "other.test": "127.0.0.1",
			"metadata.test": "169.254.169.254", "private.test": "10.0.0.1"},
		Dial: w.dialer.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandboxConfig(t)
	cfg.CgroupParent = cgroupParent(t, group)
	cfg.WorkDir = testenv.JailDir(t) // the egress socket is bound from below it
	if w.r, err = sandbox.NewRunner(cfg, sandbox.WithEgress(proxy)); err != nil {
		t.Fatalf("NewRunner: %v\n%s", err, unavailableDetail(err))
	}
	t.Cleanup(func() { w.r.Close() })
	return w
}

// 25–26. Network proxy: the run's egress proxy is the only way out. An
// allow-listed host works, through plain HTTP and CONNECT; a host, port or
// IP literal off the list, and names resolving to metadata or private
// addresses, are refused with 403 (the tool sees the refusal, never a fake
// success) and recorded as denied, the refused addresses never dialled;
// direct TCP (the host's loopback, public, metadata addresses), DNS and UDP
// from inside reach nothing.
func TestNetworkProxyAllowsOnlyTheAllowList(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex // guards paths
	var paths []string
	w := newProxyWorld(t, "proxy", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		fmt.Fprintf(w, "backend says hello at %s", r.URL.Path)
	})
	r, dialer, port, otherPort, udp, other, otherAccepted := w.r, w.dialer, w.port, w.otherPort, w.udp, w.other, w.otherAccepted

	args, _ := json.Marshal(map[string]any{"port": port, "other_port": otherPort, "udp_port": udp.LocalAddr().(*net.UDPAddr).Port})
	res, err := r.Run(context.Background(), sandbox.Spec{
		ExecutionID: "containment-proxy-" + randomHex(4), TenantID: "containment",
		Source: source(t, "proxy"), Args: args, Network: sandbox.NetworkProxy,
		EgressAllow: []string{fmt.Sprintf("api.test:%d", port), "metadata.test:80", fmt.Sprintf("private.test:%d", port)},
		Limits:      sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000}.Or(limits.Default),
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	type fetch struct {
		OK     bool   `json:"ok"`
		Status int    `json:"status"`
		Body   string `json:"body"`
		Error  string `json:"error"`
	}
	type tunnel struct {
		netAttempt
		Out struct {
			Status   string `json:"status"`
			Response string `json:"response"`
		} `json:"out"`
	}
	var out struct {
		Env                  map[string]string `json:"env"`
		Interfaces           []string          `json:"interfaces"`
		Allowed              fetch             `json:"allowed"`
		AllowedTunnel        tunnel            `json:"allowed_tunnel"`
		NotAllowedHost       fetch             `json:"not_allowed_host"`
		NotAllowedHostTunnel tunnel            `json:"not_allowed_host_tunnel"`
		NotAllowedPort       fetch             `json:"not_allowed_port"`
		IPThroughProxy       fetch             `json:"ip_through_proxy"`
		Metadata             fetch             `json:"metadata"`
		Private              fetch             `json:"private"`
		DirectHost           netAttempt        `json:"direct_tcp_host_loopback"`
		DirectPublic         netAttempt        `json:"direct_tcp_public"`
		DirectMetadata       netAttempt        `json:"direct_tcp_metadata"`
		DNS                  netAttempt        `json:"dns"`
		UDPDNS               netAttempt        `json:"udp_dns"`
		UDPHost              netAttempt        `json:"udp_host_loopback"`
	}
	decode(t, res, &out)

	t.Run("the proxy is the environment's only way out", func(t *testing.T) {
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			if out.Env[k] != "http://127.0.0.1:3128" {
				t.Errorf("%s = %q", k, out.Env[k])
			}
		}
		if v, ok := out.Env["NO_PROXY"]; !ok || v != "" {
			t.Errorf("NO_PROXY = %q (set: %t), want set and empty", v, ok)
		}
		if !slices.Equal(out.Interfaces, []string{"lo"}) {
			t.Errorf("interfaces = %v, want only lo", out.Interfaces)
		}
	})
	t.Run("an allow-listed host works over HTTP and CONNECT", func(t *testing.T) {
		if !out.Allowed.OK || out.Allowed.Status != 200 || !strings.Contains(out.Allowed.Body, "/allowed") {
			t.Errorf("allowed host over HTTP: %+v", out.Allowed)
		}
		if !strings.Contains(out.AllowedTunnel.Out.Status, " 200 ") || !strings.Contains(out.AllowedTunnel.Out.Response, "hello at /tunnel") {
			t.Errorf("allowed host over CONNECT: %+v", out.AllowedTunnel)
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(paths, []string{"/allowed", "/tunnel"}) {
			t.Errorf("the backend served %v, want exactly /allowed and /tunnel", paths)
		}
	})
	t.Run("refusals are reported to the tool as refusals", func(t *testing.T) {
		for name, f := range map[string]fetch{"a host off the list": out.NotAllowedHost, "a port off the list": out.NotAllowedPort,
			"an IP literal": out.IPThroughProxy, "a name resolving to the metadata address": out.Metadata,
			"a name resolving to a private address": out.Private} {
			if f.OK || f.Status != http.StatusForbidden || !strings.Contains(f.Error, "execgate egress") {
				t.Errorf("%s: %+v, want HTTP 403 from the egress proxy", name, f)
			}
		}
		if !strings.Contains(out.Metadata.Error, "169.254.0.0/16") || !strings.Contains(out.Private.Error, "10.0.0.0/8") {
			t.Errorf("the refusals do not name the denied ranges: %q, %q", out.Metadata.Error, out.Private.Error)
		}
		if s := out.NotAllowedHostTunnel.Out.Status; !strings.Contains(s, " 403 ") {
			t.Errorf("CONNECT to a host off the list answered %q, want 403", s)
		}
	})
	t.Run("every attempt is recorded, the refused ones as denied", func(t *testing.T) {
		testenv.CheckEgress(t, res.Egress, map[testenv.EgressKey]int{
			{Host: "api.test", Port: port, Allowed: true}:          2,
			{Host: "other.test", Port: port, Allowed: false}:       2,
			{Host: "api.test", Port: otherPort, Allowed: false}:    1,
			{Host: "127.0.0.1", Port: port, Allowed: false}:        1,
			{Host: "metadata.test", Port: 80, Allowed: false}:      1,
			{Host: "private.test", Port: port, Allowed: false}:     1,
			{Host: "api.test", Port: port, Allowed: false}:         0,
			{Host: "metadata.test", Port: 80, Allowed: true}:       0,
			{Host: "other.test", Port: port, Allowed: true}:        0,
			{Host: "private.test", Port: port, Allowed: true}:      0,
			{Host: "127.0.0.1", Port: otherPort, Allowed: false}:   0,
			{Host: "api.test", Port: otherPort, Allowed: true}:     0,
			{Host: "127.0.0.1", Port: port, Allowed: true}:         0,
			{Host: "169.254.169.254", Port: 80, Allowed: true}:     0,
			{Host: "169.254.169.254", Port: 80, Allowed: false}:    0,
			{Host: "private.test", Port: otherPort, Allowed: true}: 0,
		})
		for _, addr := range dialer.seen() {
			if addr != dialer.allow {
				t.Errorf("the proxy dialled %s, which policy refused", addr)
			}
		}
	})
	t.Run("direct connections, DNS and UDP reach nothing", func(t *testing.T) {
		requireRefused(t, map[string]refusal{
			"TCP to the host's 127.0.0.1 backend": {out.DirectHost, []int{ECONNREFUSED}},
			"TCP to 192.0.2.1":                    {out.DirectPublic, []int{ENETUNREACH}},
			"TCP to 169.254.169.254":              {out.DirectMetadata, []int{ENETUNREACH}},
			"UDP to 192.0.2.1:53":                 {out.UDPDNS, []int{ENETUNREACH}},
		})
		if out.DNS.OK {
			t.Errorf("api.test resolved inside the jail: %+v", out.DNS)
		}
		requireHostUnreached(t, udp, other, otherAccepted, "the host's listener on the port off the list")
	})
}

// listenLoopback opens a TCP listener on the host's 127.0.0.1 that a jail
// must not reach, and hands every connection it accepts to the channel,
// which is closed once the listener is (at test cleanup).
func listenLoopback(t *testing.T) (net.Listener, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	return ln, accepted
}

// 37. Per-user kernel limits are per jail: each live jail runs as a host uid
// of its own, which also owns the jail's user namespace, so one tenant
// holding every inotify instance, message queue byte and process its jail
// may have leaves another tenant's concurrent run (and the host's root)
// untouched.
func TestPerUserKernelLimitsArePerJail(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "per-user")
	wait := startTool(t, r, job{tool: "per_user_limits", tenant: "tenant-a",
		args:   map[string]any{"mode": "hold", "hold_ms": 8000},
		limits: sandbox.Limits{TimeoutMS: allowance(30000, limits.Max.TimeoutMS), CPUMS: allowance(30000, limits.Max.CPUMS)}})
	// Wait until tenant A holds them (its tool renames itself then).
	for deadline := time.Now().Add(20 * time.Second); !processNamed("eg-limits-hold"); {
		if time.Now().After(deadline) {
			res, err := wait()
			t.Fatalf("tenant A never got to hold its limits: %v\n%s", err, describe(res))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
	var probe struct {
		Inotify string `json:"inotify_init"`
		MQ      string `json:"mq_open"`
		Fork    string `json:"fork"`
	}
	decode(t, runTool(t, r, job{tool: "per_user_limits", tenant: "tenant-b", args: map[string]any{"mode": "probe"}}), &probe)
	if probe.Inotify != "ok" || probe.MQ != "ok" || probe.Fork != "ok" {
		t.Errorf("tenant B while A holds its limits: inotify_init %s, mq_open %s, fork %s; want ok for each", probe.Inotify, probe.MQ, probe.Fork)
	}
	if fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC); err != nil {
		t.Errorf("host root's inotify_init while a jail holds its instances: %v", err)
	} else {
		syscall.Close(fd)
	}
	var held struct {
		Held map[string]int    `json:"held"`
		Ends map[string]string `json:"ends"`
	}
	res, err := wait()
	if err != nil {
		t.Fatalf("tenant A's run: %v", err)
	}
	decode(t, res, &held)
	// A really held them: it ran into its own limits, not a short count.
	if held.Ends["inotify"] != "EMFILE" || held.Held["inotify"] == 0 || held.Ends["procs"] != "EAGAIN" {
		t.Errorf("tenant A held %v, ending with %v; want it stopped by EMFILE (inotify) and EAGAIN (processes)", held.Held, held.Ends)
	}
	t.Logf("tenant A held %v (ended with %v)", held.Held, held.Ends)
}

// processNamed reports whether a host process has comm as its name.
func processNamed(comm string) bool {
	paths, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == comm {
			return true
		}
	}
	return false
}
