package toolbridge

import (
	"math"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// stdioProcAttr puts a stdio server in its own process group (killed as a
// whole) and kills it when the gateway dies.
func stdioProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// closeInheritedOnExec marks every descriptor above stderr close-on-exec,
// so a stdio server gets its stdin, stdout and stderr only. Go opens its
// own descriptors close-on-exec, and exec.Cmd passes 0-2 (and ExtraFiles,
// which stdio servers do not get); what else would reach the server are
// descriptors the gateway inherited from its parent without close-on-exec
// (a supervisor's socket, a shell's redirection). They stay open in the
// gateway; only exec closes them. One close_range(2) call (Linux 5.11),
// else a walk of /proc/self/fd.
func closeInheritedOnExec() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
}
