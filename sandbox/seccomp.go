package sandbox

import "strings"

// Seccomp policy (Kafel, compiled by nsjail). A deny list on top of the
// namespaces, dropped capabilities and no_new_privs: every syscall below
// fails with EPERM (1), so a tool gets a clear error instead of a dead
// interpreter. clone3 gets ENOSYS (38) because its flags live in memory that
// seccomp cannot inspect; glibc then falls back to clone, whose flags are
// checked: clone with any namespace flag is denied (threads and fork keep
// working).
//
// Kafel spells umount2 "umount". One unknown name makes the whole policy fail
// to compile (nsjail exits 255 before running anything), which is why
// TestSeccompPolicyCompiles runs this policy through the real nsjail.
//
// How to deny one more syscall:
//  1. Add its Kafel name to deniedSyscalls (check it in
//     kafel/src/syscalls/amd64_syscalls.c).
//  2. Run the sandbox tests (the policy is compiled by the real nsjail).
//  3. Add a containment case that calls it through ctypes.
var deniedSyscalls = []string{
	// tracing and other processes' memory
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	// mounts and the new mount API
	"mount", "umount", "pivot_root", "chroot", "open_tree", "move_mount",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// namespaces
	"unshare", "setns",
	// kernel keyrings
	"keyctl", "add_key", "request_key",
	// kernel attack surface rarely needed by tools
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct", "quotactl",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
	"syslog", "vhangup", "iopl", "ioperm", "uselib",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"fanotify_init",
}

// prSetDumpable is PR_SET_DUMPABLE: a process may drop its dumpability, never
// regain it. Every process of the jail is non-dumpable (see the harness), so
// no process can open another's /proc/<pid>/mem; denying the way back keeps
// it so.
const prSetDumpable = "4"

// cloneNamespaceFlags is CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWUTS|
// CLONE_NEWIPC|CLONE_NEWUSER|CLONE_NEWPID|CLONE_NEWNET.
const cloneNamespaceFlags = "0x7e020000"

// seccompPolicy returns the Kafel policy text.
func seccompPolicy() string {
	var b strings.Builder
	b.WriteString("POLICY execgate { ERRNO(1) { ")
	b.WriteString(strings.Join(deniedSyscalls, ", "))
	b.WriteString(", clone { (clone_flags & " + cloneNamespaceFlags + ") != 0 }")
	// option is an int: the kernel ignores its upper 32 bits, so the filter
	// must too, or 0x1_00000004 would slip past as "not 4".
	b.WriteString(", prctl(option, value) { (option & 0xffffffff) == " + prSetDumpable + " && value != 0 }")
	b.WriteString(" }, ERRNO(38) { clone3 } } USE execgate DEFAULT ALLOW")
	return b.String()
}
