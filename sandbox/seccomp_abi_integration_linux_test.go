package sandbox_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// The x32 and foreign-architecture rules (sandbox/seccomp/abi_linux.go), at both
// levels: read back from the kernel for a live run, and through the runner.

// x32Bit is __X32_SYSCALL_BIT.
const x32Bit = 0x40000000

// abiLevels are the isolation levels the rules hold at, each with how a
// run is started there.
var abiLevels = []struct {
	name string
	spec func(sandbox.Spec) sandbox.Spec
}{
	{"jail", func(s sandbox.Spec) sandbox.Spec { return s }},
	{"process", func(s sandbox.Spec) sandbox.Spec {
		s.Isolation, s.TenantID = sandbox.IsolationProcess, "t1"
		return s
	}},
}

// namedTool names its thread after args["marker"] (so the host can find its
// pid) and waits until the run is cancelled.
const namedTool = `import ctypes, time

def run(args, context):
    ctypes.CDLL(None).prctl(15, args["marker"].encode(), 0, 0, 0)  # PR_SET_NAME
    time.sleep(60)
`

// TestSeccompInstalledFiltersKillX32AndForeignArch reads every seccomp
// filter of a live run's tool thread back from the kernel
// (PTRACE_SECCOMP_GET_FILTER), runs them as the kernel does (each filter,
// strictest answer wins) and checks both rules: any call through the
// 32-bit entry and any x86_64 number with the x32 bit set end in
// SECCOMP_RET_KILL_PROCESS, not KILL_THREAD and never ALLOW.
func TestSeccompInstalledFiltersKillX32AndForeignArch(t *testing.T) {
	r := newRunner(t, nil)
	for _, level := range abiLevels {
		t.Run(level.name, func(t *testing.T) {
			marker := fmt.Sprintf("eg%d-%.4s", os.Getpid()%100000, level.name) // comm holds 15 bytes
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				spec := level.spec(sandbox.Spec{Source: namedTool, Args: json.RawMessage(`{"marker": "` + marker + `"}`),
					Limits: limits.Limits{TimeoutMS: 60_000}.Or(limits.Default)})
				_, err := r.Run(ctx, spec)
				done <- err
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
					t.Logf("the held run: %v", err)
				}
			}()
			tid := waitForThread(t, marker, done)
			count := seccompFilterCount(t, tid)
			t.Logf("the tool thread (host tid %d) has %d seccomp filters", tid, count)
			filters, err := seccompFilters(tid)
			if err != nil {
				t.Fatalf("reading the filters of tid %d back: %v", tid, err)
			}
			if len(filters) != count {
				t.Fatalf("read %d filters, /proc says %d", len(filters), count)
			}
			// The policy itself, so a verdict of ALLOW for everything
			// cannot pass: x86_64 mount kills, getpid runs.
			wantVerdict(t, filters, "x86_64 mount", unix.AUDIT_ARCH_X86_64, 165, unix.SECCOMP_RET_KILL_PROCESS)
			wantVerdict(t, filters, "x86_64 getpid", unix.AUDIT_ARCH_X86_64, 39, unix.SECCOMP_RET_ALLOW)
			// Every escape-class number, every allowed one and the odd
			// ones, with the x32 bit set.
			for _, nr := range []uint32{165, 272, 321, 425, 250, 101, 56, 41, 0, 1, 39, 60, 231, 512, 547, 0x3fffffff, 0x7fffffff, 0xffffffff} {
				wantVerdict(t, filters, fmt.Sprintf("x32 %#x", nr|x32Bit), unix.AUDIT_ARCH_X86_64, nr|x32Bit, unix.SECCOMP_RET_KILL_PROCESS)
			}
			// The 32-bit entry: i386 getpid (20), unshare (310), mount
			// (21), socketcall (102), and x86_64's numbers.
			for _, nr := range []uint32{20, 310, 21, 102, 0, 39, 165} {
				wantVerdict(t, filters, fmt.Sprintf("i386 %d", nr), unix.AUDIT_ARCH_I386, nr, unix.SECCOMP_RET_KILL_PROCESS)
			}
			// Any other architecture the kernel could report.
			wantVerdict(t, filters, "aarch64 getpid", unix.AUDIT_ARCH_AARCH64, 172, unix.SECCOMP_RET_KILL_PROCESS)
			// Each layer holds both rules on its own: the oldest filter
			// (execgate's, under nsjail) and, at level process, the
			// newest (the run's own, execgate_zygote.py).
			layers := map[string][][]bpf.RawInstruction{"the filter under nsjail": filters[:1]}
			if level.name == "process" {
				layers["the run's own filter"] = filters[len(filters)-1:]
			}
			for name, layer := range layers {
				wantVerdict(t, layer, name+": x32 mount", unix.AUDIT_ARCH_X86_64, 165|x32Bit, unix.SECCOMP_RET_KILL_PROCESS)
				wantVerdict(t, layer, name+": x32 getpid", unix.AUDIT_ARCH_X86_64, 39|x32Bit, unix.SECCOMP_RET_KILL_PROCESS)
				wantVerdict(t, layer, name+": i386 getpid", unix.AUDIT_ARCH_I386, 20, unix.SECCOMP_RET_KILL_PROCESS)
			}
			if t.Failed() {
				for i, f := range filters {
					t.Logf("filter %d (0 is the oldest):\n%s", i, disassemble(f))
				}
			}
		})
	}
}

// abiCallTool makes one call through the x32 ABI (libc's syscall(2) with
// the x32 bit) or the 32-bit entry (int 0x80, from mapped machine code),
// from the main thread or from a thread it waits 2 s for: a kill of the
// calling thread alone returns normally.
const abiCallTool = `import ctypes, mmap, threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def x32(nr):
    return libc.syscall(ctypes.c_long(0x40000000 | nr), *[ctypes.c_long(0)] * 5)

def ia32(nr):
    # push rbx; mov eax, nr; xor ebx, ebx; int 0x80; pop rbx; ret
    code = b"\x53\xb8" + nr.to_bytes(4, "little") + b"\x31\xdb\xcd\x80\x5b\xc3"
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()

def run(args, context):
    call = {"x32": x32, "ia32": ia32}[args["abi"]]
    if not args["thread"]:
        return {"ret": call(args["nr"]), "errno": ctypes.get_errno()}
    out = []
    t = threading.Thread(target=lambda: out.append(call(args["nr"])), daemon=True)
    t.start()
    t.join(2)
    return {"ret": out, "thread_alive": t.is_alive()}
`

// TestSeccompKillsX32AndForeignArchCallsAtEveryLevel makes the calls
// through the real runner: each run ends SyscallDenied naming the rule,
// never ok, from the main thread and from a thread.
func TestSeccompKillsX32AndForeignArchCallsAtEveryLevel(t *testing.T) {
	r := newRunner(t, nil)
	cases := []struct {
		name, abi string
		nr        int
		want      string
	}{
		{"x32 mount", "x32", 165, "x32_abi"},
		{"x32 getpid", "x32", 39, "x32_abi"},
		{"int 0x80 getpid", "ia32", 20, "foreign_arch"},
		{"int 0x80 unshare", "ia32", 310, "foreign_arch"},
	}
	for _, level := range abiLevels {
		for _, tc := range cases {
			for _, thread := range []bool{false, true} {
				name := level.name + "/" + tc.name
				if thread {
					name += " from a thread"
				}
				t.Run(name, func(t *testing.T) {
					res := testenv.RunNamingSyscall(t, func() sandbox.Result {
						res, err := r.Run(context.Background(), level.spec(sandbox.Spec{Source: abiCallTool,
							Args: json.RawMessage(fmt.Sprintf(`{"abi": %q, "nr": %d, "thread": %t}`, tc.abi, tc.nr, thread)), Limits: limits.Default}))
						if err != nil {
							t.Fatalf("Run: %v", err)
						}
						if res.Status == sandbox.StatusOK || res.ErrorType() != sandbox.ErrSyscallDenied {
							t.Fatalf("the run ended %s %s (result %s), want SyscallDenied\n%s", res.Status, res.ErrorType(), res.Result, dump(res))
						}
						return res
					})
					if err := seccomp.AuditErr(); err != nil {
						t.Logf("not checking the rule's name: %v", err)
						return
					}
					if res.DeniedSyscall != tc.want || !strings.Contains(res.Error.Message, ": "+tc.want+" ") {
						t.Errorf("SyscallDenied names %q (message %q), want %q\n%s", res.DeniedSyscall, res.Error.Message, tc.want, seccomp.AuditReport(16))
					}
				})
			}
		}
	}
}

// waitForThread returns the host tid of the thread named marker, failing
// if the run ends (done) or 60 s pass first.
func waitForThread(t *testing.T, marker string, done <-chan error) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		comms, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/comm")
		for _, c := range comms {
			if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == marker {
				tid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
				return tid
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended before its thread was seen: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no thread named %s within 60 s", marker)
	return 0
}

// seccompFilterCount is tid's Seccomp_filters from /proc, requiring
// filter mode (Seccomp: 2).
func seccompFilterCount(t *testing.T, tid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	n, err := strconv.Atoi(fields["Seccomp_filters"])
	if fields["Seccomp"] != "2" || err != nil || n < 1 {
		t.Fatalf("tid %d: Seccomp %q, Seccomp_filters %q: want filter mode", tid, fields["Seccomp"], fields["Seccomp_filters"])
	}
	return n
}

// seccompFilters reads every seccomp filter of tid, oldest first (the
// kernel's index 0 is the first installed), with PTRACE_SECCOMP_GET_FILTER (the caller needs CAP_SYS_ADMIN and no filter
// of its own): seize, stop, read, detach.
func seccompFilters(tid int) ([][]bpf.RawInstruction, error) {
	runtime.LockOSThread() // ptrace requests come from the tracer thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, fmt.Errorf("PTRACE_SEIZE: %w", err)
	}
	if err := unix.PtraceInterrupt(tid); err != nil {
		return nil, fmt.Errorf("PTRACE_INTERRUPT: %w", err)
	}
	var ws unix.WaitStatus
	_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
	for err == unix.EINTR {
		_, err = unix.Wait4(tid, &ws, unix.WALL, nil)
	}
	if err != nil || !ws.Stopped() {
		return nil, fmt.Errorf("waiting for the ptrace stop: %v (status %#x)", err, ws)
	}
	defer unix.PtraceDetach(tid)
	var out [][]bpf.RawInstruction
	for i := 0; ; i++ {
		n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), uintptr(i), 0, 0, 0)
		if errno == unix.ENOENT {
			return out, nil
		}
		if errno != 0 {
			return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d: %w", i, errno)
		}
		prog := make([]unix.SockFilter, n)
		if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), uintptr(i), uintptr(unsafe.Pointer(&prog[0])), 0, 0); errno != 0 {
			return nil, fmt.Errorf("PTRACE_SECCOMP_GET_FILTER %d: %w", i, errno)
		}
		raw := make([]bpf.RawInstruction, n)
		for j, in := range prog {
			raw[j] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
		}
		out = append(out, raw)
	}
}

// seccompVerdict is what the kernel answers a call of arch and nr (all
// arguments 0) under filters: every filter runs, the strictest action
// wins (the lowest as a signed 32-bit number; KILL_PROCESS is the lowest).
func seccompVerdict(filters [][]bpf.RawInstruction, arch, nr uint32) (uint32, error) {
	// struct seccomp_data; classic BPF loads its aligned 32-bit words in
	// host order, golang.org/x/net/bpf's VM in network order.
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], arch)
	verdict := uint32(unix.SECCOMP_RET_ALLOW)
	for i, f := range filters {
		prog, ok := bpf.Disassemble(f)
		if !ok {
			return 0, fmt.Errorf("filter %d has instructions the VM does not know", i)
		}
		vm, err := bpf.NewVM(prog)
		if err != nil {
			return 0, fmt.Errorf("filter %d: %w", i, err)
		}
		ret, err := vm.Run(data)
		if err != nil {
			return 0, fmt.Errorf("filter %d: %w", i, err)
		}
		if action(uint32(ret)) < action(verdict) {
			verdict = uint32(ret)
		}
	}
	return verdict, nil
}

// action is a seccomp return value's action, ordered as the kernel orders
// them (lower is stricter).
func action(ret uint32) int32 { return int32(ret & unix.SECCOMP_RET_ACTION_FULL) }

func wantVerdict(t *testing.T, filters [][]bpf.RawInstruction, what string, arch, nr, want uint32) {
	t.Helper()
	got, err := seccompVerdict(filters, arch, nr)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if action(got) != action(want) {
		t.Errorf("%s (arch %#x, nr %#x): the filters answer %s, want %s", what, arch, nr, actionName(got), actionName(want))
	}
}

func actionName(ret uint32) string {
	switch ret & unix.SECCOMP_RET_ACTION_FULL {
	case unix.SECCOMP_RET_KILL_PROCESS:
		return "KILL_PROCESS"
	case unix.SECCOMP_RET_KILL_THREAD:
		return "KILL_THREAD (the calling thread only)"
	case unix.SECCOMP_RET_ALLOW:
		return "ALLOW"
	case unix.SECCOMP_RET_ERRNO:
		return fmt.Sprintf("ERRNO(%d)", ret&unix.SECCOMP_RET_DATA)
	}
	return fmt.Sprintf("%#x", ret)
}

func disassemble(f []bpf.RawInstruction) string {
	prog, _ := bpf.Disassemble(f)
	var b strings.Builder
	for i, in := range prog {
		fmt.Fprintf(&b, "%4d  %v\n", i, in)
	}
	return b.String()
}
