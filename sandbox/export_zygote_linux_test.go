package sandbox

import (
	"errors"
	"fmt"
	"sort"
	"syscall"
	"time"
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

// ZygoteCgroups waits until no zygote is preparing a spare process, then
// returns how many run cgroups the zygotes hold: each zygote's own, its
// spares' and the finished runs' kept for the next spares.
func ZygoteCgroups(r *Runner) int {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		busy := false
		r.zygotes.mu.Lock()
		for _, z := range r.zygotes.m {
			busy = busy || z.filling.Load()
		}
		r.zygotes.mu.Unlock()
		if !busy {
			break
		}
	}
	r.zygotes.mu.Lock()
	defer r.zygotes.mu.Unlock()
	n := 0
	for _, z := range r.zygotes.m {
		n += 1 + len(z.spares) + len(z.cgroups)
	}
	for _, z := range r.zygotes.next {
		n += 1 + len(z.spares) + len(z.cgroups)
	}
	return n
}

// NextZygotes is the number of successors started ahead and not yet
// promoted.
func NextZygotes(r *Runner) int {
	r.zygotes.mu.Lock()
	defer r.zygotes.mu.Unlock()
	return len(r.zygotes.next)
}

// ZygoteIDs lists the live zygotes as "<tenant>/<nsjail pid>".
func ZygoteIDs(r *Runner) []string {
	r.zygotes.mu.Lock()
	defer r.zygotes.mu.Unlock()
	var out []string
	for k, z := range r.zygotes.m {
		out = append(out, fmt.Sprintf("%s/%d", k.tenant, z.j.cmd.Process.Pid))
	}
	sort.Strings(out)
	return out
}

// CgroupsReused is how many finished runs' cgroups were reset for another
// run at level process.
func CgroupsReused(r *Runner) int64 { return r.zygotes.cgroupsKept.Load() }

// CgroupVersion is the cgroup version the runner uses.
func CgroupVersion(r *Runner) int { return r.cg.version }
