package seccomp

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// The ABI filter: a seccomp filter of execgate's own, under every nsjail
// the runner starts (level jail's jails and level process's zygotes) and so
// under everything in them, stacked below nsjail's Kafel policy. It kills
// the process (SECCOMP_RET_KILL_PROCESS) for
//
//   - a call through any architecture's entry but x86_64's (int 0x80,
//     sysenter: AUDIT_ARCH_I386), whatever its number, and
//   - an x86_64 call whose number has the x32 bit (__X32_SYSCALL_BIT, bit
//     30) set, whatever the rest of it.
//
// Both are holes of a Kafel policy on its own: Kafel's arch check kills
// with SECCOMP_RET_KILL (the calling thread only: a tool calling from a
// thread ran on and could end "ok"), and it compares the syscall number
// with the x86_64 numbers it knows, so mount (165) with bit 30 set
// (0x400000a5, x32's mount) falls through to DEFAULT ALLOW, and every
// denied call with it on a kernel built with CONFIG_X86_X32_ABI. The
// kernel runs every filter of a task and keeps the strictest answer, so
// the Kafel policy's KILL_THREAD for a foreign architecture becomes
// KILL_PROCESS here.
//
// The filter is installed on one OS thread of the runner, the spawner,
// which starts every nsjail: a thread's filter is inherited by the
// processes it forks, never by the runner's other threads (Go creates new
// threads from a template thread, not from a locked one), and nsjail and
// everything it starts inherit it with no change to nsjail. The spawner
// also sets no_new_privs (per thread, inherited), which seccomp requires
// without CAP_SYS_ADMIN; nsjail sets it for the jail anyway. nsjail never
// makes a call either rule kills. The spawner thread is never unlocked
// and lives as long as the process, so it is also every nsjail's parent
// for Pdeathsig (a signal the kernel sends when the parent thread exits).
//
// The zygote's own filter (execgate_zygote.py) repeats both rules for a
// run's process, and TestSeccompInstalledFiltersKillX32AndForeignArch
// reads every filter of a live run back from the kernel
// (PTRACE_SECCOMP_GET_FILTER) and evaluates them.

// abiFilter is the filter's program (offsets into struct seccomp_data: nr
// at 0, arch at 4).
var abiFilter = []unix.SockFilter{
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},                                     // 0: A = arch
	{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 3, K: unix.AUDIT_ARCH_X86_64}, // 1: not x86_64 → 5
	{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0},                                     // 2: A = nr
	{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: 1, Jf: 0, K: X32SyscallBit},         // 3: x32 bit → 5
	{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},                              // 4
	{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_KILL_PROCESS},                       // 5
}

// abiFilterHint: seccomp is refused to the runner itself.
const abiFilterHint = "the host refused execgate a seccomp filter of its own: run execgate with seccomp unconfined (docker --security-opt seccomp=unconfined)"

// spawner starts processes from its one OS thread, which carries the ABI
// filter.
type spawner struct {
	reqs chan spawnRequest
	err  error // why the thread could not be confined; nil when it is
}

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnerOnce sync.Once
	theSpawner  *spawner
)

// StartConfined starts cmd under the ABI filter (cmd.Start on the spawner
// thread). It fails, and starts nothing, when the filter cannot be
// installed (an *unavailable.Error): nothing runs without it.
func StartConfined(cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		s := &spawner{reqs: make(chan spawnRequest)}
		ready := make(chan error)
		go s.serve(ready)
		s.err = <-ready
		theSpawner = s
	})
	s := theSpawner
	if s.err != nil {
		return s.err
	}
	done := make(chan error, 1)
	s.reqs <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// serve confines its thread, reports on ready, and starts what it is asked
// to. It never returns once confined: the thread stays locked (and alive)
// for the process's life.
func (s *spawner) serve(ready chan<- error) {
	runtime.LockOSThread() // never unlocked: see above
	if err := confineThread(); err != nil {
		// Returning while locked ends the thread, filter or not.
		ready <- &unavailable.Error{Reason: "confining the thread that starts nsjail", Hint: abiFilterHint, Err: err}
		return
	}
	ready <- nil
	for r := range s.reqs {
		r.done <- r.cmd.Start()
	}
}

// confineThread sets no_new_privs and installs the ABI filter on the
// calling thread only (no SECCOMP_FILTER_FLAG_TSYNC).
func confineThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("setting no_new_privs on the spawner thread: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(abiFilter)), Filter: &abiFilter[0]}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("installing the x32/foreign-architecture seccomp filter: %w", errno)
	}
	return nil
}
