package sandbox

import "fmt"

// Isolation levels of a run (DESIGN §14): policy decides which one a run
// gets (policy.Decision.Isolation), the runner honours it.
//
//	jail     a fresh nsjail per run: new namespaces, cgroups, interpreter.
//	         The default for every tenant.
//	process  a fresh process per run, forked from a warm zygote: one jail
//	         per (tenant, profile), built by the same profile as level jail,
//	         that has started Python and imported the harness and never runs
//	         tool code itself (zygote_linux.go). Each run gets its own mount
//	         namespace with an empty private /tmp and /dev/shm, its own
//	         IPC namespace (SysV shared memory, semaphores and message
//	         queues, POSIX message queues: destroyed by the kernel with
//	         the run's last process), its own cgroup (memory, pids, CPU)
//	         created by the runner, and is killed whole when its envelope
//	         is produced. What it does not get: a kernel boundary between
//	         two runs of the same tenant beyond that (they share the
//	         zygote's pid and network namespaces, the user namespace above
//	         their own and its host uid), which is why policy grants it.
const (
	IsolationJail    = "jail"
	IsolationProcess = "process"
)

// ZygoteConfig is sandbox.zygotes: the budget of warm zygotes for level
// process. Zero values mean the defaults below.
type ZygoteConfig struct {
	// Max is how many zygotes may live at once, all tenants together.
	// Default 8.
	Max int `yaml:"max" json:"max"`
	// MemoryMB is the memory budget of the zygotes together, MiB: each
	// counts its profile's memory limit (the cap of its own cgroup; its
	// runs each have their own cgroup with the same limit). Default 4096.
	MemoryMB int64 `yaml:"memory_mb" json:"memory_mb"`
	// IdleMS retires a zygote that ran nothing for this long,
	// milliseconds. Default 60000.
	IdleMS int64 `yaml:"idle_ms" json:"idle_ms"`
	// MaxRuns retires a zygote after this many runs (a new one is started
	// on demand). Default 1000.
	MaxRuns int `yaml:"max_runs" json:"max_runs"`
	// StartMS bounds a zygote's start (nsjail, Python, imports, its first
	// spare), milliseconds; a zygote not ready by then is stopped and the
	// run is unavailable. Default 10000; raise it on a slow host (an
	// emulated VM takes several seconds).
	StartMS int64 `yaml:"start_ms" json:"start_ms"`
}

// Defaults for ZygoteConfig.
const (
	DefaultZygoteMax      = 8
	DefaultZygoteMemoryMB = 4096
	DefaultZygoteIdleMS   = 60000
	DefaultZygoteMaxRuns  = 1000
	DefaultZygoteStartMS  = 10000
)

// withDefaults returns c with zero fields defaulted.
func (c ZygoteConfig) withDefaults() ZygoteConfig {
	if c.Max == 0 {
		c.Max = DefaultZygoteMax
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultZygoteMemoryMB
	}
	if c.IdleMS == 0 {
		c.IdleMS = DefaultZygoteIdleMS
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = DefaultZygoteMaxRuns
	}
	if c.StartMS == 0 {
		c.StartMS = DefaultZygoteStartMS
	}
	return c
}

// Validate reports a negative value, naming its key.
func (c ZygoteConfig) Validate() error {
	switch {
	case c.Max < 0:
		return fmt.Errorf("sandbox.zygotes.max: %d is negative", c.Max)
	case c.MemoryMB < 0:
		return fmt.Errorf("sandbox.zygotes.memory_mb: %d is negative", c.MemoryMB)
	case c.IdleMS < 0:
		return fmt.Errorf("sandbox.zygotes.idle_ms: %d is negative", c.IdleMS)
	case c.MaxRuns < 0:
		return fmt.Errorf("sandbox.zygotes.max_runs: %d is negative", c.MaxRuns)
	case c.StartMS < 0:
		return fmt.Errorf("sandbox.zygotes.start_ms: %d is negative", c.StartMS)
	}
	return nil
}

// checkProcessSpec refuses what level process cannot hold (policy does not
// offer it for these; see policies/isolation.rego): network proxy (one
// egress socket per zygote could not attribute a connection to its run),
// JavaScript and TypeScript (the zygote is a Python interpreter), packages
// (a zygote binds no environment), and test mode.
func checkProcessSpec(spec Spec) error {
	switch {
	case spec.Language != LanguagePython:
		return fmt.Errorf("isolation process: language %q runs at level jail only", spec.Language)
	case spec.Network == NetworkProxy:
		return fmt.Errorf("isolation process: network proxy runs at level jail only (egress attempts could not be attributed to one run)")
	case len(spec.Requirements) > 0 || spec.Lock != "":
		return fmt.Errorf("isolation process: runs with packages run at level jail only")
	case spec.Mode != "run":
		return fmt.Errorf("isolation process: mode %q runs at level jail only", spec.Mode)
	}
	return nil
}
