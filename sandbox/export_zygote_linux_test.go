package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Zygotes is the number of live zygotes of level process.
func Zygotes(r *Runner) int { return r.zygotes.State().Live }

// KillZygotes kills every live zygote (SIGKILL to its nsjail's process
// group), as a crash would.
func KillZygotes(r *Runner) error {
	ids := r.zygotes.State().IDs
	if len(ids) == 0 {
		return errors.New("no zygote to kill")
	}
	for _, id := range ids {
		pid, err := strconv.Atoi(id[strings.LastIndexByte(id, '/')+1:])
		if err != nil {
			return err
		}
		if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
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
		if !r.zygotes.State().Filling {
			break
		}
	}
	return r.zygotes.State().Cgroups
}

// NextZygotes is the number of successors started ahead and not yet
// promoted.
func NextZygotes(r *Runner) int { return r.zygotes.State().Next }

// ZygoteIDs lists the live zygotes as "<tenant>/<nsjail pid>".
func ZygoteIDs(r *Runner) []string { return r.zygotes.State().IDs }

// CgroupsReused is how many finished runs' cgroups were reset for another
// run at level process.
func CgroupsReused(r *Runner) int64 { return r.zygotes.State().CgroupsReused }

// CgroupVersion is the cgroup version the runner uses.
func CgroupVersion(r *Runner) int { return r.cg.Version() }

// EndedWithEnvelope is how many level-process runs ended as soon as their
// harness closed a complete envelope.
func EndedWithEnvelope(r *Runner) int64 { return r.zygotes.State().EndedEarly }

// LiveProcessesOfEndedRuns lists the processes in the cgroups of runs that
// ended (recycle has not reset or removed them yet) that are neither dying
// (in exit, a zombie) nor killed (SIGKILL pending): a process of an ended
// run that could still execute.
func LiveProcessesOfEndedRuns(r *Runner) []string {
	var live []string
	for _, f := range r.zygotes.State().EndedThreadFiles {
		data, _ := os.ReadFile(f)
		for _, tid := range strings.Fields(string(data)) {
			if !dyingOrKilled(tid) {
				live = append(live, filepath.Dir(f)+": "+tid+" "+describeTask(tid))
			}
		}
	}
	return live
}

// describeTask says what a task is, for a failure's message: its stat,
// its identity and signal lines, and whether it is still live 100 ms later.
func describeTask(tid string) string {
	stat, _ := os.ReadFile("/proc/" + tid + "/stat")
	var keep []string
	if status, err := os.ReadFile("/proc/" + tid + "/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			for _, key := range []string{"Name:", "State:", "Tgid:", "PPid:", "NSpid:", "Threads:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:"} {
				if strings.HasPrefix(line, key) {
					keep = append(keep, strings.Join(strings.Fields(line), " "))
				}
			}
		}
	}
	cgroup, _ := os.ReadFile("/proc/" + tid + "/cgroup")
	sc, _ := os.ReadFile("/proc/" + tid + "/syscall")
	wchan, _ := os.ReadFile("/proc/" + tid + "/wchan")
	keep = append(keep, "syscall "+strings.TrimSpace(string(sc)), "wchan "+string(wchan))
	time.Sleep(100 * time.Millisecond)
	later := "gone or dying 100 ms later"
	if !dyingOrKilled(tid) {
		later = "STILL LIVE 100 ms later"
	}
	return fmt.Sprintf("(stat %q; %s; cgroups %q; %s)", strings.TrimSpace(string(stat)), strings.Join(keep, "; "), strings.TrimSpace(string(cgroup)), later)
}

func dyingOrKilled(tid string) bool {
	stat, err := os.ReadFile("/proc/" + tid + "/stat")
	if err != nil {
		return true // gone
	}
	// Fields after the command (which may hold spaces): state is the
	// first, flags the seventh.
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 7 {
		return true
	}
	if f[0] == "Z" || f[0] == "X" {
		return true
	}
	// PF_EXITING, or PF_POSTCOREDUMP: Linux 5.16 and later set it first
	// thing in do_exit, with the thread group's SIGNAL_GROUP_EXIT, which
	// makes the kernel drop a SIGKILL sent after it. A harness that
	// exits on its own after its envelope and is killed in that moment
	// shows neither PF_EXITING nor a pending SIGKILL until exit_signals,
	// which waits for a cgroup migration under way (a spare being moved
	// into its cgroup): it cannot return to user space all the same.
	if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&(0x4|0x8) != 0 {
		return true
	}
	status, err := os.ReadFile("/proc/" + tid + "/status")
	if err != nil {
		return true
	}
	for line := range strings.Lines(string(status)) {
		for _, key := range []string{"SigPnd:", "ShdPnd:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(9-1)) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// ZygoteScoped reports whether a live zygote's runs get the Landlock scope
// on abstract unix sockets (the kernel has it: Linux 6.12+); ok is false
// when no zygote is live.
func ZygoteScoped(r *Runner) (scoped, ok bool) {
	st := r.zygotes.State()
	return st.Scoped, st.ScopeKnown
}
