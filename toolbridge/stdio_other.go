//go:build !linux

package toolbridge

import (
	"os/exec"
	"syscall"
)

func stdioProcAttr() *syscall.SysProcAttr { return nil }

func killGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
