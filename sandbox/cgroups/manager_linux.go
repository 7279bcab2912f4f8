package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/execgate/execgate/sandbox/internal/runid"
	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

const (
	cgroup1Magic = 0x27e0eb
	cgroup2Magic = 0x63677270
)

// v1Controllers are the cgroup v1 hierarchies a run uses.
var v1Controllers = []string{"memory", "pids", "cpu"}

// Manager manages the per-run cgroups of one cgroup version. It holds no
// mutable state after Setup and is safe for concurrent use.
type Manager struct {
	version int      // 1 or 2
	root    string   // v1: directory holding the controller mounts; v2: the cgroup execgate's tree goes below (v2Base)
	mount   string   // v2: the cgroup2 mount
	baseWhy string   // v2: why root is where it is (v2Base)
	ctrls   []string // v2: the controllers runs get (v2Controllers the host offers), set by Setup
	parent  string   // Config.CgroupParent
	acct    acctKind
	unified string // the hybrid cgroup2 mount (acctUnified only)
	v2root  string // v1 only: a cgroup2 mount found but not used (ProbeCgroups reports it)
}

// acctKind is how a run's CPU time is read (see the layout above).
type acctKind int

const (
	acctNone      acctKind = iota
	acctV2                 // cpu.stat in the run's cgroup
	acctV1Cpuacct          // cpuacct.usage in the run's cpu cgroup (cpu,cpuacct co-mounted)
	acctUnified            // cpu.stat in the run's cgroup of the hybrid cgroup2 mount
)

func (k acctKind) String() string {
	return [...]string{"none", "cgroup v2 cpu.stat", "cgroup v1 cpuacct", "hybrid cgroup2 cpu.stat"}[k]
}

// New picks the cgroup version for mode ("auto", "v1", "v2") under FSRoot,
// for runs below the parent cgroup parent (sandbox.cgroup_parent). Nothing
// is changed on the host until Setup. A host without usable cgroups is an
// *unavailable.Error.
func New(mode, parent string) (*Manager, error) {
	return detectCgroupsWith(mode, FSRoot, parent, isFS)
}

// detectCgroupsWith is detectCgroups with the filesystem-type test
// injected (tests lay out fake mounts in a temp dir).
func detectCgroupsWith(mode, root, parent string, isFS func(path string, magic int64) bool) (*Manager, error) {
	v2root := ""
	if isFS(root, cgroup2Magic) {
		v2root = root
	} else if u := filepath.Join(root, "unified"); isFS(u, cgroup2Magic) && hasControllers(u, "memory", "pids") {
		v2root = u
	}
	v1ok := true
	for _, c := range v1Controllers {
		if !isFS(filepath.Join(root, c), cgroup1Magic) {
			v1ok = false
		}
	}
	switch {
	case (mode == "auto" || mode == "v2") && v2root != "" && hasControllers(v2root, "memory", "pids"):
		base, why := v2Base(v2root, selfCgroupFile)
		return &Manager{version: 2, root: base, mount: v2root, baseWhy: why, parent: parent, acct: acctV2}, nil
	case (mode == "auto" || mode == "v1") && v1ok:
		c := &Manager{version: 1, root: root, parent: parent, v2root: v2root}
		if _, err := os.Stat(filepath.Join(root, "cpu", "cpuacct.usage")); err == nil {
			c.acct = acctV1Cpuacct
		} else if u := filepath.Join(root, "unified"); isFS(u, cgroup2Magic) {
			if _, err := os.Stat(filepath.Join(u, "cpu.stat")); err == nil {
				c.acct, c.unified = acctUnified, u
			}
		}
		return c, nil
	}
	want := map[string]string{"auto": "a cgroup v2 mount with the memory and pids controllers, or cgroup v1 memory, pids and cpu hierarchies",
		"v1": "cgroup v1 memory, pids and cpu hierarchies", "v2": "a cgroup v2 mount with the memory and pids controllers"}[mode]
	return nil, &unavailable.Error{
		Reason: fmt.Sprintf("no usable cgroups under %s (sandbox.cgroups=%s needs %s)", root, mode, want),
		Hint:   Hint,
	}
}

// Version is the cgroup version, 1 or 2.
func (c *Manager) Version() int { return c.version }

// Root is, on v1, the directory holding the controller mounts; on v2, the
// cgroup execgate's tree goes below.
func (c *Manager) Root() string { return c.root }

// Parent is the parent cgroup's name, relative to each hierarchy's root.
func (c *Manager) Parent() string { return c.parent }

// Accounting says how a run's CPU time is measured: "none" where the host
// offers no cgroup for it.
func (c *Manager) Accounting() string { return c.acct.String() }

// CPUAccounted reports whether a run's CPU time is read from its cgroup
// (all its processes together); without, only RLIMIT_CPU per process holds.
func (c *Manager) CPUAccounted() bool { return c.acct != acctNone }

// ParentNsjailArgs are nsjail's flags that place a jail directly below the
// parent cgroup (no run cgroup of its own: a benchmark's raw nsjail).
func (c *Manager) ParentNsjailArgs() []string {
	if c.version == 1 {
		return []string{"--cgroup_mem_parent", c.parent, "--cgroup_pids_parent", c.parent, "--cgroup_cpu_parent", c.parent}
	}
	return []string{"--cgroupv2_mount", filepath.Join(c.root, c.parent)}
}

func isFS(path string, magic int64) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return false
	}
	return int64(st.Type) == magic
}

func hasControllers(dir string, want ...string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return false
	}
	have := strings.Fields(string(data))
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// Setup creates the parent cgroup(s) once and, on v2, delegates the
// controllers down to it.
func (c *Manager) Setup() error {
	if c.version == 1 {
		if c.acct == acctUnified {
			// CPU accounting is worth having, not worth refusing to run
			// for: a hybrid mount the runner may not write leaves it off.
			if err := os.MkdirAll(filepath.Join(c.unified, c.parent), 0o755); err != nil {
				c.acct, c.unified = acctNone, ""
			}
		}
		for _, dir := range c.ParentDirs() {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return c.unavailable("creating the parent cgroup", err)
			}
		}
		return nil
	}
	return c.setupV2()
}

// Sweep removes run cgroups whose owning process is gone: a runner killed
// mid-run, or a process that exited with warm jails without Close (nsjail
// dies with its runner, so nobody else removes them). Cgroups of live
// processes, this one included, are left alone. It returns how many runs
// it removed.
func (c *Manager) Sweep() int {
	dirs := c.ParentDirs()
	removed := map[string]bool{}
	deadline := time.Now().Add(time.Second)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !runid.Orphaned(e.Name()) {
				continue
			}
			if removeCgroupDir(filepath.Join(dir, e.Name()), deadline) == nil {
				removed[e.Name()] = true
			}
		}
	}
	return len(removed)
}

// parentDirs are the parent cgroup's directories, one per hierarchy.
func (c *Manager) ParentDirs() []string {
	if c.version == 2 {
		return []string{filepath.Join(c.root, c.parent)}
	}
	var dirs []string
	for _, ctrl := range v1Controllers {
		dirs = append(dirs, filepath.Join(c.root, ctrl, c.parent))
	}
	if c.acct == acctUnified {
		dirs = append(dirs, filepath.Join(c.unified, c.parent))
	}
	return dirs
}

func (c *Manager) unavailable(doing string, err error) error {
	return &unavailable.Error{Reason: "cgroups: " + doing, Hint: Hint, Err: err}
}
