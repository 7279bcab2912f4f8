// Package zygote is isolation level process on the host side: warm
// zygotes (one jail per tenant and profile, running execgate_zygote.py,
// never running tool code itself), the spare processes they fork ahead of
// runs, each moved into a cgroup of its own, and the lifecycle of one run
// (fork, wait, kill, reap, recycle its cgroup), within the budget of
// Config. The runner (package sandbox) starts a zygote's jail (StartFunc,
// Jail), hands a run its request, reads its output and classifies the
// outcome: this package never sees a tool's request or result.
//
// A zygote is a
// jail started by the runner (startJail) from the run's profile, like a warm jail, with
// four differences to its nsjail config (the runner's zygoteConfig): it runs
// execgate_zygote.py instead of the harness (for a JavaScript profile, with
// the Deno command of level jail after --exec: each run's process execve's
// it after its setup, so every JavaScript or TypeScript run is a fresh Deno
// started ahead of the run); nsjail's time_limit and
// RLIMIT_CPU are off for it (the zygote lives across runs; each run's
// process sets RLIMIT_CPU back to the profile's value before anything
// else); its /proc is mounted read-write so that its children can write
// their own uid and gid maps (each child then remounts it read-only for
// itself); and its seccomp policy lets
// unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWIPC) and mount with two exact
// flag sets through, which a child uses for its private /tmp and its own
// IPC namespace and then denies itself (killing, as at level jail) with a
// filter of its own before the harness starts. The tool's process is
// therefore under a seccomp policy at least as strict as level jail's.
// Descriptors of a zygote (startJail's contract, used differently): 0 a
// pipe from the runner, unused (closed when the zygote retires) 1, 2 the
// zygote's own output, captured for diagnosis 3 a pipe, unused 5 the
// control socket (startJail's bridge socketpair): fork requests carrying
// each run's descriptors (SCM_RIGHTS), fork replies and exit statuses
// (protocol in execgate_zygote.py) One run: ahead of it (prepareSpare), the
// runner creates a run's cgroup (cgroups.Manager.Create, the same as a jail's),
// its workspace (package workspace: two detached tmpfs) and
// a sync socketpair, sends one end to the zygote, which forks. The child
// reports on the sync socket; the kernel tells the runner its host pid
// (SCM_CREDENTIALS), the runner moves it into the run's cgroup and hands it
// the run's pipes (stdin, stdout, stderr, result), tool bridge socket and
// workspace (a read-only clone of the inputs, out/'s clone) over the sync
// socket; the child does its setup (private /tmp, its /workspace moved
// into its mount namespace, Landlock scope, capabilities, seccomp) and its
// harness (a Python one in the child itself, or the Deno it execve'd)
// waits for the request on stdin. The runner writes the run's
// input files into the workspace at the hand-off (Run.Workspace) and
// collects its artifacts once Wait has killed every process of the run. A zygote keeps zygoteSpares such processes ready, and starts its
// successor before it retires (startNextLocked). When the run comes (Pool.Fork), the
// runner writes the request. From then on the run is watched as a jail is
// (wall deadline, CPU from the cgroup, memory counters); when the child
// exits (the zygote reports its wait status) or is stopped, every process
// left in the run's cgroup is killed, so daemons, setsid and double-forked
// children end with the envelope. A harness that closed a whole envelope
// while it is the run's one process ends the run at once, killed rather
// than waited for (Run.endedWithEnvelope). A finished run's cgroup is
// reset for the zygote's next spare where the host allows it (recycle,
// cgroup v1). A zygote that dies ends its runs in flight as SandboxCrashed;
// the next run starts a new one. Nothing is ever retried.
package zygote

import (
	"fmt"
	"net"

	"github.com/execgate/execgate/limits"
)

// Config is sandbox.zygotes: the budget of warm zygotes for level process.
// Zero values mean the defaults below.
type Config struct {
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

// Defaults for Config.
const (
	DefaultMax      = 8
	DefaultMemoryMB = 4096
	DefaultIdleMS   = 60000
	DefaultMaxRuns  = 1000
	DefaultStartMS  = 10000
)

// WithDefaults returns c with zero fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Max == 0 {
		c.Max = DefaultMax
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.IdleMS == 0 {
		c.IdleMS = DefaultIdleMS
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = DefaultMaxRuns
	}
	if c.StartMS == 0 {
		c.StartMS = DefaultStartMS
	}
	return c
}

// Validate reports a negative value, naming its key.
func (c Config) Validate() error {
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

// Key identifies a zygote: one per tenant and profile.
type Key struct {
	Tenant string
	// Profile names the runs' profile (the runner's, as a string that
	// tells every two profiles apart).
	Profile string
	// Limits are the profile's limits: each run's cgroup gets them, and
	// the zygote counts Limits.MemoryMB against the budget.
	Limits limits.Limits
}

// Jail is the nsjail a zygote runs in, started by the runner from the run's
// profile with the zygote's changes to its config. Its stdin is closed; fd
// 5 is the control socket (fork requests carrying each run's descriptors,
// fork replies and exit statuses; protocol in execgate_zygote.py).
type Jail interface {
	// Control is the zygote's control socket.
	Control() *net.UnixConn
	// Exited is closed once nsjail has exited.
	Exited() <-chan struct{}
	// Discard stops the jail if it still runs, and removes its cgroup
	// and directory.
	Discard() error
	// Stderr is the zygote's own output so far, for diagnosis.
	Stderr() string
	// Unavailable is the jail's failure as an *unavailable.Error: reason,
	// with nsjail's log and what an operator can do.
	Unavailable(reason string) error
	// Pid is nsjail's pid (its process group's).
	Pid() int
	// UID is the jail's host uid: its runs' tools run as it, and own
	// their /workspace/out.
	UID() uint32
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…[truncated]"
}
