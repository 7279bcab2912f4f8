package seccomp

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Naming the syscall of a seccomp kill.
//
// nsjail 3.6 reports a seccomp kill of its child on its log fd as
//
//	seccompViolation():291 pid=<host pid> committed a syscall/seccomp violation and exited with SIGSYS
//
// without the syscall: the exit status (159) says only that seccomp killed
// the harness. The kernel knows which call it was and says so in an audit
// record (AUDIT_SECCOMP, type 1326) for every KILL_PROCESS:
//
//	audit(1796134051.935:3): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=18776
//	comm="python3" exe="/usr/bin/python3.11" sig=31 arch=c000003e syscall=272 compat=0 ...
//
// The runner subscribes to the kernel's audit multicast group (readlog,
// needs CAP_AUDIT_READ; it works with or without auditd, and is not
// rate-limited like the same record in the kernel log), keeps the recent
// seccomp records, and matches the pid nsjail logged. Both the pid and the
// syscall number come from the kernel: nothing the tool writes reaches
// either (comm and exe are hex-encoded when they hold spaces or quotes, so
// a tool cannot smuggle fields into the record). Where the subscription is
// refused (a container without CAP_AUDIT_READ, a kernel without audit), the
// run is still SyscallDenied, without the name.

// seccompRecord is one AUDIT_SECCOMP record.
type seccompRecord struct {
	PID     int
	Syscall int
	Signal  int
	Arch    string
	Compat  bool
	Time    time.Time
	Arrived time.Time // when the watch read it (AuditReport)
}

// auditArchX86_64 is AUDIT_ARCH_X86_64 as the kernel prints it.
const auditArchX86_64 = "c000003e"

// parseSeccompRecord parses the text of an AUDIT_SECCOMP record.
func parseSeccompRecord(text string) (seccompRecord, bool) {
	var r seccompRecord
	rest, ok := strings.CutPrefix(strings.TrimSpace(text), "audit(")
	if !ok {
		return r, false
	}
	stamp, fields, ok := strings.Cut(rest, "):")
	if !ok {
		return r, false
	}
	if secs, _, ok := strings.Cut(stamp, ":"); ok {
		s, ms, _ := strings.Cut(secs, ".")
		sec, err1 := strconv.ParseInt(s, 10, 64)
		milli, err2 := strconv.ParseInt(ms, 10, 64)
		if err1 != nil || err2 != nil {
			return r, false
		}
		r.Time = time.UnixMilli(sec*1000 + milli)
	}
	got := map[string]bool{}
	for _, kv := range strings.Fields(fields) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || got[k] {
			continue
		}
		got[k] = true
		n, err := strconv.Atoi(v)
		switch k {
		case "pid":
			r.PID = n
		case "syscall":
			r.Syscall = n
		case "sig":
			r.Signal = n
		case "arch":
			r.Arch = v
		case "compat":
			r.Compat = v == "1"
		default:
			continue
		}
		if k != "arch" && k != "compat" && err != nil {
			return r, false
		}
	}
	return r, got["pid"] && got["syscall"] && r.PID > 0
}

var violationLine = regexp.MustCompile(`pid=(\d+) committed a syscall/seccomp violation`)

// ViolationPID is the host pid nsjail reports a seccomp kill for, 0 if its
// log has none.
func ViolationPID(log []string) int {
	for _, l := range log {
		if m := violationLine.FindStringSubmatch(l); m != nil {
			pid, _ := strconv.Atoi(m[1])
			return pid
		}
	}
	return 0
}

// The names of the ABI filter's two rules (abi_linux.go), in the place of
// a syscall's name: any call through another architecture's entry, and any
// x86_64 call with the x32 bit set.
const (
	DeniedForeignArch = "foreign_arch"
	DeniedX32         = "x32_abi"
)

// deniedSyscallName names the syscall of record: the ABI rule that killed
// it (a foreign architecture, the x32 bit), the escape-class name, or
// "syscall <n>" for a number the policy does not kill for.
func deniedSyscallName(rec seccompRecord) string {
	switch {
	case rec.Arch != auditArchX86_64:
		return DeniedForeignArch
	case rec.Syscall&X32SyscallBit != 0:
		return DeniedX32
	case !rec.Compat:
		if name := escapeSyscallName(rec.Syscall); name != "" {
			return name
		}
	}
	return "syscall " + strconv.Itoa(rec.Syscall) + " (arch " + rec.Arch + ")"
}

// Label maps a name from SyscallFor to the bounded set
// sandbox.Result.DeniedSyscall holds: an escape-class name, an ABI rule's,
// or "unknown".
func Label(name string) string {
	if name == DeniedForeignArch || name == DeniedX32 {
		return name
	}
	for _, s := range syscallClasses {
		if s.class == classEscape && (s.name == name || (s.name == "umount" && name == "umount2")) {
			return name
		}
	}
	return "unknown"
}
