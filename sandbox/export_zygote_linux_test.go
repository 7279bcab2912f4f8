package sandbox

import (
	"errors"
	"syscall"
)

// Zygotes is the number of live zygotes of level process.
func Zygotes(r *Runner) int { return r.zygotes.count() }

// KillZygotes kills every live zygote (SIGKILL to its nsjail's process
// group), as a crash would.
func KillZygotes(r *Runner) error {
	r.zygotes.mu.Lock()
	defer r.zygotes.mu.Unlock()
	if len(r.zygotes.m) == 0 {
		return errors.New("no zygote to kill")
	}
	for _, z := range r.zygotes.m {
		if err := syscall.Kill(-z.j.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return err
		}
	}
	return nil
}
