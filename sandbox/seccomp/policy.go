// Package seccomp is the jail's system-call policy: the table of denied
// syscalls and their classes, the Kafel policy nsjail compiles from it (and
// the zygote's variant), the x32/foreign-architecture filter every nsjail
// starts under (StartConfined), and the watch of the kernel's audit
// records that names the syscall of a seccomp kill (SyscallFor). It is the
// only place that knows syscall numbers and Kafel.
package seccomp

import (
	"fmt"
	"strings"
)

// Seccomp policy (Kafel, compiled by nsjail): a deny list on top of the
// namespaces, dropped capabilities and no_new_privs. Every denied syscall is
// in exactly one class:
//
//	class   action                 outcome                     what
//	escape  KILL_PROCESS (SIGSYS)  SyscallDenied naming it     calls whose only use in a tool is an
//	                                                           attempt on the jail: namespaces,
//	                                                           mounts, ptrace, bpf, keyrings,
//	                                                           io_uring, userfaultfd, perf, modules,
//	                                                           kexec, socket families outside the
//	                                                           network namespace
//	probe   ERRNO(EPERM)           the call fails, tool runs   calls ordinary libraries probe or try
//	                                                           harmlessly (clock setting, syslog,
//	                                                           personality changes, quotas, ...)
//	absent  ERRNO(ENOSYS)          the call "does not exist"   clone3 (so glibc falls back to clone,
//	                                                           whose flags seccomp can read) and
//	                                                           Linux AIO (libraries fall back to
//	                                                           threads, as on kernels without AIO)
//
// The escape class uses KILL_PROCESS, not KILL: KILL ends only the calling
// thread, so a tool calling from a thread would be left running (and the
// harness waiting on it). The kernel kills the whole process with SIGSYS;
// when that process is the harness (the tool's own process, threads
// included), nsjail returns 159 and logs the violation with the host pid,
// and the kernel's audit record of the kill carries the syscall number
// (audit_linux.go reads it back to name the call). A process the tool
// started itself is killed just the same, but only the tool sees that.
//
// Decisions:
//   - socket and socketpair: AF_UNIX, AF_INET and AF_INET6 only, plus
//     AF_NETLINK with protocol NETLINK_ROUTE, which glibc needs
//     (getaddrinfo with AI_ADDRCONFIG, if_nameindex, getifaddrs). It only
//     reads the jail's own network namespace: changing links, addresses or
//     routes needs CAP_NET_ADMIN, which the tool does not have. Every other
//     family (AF_VSOCK is not namespaced and reaches the hypervisor,
//     AF_PACKET, AF_ALG, AF_KEY, AF_XDP, AF_BLUETOOTH, AF_TIPC, AF_RDS,
//     AF_CAN, other netlink protocols, ...) is the escape class.
//   - personality: the query (0xffffffff) and PER_LINUX (0) are allowed;
//     anything else (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC for children) is
//     EPERM, as setarch-style probing is not an attack on the jail.
//   - Linux AIO (io_setup and friends): ENOSYS. It is kernel surface no
//     tool needs (glibc's POSIX AIO uses threads), and libraries that try it
//     fall back on ENOSYS as on kernels built without it.
//   - unshare is the escape class whatever its flags: unshare(0) is a no-op
//     nobody calls for its own sake.
//   - The policy is written for x86_64 syscall numbers, and Kafel alone
//     leaves two holes: its check of the architecture kills only the
//     calling thread (SECCOMP_RET_KILL), and a number with the x32 bit
//     (bit 30) set matches none of its rules (DEFAULT ALLOW), so x32's
//     mount, unshare, bpf, ... would pass on a kernel built with x32.
//     execgate's own filter under every nsjail (abi_linux.go) kills the
//     process for both: any call through another architecture's entry
//     (int 0x80: AUDIT_ARCH_I386), DeniedSyscall "foreign_arch", and any
//     x86_64 number with the x32 bit, DeniedSyscall "x32_abi".
//
// Kafel spells umount2 "umount". One unknown name makes the whole policy fail
// to compile (nsjail exits 255 before running anything), which is why
// TestSeccompPolicyCompiles (package sandbox) runs this policy through the
// real nsjail.
//
// How to deny one more syscall:
//  1. Decide its class with the table above and add it to syscallClasses
//     with its x86_64 number (kafel/src/syscalls/amd64_syscalls.c has both).
//  2. Run the sandbox tests (the policy is compiled by the real nsjail, and
//     the harness must still start).
//  3. Add a containment case that calls it through ctypes; escape-class
//     calls must come back as SyscallDenied naming the call.
//  4. Update the table in README's security section.

// X32SyscallBit is __X32_SYSCALL_BIT: an x86_64 syscall number with it set
// is a call through the x32 ABI.
const X32SyscallBit = 0x40000000

// syscallClass is what the policy does with a syscall.
type syscallClass int

const (
	classEscape syscallClass = iota // KILL_PROCESS → SyscallDenied
	classProbe                      // ERRNO(EPERM)
	classAbsent                     // ERRNO(ENOSYS)
)

// deniedSyscall is one syscall of the policy; when is a Kafel condition on
// its arguments (empty: always).
type deniedSyscall struct {
	name  string // Kafel's name
	nr    int    // x86_64 number, to name it from the kernel's audit record
	class syscallClass
	when  string
}

// socketFamilyDenied is the condition under which socket and socketpair
// kill: a family other than AF_UNIX (1), AF_INET (2), AF_INET6 (10), and
// other than AF_NETLINK (16) with NETLINK_ROUTE (0). domain and protocol are ints: the kernel ignores
// their upper 32 bits, so the filter must too.
const socketFamilyDenied = "(domain & 0xffffffff) != 1 && (domain & 0xffffffff) != 2 && (domain & 0xffffffff) != 10 && " +
	"((domain & 0xffffffff) != 16 || (protocol & 0xffffffff) != 0)"

// cloneNamespaceFlags is CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWUTS|
// CLONE_NEWIPC|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET.
const cloneNamespaceFlags = "0x7e020000"

// prSetDumpable is PR_SET_DUMPABLE: a process may drop its dumpability, never
// regain it. Every process of the jail is non-dumpable (see the harness), so
// no process can open another's /proc/<pid>/mem; denying the way back keeps
// it so.
const prSetDumpable = "4"

// syscallClasses is the policy, one entry per syscall.
var syscallClasses = []deniedSyscall{
	// escape: tracing and other processes' memory and descriptors
	{"ptrace", 101, classEscape, ""},
	{"process_vm_readv", 310, classEscape, ""},
	{"process_vm_writev", 311, classEscape, ""},
	{"pidfd_getfd", 438, classEscape, ""},
	// escape: mounts and the new mount API
	{"mount", 165, classEscape, ""},
	{"umount", 166, classEscape, ""},
	{"pivot_root", 155, classEscape, ""},
	{"chroot", 161, classEscape, ""},
	{"open_tree", 428, classEscape, ""},
	{"move_mount", 429, classEscape, ""},
	{"fsopen", 430, classEscape, ""},
	{"fsconfig", 431, classEscape, ""},
	{"fsmount", 432, classEscape, ""},
	{"fspick", 433, classEscape, ""},
	{"mount_setattr", 442, classEscape, ""},
	{"open_by_handle_at", 304, classEscape, ""},
	// escape: namespaces
	{"unshare", 272, classEscape, ""},
	{"setns", 308, classEscape, ""},
	{"clone", 56, classEscape, "(clone_flags & " + cloneNamespaceFlags + ") != 0"},
	// escape: kernel keyrings
	{"keyctl", 250, classEscape, ""},
	{"add_key", 248, classEscape, ""},
	{"request_key", 249, classEscape, ""},
	// escape: kernel attack surface no tool needs
	{"bpf", 321, classEscape, ""},
	{"perf_event_open", 298, classEscape, ""},
	{"userfaultfd", 323, classEscape, ""},
	{"io_uring_setup", 425, classEscape, ""},
	{"io_uring_enter", 426, classEscape, ""},
	{"io_uring_register", 427, classEscape, ""},
	{"kexec_load", 246, classEscape, ""},
	{"kexec_file_load", 320, classEscape, ""},
	{"init_module", 175, classEscape, ""},
	{"finit_module", 313, classEscape, ""},
	{"delete_module", 176, classEscape, ""},
	// escape: socket families outside the network namespace
	{"socket", 41, classEscape, socketFamilyDenied},
	{"socketpair", 53, classEscape, socketFamilyDenied},

	// probe: refused, the tool goes on
	{"kcmp", 312, classProbe, ""},
	{"reboot", 169, classProbe, ""},
	{"swapon", 167, classProbe, ""},
	{"swapoff", 168, classProbe, ""},
	{"acct", 163, classProbe, ""},
	{"quotactl", 179, classProbe, ""},
	{"name_to_handle_at", 303, classProbe, ""},
	{"lookup_dcookie", 212, classProbe, ""},
	{"syslog", 103, classProbe, ""},
	{"vhangup", 153, classProbe, ""},
	{"iopl", 172, classProbe, ""},
	{"ioperm", 173, classProbe, ""},
	{"uselib", 134, classProbe, ""},
	{"settimeofday", 164, classProbe, ""},
	{"clock_settime", 227, classProbe, ""},
	{"clock_adjtime", 305, classProbe, ""},
	{"adjtimex", 159, classProbe, ""},
	{"fanotify_init", 300, classProbe, ""},
	{"personality", 135, classProbe, "(persona & 0xffffffff) != 0 && (persona & 0xffffffff) != 0xffffffff"},
	// option is an int: the kernel ignores its upper 32 bits, so the filter
	// must too, or 0x1_00000004 would slip past as "not 4".
	{"prctl", 157, classProbe, "(option & 0xffffffff) == " + prSetDumpable + " && value != 0"},

	// absent
	{"clone3", 435, classAbsent, ""},
	{"io_setup", 206, classAbsent, ""},
	{"io_destroy", 207, classAbsent, ""},
	{"io_getevents", 208, classAbsent, ""},
	{"io_submit", 209, classAbsent, ""},
	{"io_cancel", 210, classAbsent, ""},
	{"io_pgetevents", 333, classAbsent, ""},
}

// kafelArgs names the arguments a condition uses, per syscall.
var kafelArgs = map[string]string{
	"clone":       "clone_flags",
	"socket":      "domain, type, protocol",
	"socketpair":  "domain, type, protocol",
	"personality": "persona",
	"prctl":       "option, value",
}

// Policy returns the Kafel policy text of level jail.
func Policy() string { return kafelPolicy(syscallClasses, kafelArgs) }

// kafelPolicy renders classes as a Kafel policy; args names the arguments
// of the syscalls with conditions.
func kafelPolicy(classes []deniedSyscall, args map[string]string) string {
	var b strings.Builder
	b.WriteString("POLICY execgate {")
	for i, block := range []struct {
		action string
		class  syscallClass
	}{{"KILL_PROCESS", classEscape}, {"ERRNO(1)", classProbe}, {"ERRNO(38)", classAbsent}} {
		if i > 0 {
			b.WriteString(",")
		}
		var rules []string
		for _, s := range classes {
			if s.class != block.class {
				continue
			}
			if s.when == "" {
				rules = append(rules, s.name)
				continue
			}
			rules = append(rules, fmt.Sprintf("%s(%s) { %s }", s.name, args[s.name], s.when))
		}
		fmt.Fprintf(&b, " %s { %s }", block.action, strings.Join(rules, ", "))
	}
	b.WriteString(" } USE execgate DEFAULT ALLOW")
	return b.String()
}

// escapeSyscallName names an escape-class syscall from its x86_64 number,
// "" for any other number.
func escapeSyscallName(nr int) string {
	for _, s := range syscallClasses {
		if s.nr == nr && s.class == classEscape {
			if s.name == "umount" {
				return "umount2"
			}
			return s.name
		}
	}
	return ""
}
