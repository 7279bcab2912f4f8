//go:build !linux

package toolbridge

import (
	"os/exec"
	"syscall"
)

func stdioProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

// closeInheritedOnExec does nothing here: stdio servers may inherit the
// descriptors the gateway inherited without close-on-exec.
func closeInheritedOnExec() {}
