// Package cgroups manages the cgroups of the jails' runs, on cgroup v1 and
// v2 alike: it detects which the host has (New, ProbeHost), sets up and
// delegates the parent cgroup (Setup), creates each run's cgroup with its
// limits (Manager.Create), moves processes into it (Run.Enter), reads its
// usage and counters (Run.CPUUsage, Run.Stats), resets it for another run
// (Run.Reset) and removes it (Run.Remove, Manager.Sweep for what dead
// processes left). It is the only place that knows cgroup file names; the
// runner and the zygotes consume a Manager and its Runs. (runc's
// libcontainer/cgroups holds the same job, fs and fs2 behind one manager.)
package cgroups

// Cgroup layout. Every run gets its own cgroup that the runner creates and
// owns, below Config.CgroupParent:
//
//	v1: /sys/fs/cgroup/{memory,pids,cpu}/<parent>/<run>/NSJAIL.<pid>
//	v2: /sys/fs/cgroup/<parent>/<run>/NSJAIL.<pid>
//
// nsjail creates (and at exit deletes) NSJAIL.<pid> below the run's cgroup.
//
// CPU time is accounted for the whole jail (every process together) so the
// runner can enforce Limits.CPUMS on the jail, not per process:
//
//	v2:                       cpu.stat usage_usec of the run's cgroup
//	v1, cpu and cpuacct       cpuacct.usage of the run's cpu cgroup
//	    mounted together:
//	v1 with a hybrid cgroup2  cpu.stat usage_usec of <unified>/<parent>/<run>,
//	    mount (unified):      which nsjail is started in (CLONE_INTO_CGROUP),
//	                          so every process of the jail is born in it
//	otherwise:                none; RLIMIT_CPU per process and rusage remain
// The run's own cgroup carries the binding memory and pids limits, so its
// counters (peak usage, limit hits, OOM kills) are still there to read after
// nsjail is gone; the runner reads them and then removes the run's cgroup
// together with anything nsjail left behind (it cannot clean up when it is
// killed). nsjail's own memory limit is set slightly above the run's so that
// the run's cgroup is the one that hits the limit and records it.

// FSRoot is where the cgroup hierarchies are mounted.
const FSRoot = "/sys/fs/cgroup"

// CPUMsPerSec is the CPU bandwidth of one jail, milliseconds per second:
// one CPU, as nsjail gives a jail (cgroup_cpu_ms_per_sec) and as a run's
// own cgroup is limited to (a run at level process sits in it itself).
const CPUMsPerSec = 1000

// Hint is what an operator can do when the host refuses the jail its
// cgroups (shared with the classifier's reading of nsjail's log).
const Hint = "the jail needs memory, pids and cpu cgroups it can create: run execgate as root with " +
	"/sys/fs/cgroup mounted read-write (in a container: --privileged, or a private cgroup namespace and CAP_SYS_ADMIN, " +
	"with which execgate remounts its own cgroup2 read-write; under systemd: Delegate=yes), or set sandbox.cgroups to the version the host has"

// Probe is what ProbeHost found: the cgroups a runner would use.
type Probe struct {
	Version int    // 1 or 2
	Root    string // v2: the cgroup2 mount; v1: the directory of the controller mounts
	// Parents are the parent cgroup's directories (one per v1 hierarchy),
	// each proven to take a child cgroup.
	Parents []string
	// Detail describes the layout in a line, for `execgate diagnose`.
	Detail string
}
