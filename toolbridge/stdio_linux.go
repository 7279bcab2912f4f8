package toolbridge

import (
	"os/exec"
	"syscall"
)

// stdioProcAttr puts a stdio server in its own process group (killed as a
// whole) and kills it when the gateway dies.
func stdioProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(cmd *exec.Cmd) { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
