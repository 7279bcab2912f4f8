package sandbox

import (
	"fmt"
	"strings"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// Isolation levels of a run (DESIGN §14): policy decides which one a run
// gets (policy.Decision.Isolation), the runner honours it.
//
//	jail     a fresh nsjail per run: new namespaces, cgroups, interpreter.
//	         The default for every tenant.
//	process  a fresh process per run, forked from a warm zygote: one jail
//	         per (tenant, profile), built by the same profile as level jail,
//	         that has started Python (and, for Python tools, imported the
//	         harness) and never runs tool code itself (package zygote).
//	         Each run gets its own mount
//	         namespace with an empty private /tmp and /dev/shm, its own
//	         IPC namespace (SysV shared memory, semaphores and message
//	         queues, POSIX message queues: destroyed by the kernel with
//	         the run's last process), its own cgroup (memory, pids, CPU)
//	         created by the runner, and is killed whole when its envelope
//	         is produced. A JavaScript or TypeScript run's process then
//	         execve's Deno on the harness with level jail's flags: every
//	         run is a fresh Deno, started ahead of the run in the run's
//	         own cgroup. What a run does not get: a kernel boundary between
//	         two runs of the same tenant beyond that (they share the
//	         zygote's pid and network namespaces, the user namespace above
//	         their own and its host uid), which is why policy grants it.
const (
	IsolationJail    = "jail"
	IsolationProcess = "process"
)

// checkProcessSpec refuses what level process cannot hold (policy does not
// offer it for these; see policies/isolation.rego): network proxy (one
// egress socket per zygote could not attribute a connection to its run),
// packages (a zygote binds no environment), and modes other than run (test
// mode's fixtures are meant for level jail; mode validate runs `deno check`
// in a jail of its own). Python, JavaScript and TypeScript all run.
func checkProcessSpec(spec Spec) error {
	switch {
	case spec.Network == NetworkProxy:
		return fmt.Errorf("isolation process: network proxy runs at level jail only (egress attempts could not be attributed to one run)")
	case spec.Deps != "":
		return fmt.Errorf("isolation process: runs with packages run at level jail only")
	case spec.Mode != "run":
		return fmt.Errorf("isolation process: mode %q runs at level jail only", spec.Mode)
	}
	return nil
}

// zygoteConfig turns the rendered level-jail config of p into the
// zygote's (the differences are listed in package zygote's doc). Each
// replaced line must be there exactly once, and the exec_bin block must be
// the one renderConfig writes for p, so a change to renderConfig cannot
// silently leave the zygote with the wrong one.
func zygoteConfig(text string, p profile) (string, error) {
	block := execBlock(jailCommand(p))
	head, ok := strings.CutSuffix(text, block)
	found := map[string]int{}
	if ok && !strings.Contains(head, "exec_bin {") {
		found["exec"]++
	}
	lines := strings.Split(head, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "time_limit: "):
			lines[i] = "time_limit: 0"
			found["time_limit"]++
		case strings.HasPrefix(l, "rlimit_cpu: "):
			lines[i] = l + "\nrlimit_cpu_type: INF"
			found["rlimit_cpu"]++
		case strings.HasPrefix(l, `mount { dst: "/proc" fstype: "proc" rw: false `):
			lines[i] = strings.Replace(l, "rw: false", "rw: true", 1)
			found["proc"]++
		case strings.HasPrefix(l, "seccomp_string: "):
			lines[i] = "seccomp_string: " + q(seccomp.ZygotePolicy())
			found["seccomp"]++
		}
	}
	for _, k := range []string{"time_limit", "rlimit_cpu", "proc", "seccomp", "exec"} {
		if found[k] != 1 {
			return "", fmt.Errorf("zygote config: the rendered profile has %d %s lines, not 1", found[k], k)
		}
	}
	return strings.Join(lines, "\n") + execBlock(jaillayout.PythonPath, zygoteArgv(p)), nil
}

// zygoteArgv starts the zygote (execgate_zygote.py) in the jail's python3,
// as harnessArgv starts the harness; a Deno profile's names, after
// --exec, the command its runs' processes execve (level jail's:
// denoCommand).
func zygoteArgv(p profile) []string {
	argv := []string{"-I", "-S", "-B", "-u", harness.Dir + "/" + harness.ZygoteEntry}
	if p.Runtime.deno() {
		path, args := denoCommand(p)
		argv = append(append(argv, "--exec", path), args...)
	}
	return argv
}
