package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// Exit statuses: the one mapping from what nsjail returns to what happened.
// In ONCE mode nsjail returns the jailed process's (the harness's) status:
//
//	0        the harness exited normally (it does so right after writing
//	         its envelope)
//	1–127    the harness exited with that code without an envelope (70: its
//	         result fd was missing, 71: writing the envelope failed, 72: the
//	         egress relay could not start, 74: the run's secrets could not be
//	         written; others: the tool called os._exit
//	         or the interpreter failed)
//	128+n    the harness was killed by signal n: 137 SIGKILL (the memory
//	         cgroup's OOM killer, the hard RLIMIT_CPU, or the runner), 139
//	         SIGSEGV, 134 SIGABRT, 152 SIGXCPU, 159 SIGSYS (a seccomp kill);
//	         or nsjail itself stopped on signal n (143 after the runner's
//	         SIGTERM at the deadline)
//	255      nsjail failed before the harness ran: its log then says
//	         "Couldn't launch the child process", or lacks the child's
//	         "Executing '…'" line (logged right before execve)
//
// The exit status alone cannot tell a timeout from an OOM kill (both are
// 137), so classify also uses what the runner knows (its own deadline and
// CPU watch), the nsjail log ("run time >= time limit") and the run's
// memory cgroup (OOM kills, limit hits), in this order of precedence:
//
//  1. nsjail failed before the tool ran           → *UnavailableError
//  2. the runner's deadline fired, or nsjail's    → Timeout
//  3. the runner stopped the jail for its CPU     → CPULimit
//  4. the OOM killer acted in the run's cgroup    → MemoryLimit, whatever the
//     envelope says: a tool whose processes were killed did not run as
//     written
//  5. SIGSYS (a seccomp kill of the harness,     → SyscallDenied, naming the
//     the tool's own process)                      syscall when the kernel's
//     audit record says which
//     SIGTRAP of a Deno jail (V8's heap limit)   → MemoryLimit
//  6. a well-formed envelope, and the harness     → its status and error, for
//     exited 0 (it does right after writing it)    the tool-level types only
//  7. the result channel overflowed its cap       → OutputLimit
//  8. the memory cgroup recorded a limit hit      → MemoryLimit
//  9. SIGXCPU, or SIGKILL with CPU ≥ the limit    → CPULimit
//  10. SIGBUS                                     → MemoryLimit: a shared
//     memory segment or memory-mapped file outgrew /dev/shm or /tmp (their
//     size is what the jail may keep there, and the kernel answers a write
//     through a mapping with SIGBUS, not ENOSPC)
//  11. exit 0 or 71 without a valid envelope      → ToolError: the process
//     ended on its own, or something in the jail wrote on, closed or
//     replaced the result channel (the runner never closes its end early)
//  12. anything else                              → SandboxCrashed (with the nsjail log)
//
// The result channel (fd 3) is written by the process that runs the tool,
// so the tool can write on it too: whatever it carries is a claim, never a
// fact. Outcome types that describe the sandbox (Timeout, CPULimit,
// MemoryLimit, OutputLimit, SyscallDenied, SandboxCrashed) come from what
// the runner reads itself: exit status and signal, its deadline and CPU
// watch, the cgroup's counters, nsjail's log on its own fd, the kernel's
// audit record, and sizes it measures. A channel message yields only the
// tool-level types (ok, ToolError, InvalidSource, EntrypointNotFound,
// InvalidResult, InvalidInput). The harness's own MemoryLimit (MemoryError)
// and CPULimit (SIGXCPU) reports stand only when the kernel confirms them
// (the cgroup recorded a memory limit hit; the jail's CPU time reached the
// limit); otherwise they are the tool's error. OutputLimit is the runner's
// own measurement of the result.
const (
	exitNsjailFailure = 255
	exitSignalBase    = 128
)

// harnessErrorTypes are the error types an envelope may carry as they are.
// The envelope is written by the same process that runs the tool, so it is
// untrusted: sandbox types (Timeout, SandboxCrashed, ...) are decided here,
// and the claims in confirmedClaims stand only with the kernel's word.
var harnessErrorTypes = map[string]bool{
	ErrToolError:          true,
	ErrInvalidSource:      true,
	ErrEntrypointNotFound: true,
	ErrInvalidResult:      true,
	ErrInvalidInput:       true,
}

// confirmedClaims are the sandbox types the harness reports itself
// (MemoryError, its SIGXCPU handler), each with the kernel fact that must
// back it.
var confirmedClaims = map[string]func(outcome) bool{
	ErrMemoryLimit: func(o outcome) bool { return o.MemoryLimitHit || o.OOMKilled },
	ErrCPULimit: func(o outcome) bool {
		return o.Limits.CPUMS > 0 && o.CPUMS+cpuClaimSlackMS >= o.Limits.CPUMS
	},
}

// cpuClaimSlackMS: the harness's SIGXCPU comes when its own CPU time,
// interpreter start included, reaches the limit; the runner counts the
// jail's CPU time from the hand-off, which leaves out that start.
const cpuClaimSlackMS = 250

// exitChannelWriteFailed is the harness's status when writing the envelope
// failed (execgate_harness.py EXIT_WRITE_FAILED).
const exitChannelWriteFailed = 71

// envelope is the harness's result as written to fd 3.
type envelope struct {
	ProtocolVersion int             `json:"protocol_version"`
	Status          Status          `json:"status"`
	Result          json.RawMessage `json:"result"`
	Error           *ErrorInfo      `json:"error"`
	Logs            []LogLine       `json:"logs"`
	// Artifacts are the media types the tool gave the artifacts it saved
	// (context.artifacts.save(name, data, mime)), by name: claims, used
	// only to label them (workspace.MIMEOf checks each).
	Artifacts map[string]string `json:"artifacts"`
}

// Caps on what the envelope may carry besides the result.
const (
	maxEnvelopeLogs    = 1000
	maxEnvelopeLogLine = 8 << 10
	// maxEnvelopeLogBytes caps the encoded size of all log lines together.
	maxEnvelopeLogBytes = 1 << 20
	maxErrorText        = 64 << 10
	// envelopeOverhead is added to Limits.OutputBytes for the envelope
	// pipe's cap (logs, error text, JSON framing).
	envelopeOverhead = 512 << 10
)

// outcome is everything known about a finished jail.
type outcome struct {
	// ExitCode is nsjail's exit status, or -1 when nsjail itself was killed
	// by a signal (Signal says which).
	ExitCode int
	Signal   syscall.Signal
	// TimedOut: the runner's deadline fired and it stopped the jail.
	// Cancelled: the caller's context ended first.
	TimedOut  bool
	Cancelled bool
	CancelErr error
	// CPUKilled: the runner stopped the jail because all its processes
	// together used more CPU time than the limit.
	CPUKilled bool
	Log       []string
	// Envelope holds the bytes read from fd 3; EnvelopeTruncated says the
	// harness wrote more than the cap.
	Envelope          []byte
	EnvelopeTruncated bool
	MemoryLimitHit    bool
	OOMKilled         bool
	CPUMS             int64
	Limits            Limits
	// Runtime is the jail's runtime (python or deno): a Deno jail's SIGTRAP
	// is V8 stopping at its heap limit.
	Runtime jailRuntime
	// DeniedSyscall names the syscall a seccomp kill was for, when the
	// kernel's audit record said ("" otherwise; see package seccomp).
	DeniedSyscall string
}

// verdict is classify's answer: either an envelope's worth of result or an
// *UnavailableError (nothing ran).
type verdict struct {
	Status      Status
	Result      json.RawMessage
	Error       *ErrorInfo
	Logs        []LogLine
	Unavailable *UnavailableError
	// MIMEs are the envelope's artifact media types (nil without one).
	MIMEs map[string]string
}

func classify(o outcome) verdict {
	env, envErr := parseEnvelope(o.Envelope, o.EnvelopeTruncated)
	return classifyParsed(o, env, envErr)
}

// classifyParsed is classify with o's envelope parsed (parseEnvelope).
func classifyParsed(o outcome, env *envelope, envErr error) verdict {
	if u := setupFailure(o); u != nil {
		return verdict{Unavailable: u}
	}
	v := classifyEnvelope(o, env, envErr)
	if env != nil {
		v.MIMEs = env.Artifacts
	}
	return v
}

// classifyEnvelope is classify's answer for a jail that ran, with its
// envelope parsed (nil, and envErr, when there is none).
func classifyEnvelope(o outcome, env *envelope, envErr error) verdict {
	fail := func(typ, msg, tb string) verdict {
		v := verdict{Status: StatusError, Error: &ErrorInfo{Type: typ, Message: msg, Traceback: tb}}
		if env != nil {
			v.Logs = boundLogs(env.Logs)
		}
		return v
	}
	sig := o.childSignal()
	switch {
	case o.Cancelled && errors.Is(o.CancelErr, context.DeadlineExceeded):
		return fail(ErrTimeout, fmt.Sprintf("the run was stopped because its caller's deadline passed (%v)", o.CancelErr), "")
	case o.Cancelled && errors.Is(o.CancelErr, ErrCancelledByCaller):
		return fail(ErrCancelled, "the run was cancelled by its caller and stopped", "")
	case o.Cancelled:
		return fail(ErrCancelled, fmt.Sprintf("the run was stopped because its caller went away (%v)", o.CancelErr), "")
	case o.TimedOut || logHas(o.Log, "run time >= time limit"):
		return fail(ErrTimeout, fmt.Sprintf("the tool ran longer than its time limit of %d ms", o.Limits.TimeoutMS), "")
	case o.CPUKilled:
		return fail(ErrCPULimit, fmt.Sprintf("the tool used more CPU time than its limit of %d ms (all its processes together)", o.Limits.CPUMS), "")
	case o.OOMKilled:
		return fail(ErrMemoryLimit, fmt.Sprintf("the tool used more memory than its limit of %d MiB (all its processes together); the kernel killed a process of it", o.Limits.MemoryMB), "")
	case sig == syscall.SIGSYS:
		return fail(ErrSyscallDenied, syscallDeniedMessage(o.DeniedSyscall), nsjailTrace(o.Log))
	case sig == syscall.SIGTRAP && o.Runtime.deno():
		// V8 ends a heap that outgrew --max-old-space-size with "Fatal
		// JavaScript out of memory" and SIGTRAP; a tool without
		// permissions cannot send itself signals (language.go).
		return fail(ErrMemoryLimit, fmt.Sprintf("the tool's JavaScript heap reached its limit of %d MiB (memory limit %d MiB); V8 stopped it", denoHeapMB(o.Limits.MemoryMB), o.Limits.MemoryMB), "")
	}
	if env != nil && o.ExitCode == 0 {
		return fromEnvelope(env, o)
	}
	switch {
	case o.EnvelopeTruncated:
		// Name the limit the tenant set (output_bytes), not the capture's
		// cap, which adds envelopeOverhead for the envelope's framing.
		return fail(ErrOutputLimit, fmt.Sprintf("the tool's result and logs exceeded its output limit of %d bytes (output_bytes)", o.Limits.OutputBytes), "")
	case o.MemoryLimitHit:
		return fail(ErrMemoryLimit, fmt.Sprintf("the tool used more memory than its limit of %d MiB", o.Limits.MemoryMB), "")
	case sig == syscall.SIGXCPU || (sig == syscall.SIGKILL && o.CPUMS >= o.Limits.CPUMS):
		return fail(ErrCPULimit, fmt.Sprintf("the tool used more CPU time than its limit of %d ms", o.Limits.CPUMS), "")
	case sig == syscall.SIGBUS:
		return fail(ErrMemoryLimit, fmt.Sprintf("the tool was killed by SIGBUS: a shared memory segment or memory-mapped file outgrew its tmpfs (/dev/shm and /tmp hold %d MiB each)", o.Limits.TmpMB), nsjailTrace(o.Log))
	case o.Signal == 0 && (o.ExitCode == 0 || o.ExitCode == exitChannelWriteFailed):
		msg := fmt.Sprintf("the tool's process exited with status %d without a valid result envelope: it ended on its own (os._exit), or it wrote on, closed or replaced the result channel (fd 3)", o.ExitCode)
		if envErr != nil {
			msg += "; " + envErr.Error()
		}
		return fail(ErrToolError, msg, "")
	}
	msg := "the jail ended without a result: " + o.describeExit()
	if envErr != nil {
		msg += "; " + envErr.Error()
	}
	return fail(ErrSandboxCrashed, msg, nsjailTrace(o.Log))
}

// syscallDeniedMessage names the denied syscall when the kernel said which.
func syscallDeniedMessage(name string) string {
	switch name {
	case "":
		return "the tool was killed for a forbidden system call (seccomp); the kernel's audit record naming it was not available"
	case "socket", "socketpair":
		return fmt.Sprintf("the tool was killed for a forbidden system call: %s (seccomp; a socket family other than AF_UNIX, AF_INET, AF_INET6 or NETLINK_ROUTE)", name)
	case seccomp.DeniedForeignArch:
		return "the tool was killed for a forbidden system call: " + name + " (seccomp; a call through another architecture's entry, such as int 0x80: every such call is killed)"
	case seccomp.DeniedX32:
		return "the tool was killed for a forbidden system call: " + name + " (seccomp; a call through the x32 ABI, its number with bit 30 set: every such call is killed)"
	}
	return fmt.Sprintf("the tool was killed for a forbidden system call: %s (seccomp)", name)
}

// childExecuted reports whether nsjail's log shows it handing over to the
// interpreter: the jail's child logs "Executing '<path>'" right before
// execve, after every namespace, mount and limit is in place.
func childExecuted(log []string) bool {
	return logHas(log, "Executing '") && !logHas(log, "Couldn't launch the child process")
}

// setupFailure recognises nsjail failing before the harness ran.
func setupFailure(o outcome) *UnavailableError {
	if o.TimedOut || o.Cancelled || len(o.Envelope) > 0 {
		return nil
	}
	execFailed := logHas(o.Log, "execve(") && logHas(o.Log, "failed")
	launchFailed := logHas(o.Log, "Couldn't launch the child process") || logHas(o.Log, "Launching child process failed")
	if !execFailed && !launchFailed && (o.ExitCode != exitNsjailFailure || childExecuted(o.Log)) {
		return nil
	}
	return &UnavailableError{
		Reason: fmt.Sprintf("nsjail could not create the jail (exit status %d)", o.ExitCode),
		Log:    o.Log,
		Hint:   hostHint(o.Log),
	}
}

// hostHint turns nsjail's complaint into what an operator can do.
func hostHint(log []string) string {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if logHas(log, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("Could not compile policy"):
		return "nsjail could not compile execgate's seccomp policy (a syscall name its Kafel does not know): install the nsjail execgate pins with scripts/setup.sh"
	case has("Couldn't prepare sandboxing policy", "PR_SET_SECCOMP", "seccomp"):
		return "the host refused to install a seccomp filter: run execgate with seccomp unconfined (docker --security-opt seccomp=unconfined)"
	case has("chmod o+x"):
		return "a bind source (the rootfs, deps or jails directory) is not searchable by the jail's user: the directory itself needs o+x (chmod o+x DIR); the directories above it are reached through execgate's view under sandbox.runtime_dir"
	case has("execve("):
		return "the rootfs has no working interpreter: rebuild it with `execgate rootfs build`"
	case has("mount(", "pivot_root", "mount_setattr", "fsmount", "MS_REC") && has("Permission denied", "Operation not permitted"):
		return "the host refused mounts inside a user namespace: run execgate privileged (docker --privileged) or with seccomp and AppArmor unconfined (--security-opt seccomp=unconfined --security-opt apparmor=unconfined); on Ubuntu 24.04 allow user namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns=0)"
	case has("cgroup", "subtree_control", "memory.limit_in_bytes", "pids.max", "cpu.cfs"):
		return cgroups.Hint
	case has("clone(", "CLONE_NEW", "unshare(", "uid_map", "gid_map", "setgroups", "newuidmap"):
		return "the host refused to create namespaces: allow user namespaces (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1) or run execgate privileged (docker --privileged)"
	}
	return "nsjail could not create the jail; its log says why. Usual causes: not root or not privileged (docker --privileged), a seccomp or AppArmor profile (seccomp=unconfined), user namespaces disabled, cgroups not delegated"
}

func parseEnvelope(data []byte, truncated bool) (*envelope, error) {
	if truncated {
		return nil, fmt.Errorf("the result channel carried more than the cap")
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("the result channel held no valid envelope (%d bytes: %v)", len(data), err)
	}
	switch {
	case env.Status != StatusOK && env.Status != StatusError:
		return nil, fmt.Errorf("the envelope has status %q", env.Status)
	case env.Status == StatusError && env.Error == nil:
		return nil, fmt.Errorf("the envelope has status error and no error")
	}
	return &env, nil
}

// boundLogs caps the tool's log lines: each message at maxEnvelopeLogLine
// bytes, an unknown level read as info, and at most maxEnvelopeLogs lines
// and maxEnvelopeLogBytes bytes as the envelope encodes them; what is
// dropped is counted in a last warning line.
func boundLogs(in []LogLine) []LogLine {
	out := in[:0:0]
	size := 0
	for i, l := range in {
		l.Message = clip(l.Message, maxEnvelopeLogLine)
		switch l.Level {
		case "debug", "info", "warning", "error":
		default:
			l.Level = "info"
		}
		size += jsonsize.StringLen(l.Level) + jsonsize.StringLen(l.Message) + len(`{"level":,"message":},`)
		if i >= maxEnvelopeLogs || size > maxEnvelopeLogBytes {
			return append(out, LogLine{Level: "warning", Message: fmt.Sprintf("%d log lines dropped", len(in)-i)})
		}
		out = append(out, l)
	}
	return out
}

func fromEnvelope(env *envelope, o outcome) verdict {
	logs := boundLogs(env.Logs)
	if env.ProtocolVersion != jaillayout.ProtocolVersion {
		return verdict{Status: StatusError, Logs: logs, Error: &ErrorInfo{Type: ErrProtocolMismatch,
			Message: fmt.Sprintf("the harness speaks protocol %d, this execgate %d: rebuild the rootfs with `execgate rootfs build`", env.ProtocolVersion, jaillayout.ProtocolVersion)}}
	}
	if env.Status == StatusOK {
		result := env.Result
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		// The result is sent as it came (re-encoding never makes valid JSON
		// longer), so its bytes are its size in the envelope; the runner,
		// not the harness, checks the cap (a tool may write the envelope).
		if o.Limits.OutputBytes > 0 && int64(len(result)) > o.Limits.OutputBytes {
			return verdict{Status: StatusError, Logs: logs, Error: &ErrorInfo{Type: ErrOutputLimit,
				Message: fmt.Sprintf("the result is %d bytes, over the output cap of %d bytes", len(result), o.Limits.OutputBytes)}}
		}
		return verdict{Status: StatusOK, Result: result, Logs: logs}
	}
	e := *env.Error
	e.Message = clip(e.Message, maxErrorText)
	e.Traceback = clip(e.Traceback, maxErrorText)
	if e.Line < 0 {
		e.Line = 0
	}
	if confirm, ok := confirmedClaims[e.Type]; ok && confirm(o) {
		return verdict{Status: StatusError, Error: &e, Logs: logs}
	}
	if !harnessErrorTypes[e.Type] {
		e.Message = fmt.Sprintf("the tool reported error type %q, which the runner did not confirm: %s", e.Type, e.Message)
		e.Type = ErrToolError
	}
	return verdict{Status: StatusError, Error: &e, Logs: logs}
}

// childSignal is the signal that ended the harness, if any.
func (o outcome) childSignal() syscall.Signal {
	if o.ExitCode > exitSignalBase && o.ExitCode < exitNsjailFailure {
		return syscall.Signal(o.ExitCode - exitSignalBase)
	}
	return 0
}

func (o outcome) describeExit() string {
	switch {
	case o.Signal != 0:
		return fmt.Sprintf("nsjail was killed by signal %s", signalName(o.Signal))
	case o.childSignal() != 0:
		return fmt.Sprintf("the tool process was killed by signal %s", signalName(o.childSignal()))
	case harnessExits[o.ExitCode] != "":
		return fmt.Sprintf("the harness exited with status %d (%s)", o.ExitCode, harnessExits[o.ExitCode])
	default:
		return fmt.Sprintf("the tool process exited with status %d", o.ExitCode)
	}
}

// harnessExits are the harness's own exit statuses (execgate_harness.py EXIT_*).
var harnessExits = map[int]string{
	70: "its result channel, fd 3, was not open",
	71: "writing the result envelope failed",
	72: "the egress relay could not start",
	74: "the run's secrets could not be written to " + jaillayout.SecretsDir,
}

func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGILL: "SIGILL", syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGSYS: "SIGSYS", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
		syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGPIPE: "SIGPIPE", syscall.SIGINT: "SIGINT",
		syscall.SIGHUP: "SIGHUP", syscall.SIGTRAP: "SIGTRAP",
	}
	if n, ok := names[s]; ok {
		return fmt.Sprintf("%s (%d)", n, int(s))
	}
	return fmt.Sprintf("%d", int(s))
}

// nsjailTrace renders nsjail's log for a traceback.
func nsjailTrace(log []string) string {
	if len(log) == 0 {
		return ""
	}
	return "nsjail log:\n" + strings.Join(log, "\n") + "\n"
}

func logHas(log []string, sub string) bool {
	for _, l := range log {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…[truncated]"
}
