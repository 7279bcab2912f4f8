package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

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

const (
	cgroup1Magic = 0x27e0eb
	cgroup2Magic = 0x63677270
)

// v1Controllers are the cgroup v1 hierarchies a run uses.
var v1Controllers = []string{"memory", "pids", "cpu"}

// cgroups manages the per-run cgroups of one cgroup version. It holds no
// mutable state after construction and is safe for concurrent use.
type cgroups struct {
	version int      // 1 or 2
	root    string   // v1: directory holding the controller mounts; v2: the cgroup execgate's tree goes below (v2Base)
	mount   string   // v2: the cgroup2 mount
	baseWhy string   // v2: why root is where it is (v2Base)
	ctrls   []string // v2: the controllers runs get (v2Controllers the host offers), set by setup
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

// detectCgroups picks the cgroup version for mode ("auto", "v1", "v2") under
// root (normally /sys/fs/cgroup).
func detectCgroups(mode, root, parent string) (*cgroups, error) {
	return detectCgroupsWith(mode, root, parent, isFS)
}

// detectCgroupsWith is detectCgroups with the filesystem-type test
// injected (tests lay out fake mounts in a temp dir).
func detectCgroupsWith(mode, root, parent string, isFS func(path string, magic int64) bool) (*cgroups, error) {
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
		return &cgroups{version: 2, root: base, mount: v2root, baseWhy: why, parent: parent, acct: acctV2}, nil
	case (mode == "auto" || mode == "v1") && v1ok:
		c := &cgroups{version: 1, root: root, parent: parent, v2root: v2root}
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
	return nil, &UnavailableError{
		Reason: fmt.Sprintf("no usable cgroups under %s (sandbox.cgroups=%s needs %s)", root, mode, want),
		Hint:   cgroupHint,
	}
}

// CgroupProbe is what ProbeCgroups found: the cgroups a runner would use.
type CgroupProbe struct {
	Version int    // 1 or 2
	Root    string // v2: the cgroup2 mount; v1: the directory of the controller mounts
	// Parents are the parent cgroup's directories (one per v1 hierarchy),
	// each proven to take a child cgroup.
	Parents []string
	// Detail describes the layout in a line, for `execgate diagnose`.
	Detail string
}

// ProbeCgroups detects the cgroups a runner with cfg would use (the rules
// of NewRunner) and proves the parent cgroup usable by creating and
// removing a probe cgroup below it; on v2 the probe must have the memory
// and pids controllers (delegated to the parent). It enables nothing: a
// parent NewRunner would still set up can fail here. A failure is an
// *UnavailableError whose Reason and Hint say what to do.
func ProbeCgroups(cfg Config) (CgroupProbe, error) {
	cfg = cfg.withDefaults()
	return probeCgroups(cfg.Cgroups, cgroupFSRoot, cfg.CgroupParent, isFS)
}

func probeCgroups(mode, root, parent string, isFS func(string, int64) bool) (CgroupProbe, error) {
	cg, err := detectCgroupsWith(mode, root, parent, isFS)
	if err != nil {
		return CgroupProbe{}, err
	}
	p := CgroupProbe{Version: cg.version, Root: cg.root, Parents: cg.parentDirs()}
	if cg.version == 2 {
		return cg.probeV2(p)
	}
	if cg.acct == acctUnified {
		p.Parents = p.Parents[:len(v1Controllers)] // the hybrid mount is optional
	}
	probe := fmt.Sprintf("diagnose-%d", os.Getpid())
	for _, dir := range p.Parents {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return p, &UnavailableError{Reason: fmt.Sprintf("v1: creating the parent cgroup %s", dir), Hint: cgroupHint, Err: err}
		}
		pd := filepath.Join(dir, probe)
		if err := os.Mkdir(pd, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return p, &UnavailableError{Reason: fmt.Sprintf("v1: creating a cgroup below %s", dir), Hint: cgroupHint, Err: err}
		}
		os.Remove(pd)
	}
	p.Detail = fmt.Sprintf("v1 (memory, pids, cpu) under %s/{memory,pids,cpu}/%s", cg.root, cg.parent)
	if cg.v2root != "" {
		p.Detail += "; v2 at " + cg.v2root + " lacks the memory controller"
	}
	return p, nil
}

// probeV2 says what setup would do on cgroup v2 (v2Plan) without changing
// the host, and when the parent exists with its controllers already,
// proves it takes a child cgroup.
func (c *cgroups) probeV2(p CgroupProbe) (CgroupProbe, error) {
	plan, err := c.v2Plan()
	if err != nil {
		return p, err
	}
	parent := p.Parents[0]
	if len(plan.enable) == 0 && plan.create == "" {
		pd := filepath.Join(parent, fmt.Sprintf("diagnose-%d", os.Getpid()))
		if err := os.Mkdir(pd, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return p, &UnavailableError{Reason: "v2: creating a cgroup below " + parent, Hint: v2Hint, Err: err}
		}
		ok := hasControllers(pd, "memory", "pids")
		os.Remove(pd)
		if !ok {
			return p, &UnavailableError{Reason: "v2: a cgroup below " + parent + " lacks the memory or pids controller", Hint: v2Hint}
		}
	}
	p.Detail = fmt.Sprintf("v2 at %s; runs below %s (%s); %s", c.mount, parent, c.baseWhy, plan)
	return p, nil
}

// selfCgroupFile is where a process reads its own cgroup (a variable for
// tests).
var selfCgroupFile = "/proc/self/cgroup"

// v2Base is the cgroup execgate's tree goes below on the cgroup2 mount:
// the process's own cgroup when it was delegated to it (systemd marks a
// unit's cgroup with Delegate=yes by the trusted.delegate xattr, or
// user.delegate for a user manager's), else the mount's root: in a
// container's cgroup namespace that is the container's own cgroup; on a
// host without delegation execgate, as root, keeps a top-level tree (as
// container runtimes' cgroupfs drivers do). why says which, for diagnose.
func v2Base(mount, selfFile string) (dir, why string) {
	own := ownCgroupV2(selfFile)
	if own != "" && own != "/" {
		d := filepath.Join(mount, own)
		if attr := delegated(d); attr != "" {
			return d, "its own cgroup, delegated (" + attr + ")"
		}
		// An execgate started after another one moved the unit's
		// processes into its supervisor leaf keeps the unit's tree.
		if up := filepath.Dir(d); strings.HasSuffix(d, ".supervisor") && delegated(up) != "" {
			return up, "its own cgroup's parent, delegated (" + delegated(up) + "), whose supervisor leaf it is in"
		}
		return mount, "the cgroup2 mount's root: its own cgroup " + own + " is not delegated"
	}
	return mount, "the cgroup2 mount's root, its own cgroup namespace's"
}

// delegated names the xattr by which systemd marked dir delegated, or "".
func delegated(dir string) string {
	for _, attr := range []string{"trusted.delegate", "user.delegate"} {
		if n, err := syscall.Getxattr(dir, attr, make([]byte, 8)); err == nil && n > 0 {
			return attr
		}
	}
	return ""
}

// ownCgroupV2 is the process's cgroup on the unified hierarchy ("0::"),
// relative to its cgroup namespace; "" when unknown or outside it.
func ownCgroupV2(selfFile string) string {
	data, err := os.ReadFile(selfFile)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			if !strings.HasPrefix(path, "/") || strings.Contains(path, "/..") {
				return "" // outside the namespace's root
			}
			return path
		}
	}
	return ""
}

// v2Hint is what to change when a cgroup v2 host refuses execgate its tree.
const v2Hint = "give execgate a writable, delegated cgroup2: under systemd Delegate=yes (deploy/systemd/execgate.service); " +
	"in a container --privileged or --cgroupns=private with /sys/fs/cgroup mounted read-write; or set sandbox.cgroups to the version the host has"

// supervisorLeaf is the leaf cgroup processes sharing execgate's base
// cgroup are moved into so that the base may delegate controllers (cgroup
// v2 "no internal processes": only the root may both hold processes and
// enable controllers for its children).
func (c *cgroups) supervisorLeaf() string {
	return filepath.Join(c.root, strings.ReplaceAll(c.parent, "/", "-")+".supervisor")
}

// v2Controllers are the controllers a run's cgroup uses on v2; cpu only
// where the host has it (without it nsjail's RLIMIT_CPU still holds).
var v2Controllers = []string{"memory", "pids", "cpu"}

// v2Setup is what setup does on cgroup v2, planned by v2Plan.
type v2Setup struct {
	move   []string   // pids sharing the base cgroup, moved into the supervisor leaf first
	leaf   string     // the supervisor leaf (with move)
	create string     // the first directory of the tree that does not exist yet
	enable [][]string // per directory from the base down: {dir, controllers...}
}

func (s v2Setup) String() string {
	if len(s.enable) == 0 && s.create == "" {
		return "memory, pids and cpu delegated down to it already"
	}
	var parts []string
	if len(s.move) > 0 {
		parts = append(parts, fmt.Sprintf("moves the %d process(es) sharing its base cgroup (pids %s) into %s", len(s.move), strings.Join(s.move, " "), s.leaf))
	}
	for _, e := range s.enable {
		parts = append(parts, "enables +"+strings.Join(e[1:], " +")+" in "+e[0])
	}
	if s.create != "" {
		parts = append(parts, "creates "+s.create)
	}
	return "at the first run execgate " + strings.Join(parts, ", then ")
}

// v2Plan works out what setup would do on cgroup v2 and whether the host
// lets it, reading the tree only: every controller needed is offered to
// the base, its cgroupfs is writable, and processes that share the base
// (a container's shell entrypoint, an init such as tini, a sidecar, the
// other processes of a systemd unit) can be moved into a leaf. The
// error names the precise reason.
func (c *cgroups) v2Plan() (v2Setup, error) {
	var plan v2Setup
	var st syscall.Statfs_t
	if err := syscall.Statfs(c.root, &st); err != nil {
		return plan, &UnavailableError{Reason: "v2: reading " + c.root, Hint: v2Hint, Err: err}
	}
	readOnly := st.Flags&1 != 0 // ST_RDONLY
	offered, err := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
	if err != nil {
		return plan, &UnavailableError{Reason: "v2: reading " + filepath.Join(c.root, "cgroup.controllers"), Hint: v2Hint, Err: err}
	}
	want := controllersOffered(string(offered))
	for _, need := range []string{"memory", "pids"} {
		if !slices.Contains(want, need) {
			return plan, &UnavailableError{Reason: fmt.Sprintf("v2: the %s controller is not offered to %s (its cgroup.controllers: %q)", need, c.root, strings.TrimSpace(string(offered))),
				Hint: "enable it in the parent's cgroup.subtree_control (systemd: Delegate=yes on execgate's unit)"}
		}
	}
	dir := c.root
	parts := append([]string{""}, strings.Split(c.parent, "/")...)
	for i, part := range parts {
		dir = filepath.Join(dir, part)
		last := i == len(parts)-1
		if _, err := os.Stat(dir); err != nil {
			if readOnly {
				return plan, &UnavailableError{Reason: "v2: " + c.mount + " is mounted read-only, so " + dir + " cannot be created", Hint: v2Hint}
			}
			plan.create = dir
			break
		}
		if last {
			break // the parent's children get controllers at create
		}
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return plan, &UnavailableError{Reason: "v2: reading " + filepath.Join(dir, "cgroup.subtree_control"), Hint: v2Hint, Err: err}
		}
		on := strings.Fields(string(data))
		missing := []string{dir}
		for _, ctrl := range want {
			if !slices.Contains(on, ctrl) {
				missing = append(missing, ctrl)
			}
		}
		if len(missing) == 1 {
			continue
		}
		if readOnly {
			return plan, &UnavailableError{Reason: fmt.Sprintf("v2: %s is mounted read-only and %s does not delegate %s", c.mount, dir, strings.Join(missing[1:], ", ")), Hint: v2Hint}
		}
		plan.enable = append(plan.enable, missing)
		if i == 0 && !isRootCgroup(dir) {
			procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				return plan, &UnavailableError{Reason: "v2: reading " + filepath.Join(dir, "cgroup.procs"), Hint: v2Hint, Err: err}
			}
			plan.move, plan.leaf = strings.Fields(string(procs)), c.supervisorLeaf()
		}
	}
	return plan, nil
}

// v2Ctrls are the controllers a run's cgroup delegates to nsjail's (or
// the level-process tool leaf).
func (c *cgroups) v2Ctrls() []string {
	if c.ctrls == nil {
		return v2Controllers // a cgroups made without setup (tests)
	}
	return c.ctrls
}

// controllersOffered is the subset of v2Controllers in a cgroup.controllers.
func controllersOffered(offered string) []string {
	have := strings.Fields(offered)
	var want []string
	for _, c := range v2Controllers {
		if slices.Contains(have, c) {
			want = append(want, c)
		}
	}
	return want
}

// isRootCgroup: dir is the root of the whole v2 hierarchy (not a
// namespace's root), the one cgroup that may hold processes and enable
// controllers for its children; it has no cgroup.type.
func isRootCgroup(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.type"))
	return errors.Is(err, fs.ErrNotExist)
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

// setup creates the parent cgroup(s) once and, on v2, delegates the
// controllers down to it.
func (c *cgroups) setup() error {
	if c.version == 1 {
		if c.acct == acctUnified {
			// CPU accounting is worth having, not worth refusing to run
			// for: a hybrid mount the runner may not write leaves it off.
			if err := os.MkdirAll(filepath.Join(c.unified, c.parent), 0o755); err != nil {
				c.acct, c.unified = acctNone, ""
			}
		}
		for _, dir := range c.parentDirs() {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return c.unavailable("creating the parent cgroup", err)
			}
		}
		return nil
	}
	offered, err := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
	if err != nil {
		return c.unavailable("reading cgroup.controllers", err)
	}
	want := controllersOffered(string(offered))
	c.ctrls = want
	if err := c.enableControllers(c.root, want, true); err != nil {
		return err
	}
	dir := c.root
	parts := strings.Split(c.parent, "/")
	for i, part := range parts {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return c.unavailable("creating the parent cgroup", err)
		}
		if i < len(parts)-1 {
			if err := c.enableControllers(dir, want, false); err != nil {
				return err
			}
		}
	}
	// The parent's own children (the runs) get their controllers from it.
	return c.enableControllers(dir, want, false)
}

// enableControllers turns on ctrls for dir's children. At the root of a
// container's cgroup namespace, or in a systemd-delegated cgroup, the
// gateway shares dir with other processes (a shell entrypoint, an init
// such as tini, a sidecar; the unit's other processes) and dir cannot
// delegate while it holds any ("no internal processes"): like container
// inits and runc, the runner moves every one of them into a leaf first.
func (c *cgroups) enableControllers(dir string, ctrls []string, mayMove bool) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return c.unavailable("reading cgroup.subtree_control", err)
	}
	enabled := strings.Fields(string(data))
	for _, ctrl := range ctrls {
		if slices.Contains(enabled, ctrl) {
			continue
		}
		err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctrl)
		if errors.Is(err, syscall.EBUSY) && mayMove {
			if merr := c.moveIntoLeaf(dir); merr != nil {
				return merr
			}
			err = writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctrl)
		}
		if err != nil {
			return &UnavailableError{Reason: "cgroups: enabling the " + ctrl + " controller in " + dir, Hint: v2Hint, Err: err}
		}
	}
	return nil
}

// moveIntoLeaf moves every process in dir into the supervisor leaf,
// again while processes keep appearing (a process forking as it is
// moved), for at most a second.
func (c *cgroups) moveIntoLeaf(dir string) error {
	leaf := c.supervisorLeaf()
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return &UnavailableError{Reason: "cgroups: creating the leaf cgroup " + leaf + " for the processes sharing " + dir, Hint: v2Hint, Err: err}
	}
	deadline := time.Now().Add(time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return c.unavailable("reading "+filepath.Join(dir, "cgroup.procs"), err)
		}
		pids := strings.Fields(string(data))
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			if err := writeFile(filepath.Join(leaf, "cgroup.procs"), pid); err != nil && !errors.Is(err, syscall.ESRCH) {
				return &UnavailableError{Reason: fmt.Sprintf("cgroups: moving process %s from %s into the leaf %s", pid, dir, leaf), Hint: v2Hint, Err: err}
			}
		}
		if time.Now().After(deadline) {
			return &UnavailableError{Reason: "cgroups: processes keep appearing in " + dir + " while they are moved into " + leaf, Hint: v2Hint}
		}
	}
}

var runDirRE = regexp.MustCompile(`^run-([0-9]+)-[0-9a-f]+$`)

// sweep removes run cgroups whose owning process is gone: a runner killed
// mid-run, or a process that exited with warm jails without Close (nsjail
// dies with its runner, so nobody else removes them). Cgroups of live
// processes, this one included, are left alone. It returns how many runs
// it removed.
func (c *cgroups) sweep() int {
	dirs := c.parentDirs()
	removed := map[string]bool{}
	deadline := time.Now().Add(time.Second)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			m := runDirRE.FindStringSubmatch(e.Name())
			if m == nil || !e.IsDir() {
				continue
			}
			pid, err := strconv.Atoi(m[1])
			if err != nil || pid == os.Getpid() || processAlive(pid) {
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
func (c *cgroups) parentDirs() []string {
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

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (c *cgroups) unavailable(doing string, err error) error {
	return &UnavailableError{Reason: "cgroups: " + doing, Hint: cgroupHint, Err: err}
}

// runCgroup is the cgroup of one run.
type runCgroup struct {
	cg   *cgroups
	name string   // <parent>/<run>
	dirs []string // one per hierarchy (v1) or one (v2)
	// oomEvents (v1 only) is an eventfd the kernel signals when the run's
	// cgroup goes out of memory. v1 keeps OOM-kill counts in the victim's
	// own cgroup (nsjail's, deleted at exit), so the run's cgroup registers
	// for the notification instead. -1 when unused.
	oomEvents int
	oomCtl    *os.File
	// cpuFile is where the jail's CPU time is read ("" when the host has
	// no CPU accounting); cpuStat says it is a cpu.stat (usage_usec), not
	// a cpuacct.usage (nanoseconds).
	cpuFile string
	cpuStat bool
	// into is the open directory of the cgroup nsjail is started in
	// (CLONE_INTO_CGROUP), nil when it starts where the runner is.
	into *os.File
	// cpuBase and oomKillBase are the cumulative counters' values when the
	// cgroup was last reset for a new run (reset); zero for a new cgroup.
	cpuBase     time.Duration
	oomKillBase int64

	// files holds the cgroup's files a run reads or writes open, read and
	// written at offset 0 again and again (a run at level process uses
	// about 25 of them, and opening a kernfs file costs more than reading
	// it); -1 marks a file this host does not have. Closed by remove.
	fmu   sync.Mutex
	files map[string]int
}

// file returns an open descriptor of the cgroup file at path, for reading
// or for writing.
func (rc *runCgroup) file(path string, write bool) (int, error) {
	key, mode := path, syscall.O_RDONLY
	if write {
		key, mode = path+"\x00w", syscall.O_WRONLY
	}
	rc.fmu.Lock()
	defer rc.fmu.Unlock()
	if fd, ok := rc.files[key]; ok {
		if fd < 0 {
			return -1, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
		}
		return fd, nil
	}
	fd, err := syscall.Open(path, mode|syscall.O_CLOEXEC, 0)
	if err != nil {
		if err == syscall.ENOENT {
			rc.setFile(key, -1)
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	rc.setFile(key, fd)
	return fd, nil
}

func (rc *runCgroup) setFile(key string, fd int) {
	if rc.files == nil {
		rc.files = map[string]int{}
	}
	rc.files[key] = fd
}

// closeFiles closes the descriptors file opened.
func (rc *runCgroup) closeFiles() {
	rc.fmu.Lock()
	defer rc.fmu.Unlock()
	for _, fd := range rc.files {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	rc.files = nil
}

// read reads the whole cgroup file at path (from offset 0). A v1 list of
// processes or tasks is opened afresh each time: the kernel keeps the list
// an open file read first, for up to a second.
func (rc *runCgroup) read(path string) ([]byte, error) {
	var fd int
	var err error
	if base := filepath.Base(path); base == "cgroup.procs" || base == "tasks" {
		if fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		defer syscall.Close(fd)
	} else if fd, err = rc.file(path, false); err != nil {
		return nil, err
	}
	buf := make([]byte, 512)
	for {
		n, err := syscall.Pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// write writes value to the cgroup file at path, in one write.
func (rc *runCgroup) write(path, value string) error {
	fd, err := rc.file(path, true)
	if err == nil {
		_, err = syscall.Pwrite(fd, []byte(value), 0)
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// readInt is readInt (0 when unreadable) on the cgroup's open file.
func (rc *runCgroup) readInt(path string) int64 {
	data, err := rc.read(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return n
}

// readKey is readKeyOK on the cgroup's open file.
func (rc *runCgroup) readKey(path, key string) (int64, bool) {
	data, err := rc.read(path)
	if err != nil {
		return 0, false
	}
	return keyValue(data, key)
}

// cpuPeriodUS is the CFS period of a run's CPU bandwidth.
const cpuPeriodUS = 100000

// create makes the run's cgroup with its limits. On error nothing is left.
func (c *cgroups) create(run string, memBytes, pids int64) (*runCgroup, error) {
	rc := &runCgroup{cg: c, name: c.parent + "/" + run, oomEvents: -1}
	for _, d := range c.parentDirs() {
		rc.dirs = append(rc.dirs, filepath.Join(d, run))
	}
	switch c.acct {
	case acctV2:
		rc.cpuFile, rc.cpuStat = filepath.Join(rc.dirs[0], "cpu.stat"), true
	case acctV1Cpuacct:
		rc.cpuFile = filepath.Join(rc.dirs[2], "cpuacct.usage")
	case acctUnified:
		rc.cpuFile, rc.cpuStat = filepath.Join(rc.dirs[3], "cpu.stat"), true
	}
	for _, d := range rc.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			rc.remove(time.Second)
			return nil, c.unavailable("creating the run's cgroup", err)
		}
	}
	var writes [][2]string
	mem := strconv.FormatInt(memBytes, 10)
	if c.version == 1 {
		writes = [][2]string{
			{filepath.Join(rc.dirs[0], "memory.limit_in_bytes"), mem},
			{filepath.Join(rc.dirs[0], "memory.memsw.limit_in_bytes"), mem}, // only with swap accounting
			{filepath.Join(rc.dirs[1], "pids.max"), strconv.FormatInt(pids, 10)},
			// One CPU of bandwidth, as nsjail gives a jail (cgroup_cpu_ms_per_sec):
			// a run at level process sits in this cgroup itself.
			{filepath.Join(rc.dirs[2], "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodUS)},
			{filepath.Join(rc.dirs[2], "cpu.cfs_quota_us"), strconv.Itoa(cpuMsPerSec * cpuPeriodUS / 1000)},
		}
	} else {
		writes = [][2]string{
			{filepath.Join(rc.dirs[0], "cgroup.subtree_control"), "+" + strings.Join(c.v2Ctrls(), " +")},
			{filepath.Join(rc.dirs[0], "memory.max"), mem},
			{filepath.Join(rc.dirs[0], "memory.swap.max"), "0"}, // only with swap accounting
			{filepath.Join(rc.dirs[0], "pids.max"), strconv.FormatInt(pids, 10)},
			{filepath.Join(rc.dirs[0], "cpu.max"), fmt.Sprintf("%d %d", cpuMsPerSec*cpuPeriodUS/1000, cpuPeriodUS)},
		}
	}
	for _, w := range writes {
		err := writeFile(w[0], w[1])
		if err != nil && errors.Is(err, fs.ErrNotExist) && strings.Contains(w[0], "sw") {
			continue // no swap accounting on this host
		}
		if err != nil && errors.Is(err, fs.ErrNotExist) && strings.Contains(filepath.Base(w[0]), "cpu") {
			continue // no CPU bandwidth control on this host: nsjail's own limit still holds for jails
		}
		if err != nil {
			rc.remove(time.Second)
			return nil, c.unavailable("setting "+filepath.Base(w[0]), err)
		}
	}
	if c.version == 1 {
		if err := rc.watchOOM(); err != nil {
			rc.remove(time.Second)
			return nil, c.unavailable("registering for OOM notifications", err)
		}
	}
	if c.acct == acctUnified {
		f, err := os.Open(rc.dirs[3])
		if err != nil {
			rc.remove(time.Second)
			return nil, c.unavailable("opening the run's CPU accounting cgroup", err)
		}
		rc.into = f
	}
	return rc, nil
}

// cpuUsage returns the CPU time every process of the jail has used so far
// (those that exited included); ok is false without CPU accounting.
func (rc *runCgroup) cpuUsage() (used time.Duration, ok bool) {
	if rc.cpuFile == "" {
		return 0, false
	}
	if rc.cpuStat {
		us, found := rc.readKey(rc.cpuFile, "usage_usec")
		return time.Duration(us)*time.Microsecond - rc.cpuBase, found
	}
	data, err := rc.read(rc.cpuFile)
	if err != nil {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return time.Duration(ns) - rc.cpuBase, err == nil
}

// reuseSlackBytes is the most memory a finished run's v1 cgroup may still
// have charged and be reset for another run: the next run's effective
// limit and peak are off by at most this much. After a trivial run about
// 200-260 KiB stays charged (kernel objects freed lazily; only
// memory.force_empty, which costs as much as a new cgroup, reclaims them).
// A run at level jail starts with its interpreter's ≈ 10 MB charged; one
// at level process with none of the zygote's memory.
const reuseSlackBytes = 512 << 10

// reset makes a finished run's cgroup ready for another run with the same
// limits, so that a run at level process does not pay for creating and
// removing four v1 cgroups; false when it cannot, and the cgroup is to be
// removed. It holds only on cgroup v1, where every counter a run's outcome
// is read from can be reset or given a base: memory.max_usage_in_bytes
// and memory.failcnt are reset, the OOM eventfd drained, oom_kill and the
// CPU usage given a base. The cgroup must hold no process (every process
// of the last run is gone: no process ever joins a later run's cgroup)
// and at most reuseSlackBytes of charge (a v1 memory cgroup keeps page
// cache charged after its processes are gone).
// On cgroup v2, memory.peak cannot be reset for a reader that opens it
// afresh, so its cgroups are never reused.
func (rc *runCgroup) reset() bool {
	if rc.cg.version != 1 || rc.oomEvents < 0 {
		return false
	}
	// A run that ended with its envelope (procRun.endedWithEnvelope) left
	// its killed harness exiting; a process is charged to the pids
	// controller until its parent (the zygote) reaps it, after it left
	// cgroup.procs. Every process of the run was killed already (by pid
	// here it could be another's, reused).
	for delay, deadline := 500*time.Microsecond, time.Now().Add(time.Second); ; delay = min(delay*2, 20*time.Millisecond) {
		data, err := rc.read(filepath.Join(rc.dirs[1], "cgroup.procs"))
		if err != nil {
			return false
		}
		if len(bytes.TrimSpace(data)) == 0 && rc.readInt(filepath.Join(rc.dirs[1], "pids.current")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
	// Empty in every hierarchy: a run's processes are in all of them
	// (moved into each before they ran anything; born there after).
	mem := rc.dirs[0]
	usage := filepath.Join(mem, "memory.usage_in_bytes")
	// What the run's exit charged (page tables, kernel stacks) is released
	// over a few milliseconds. Page cache it left charged is not reclaimed
	// here (memory.force_empty costs more than a new cgroup): the cgroup
	// is removed instead.
	for try := 0; rc.readInt(usage) > reuseSlackBytes; try++ {
		if try == 5 {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.failcnt", "memory.memsw.max_usage_in_bytes", "memory.memsw.failcnt"} {
		if err := rc.write(filepath.Join(mem, f), "0"); err != nil && !(errors.Is(err, fs.ErrNotExist) && strings.Contains(f, "memsw")) {
			return false
		}
	}
	rc.oomCount() // drains the eventfd
	rc.oomKillBase, _ = rc.readKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	rc.cpuBase = 0
	used, _ := rc.cpuUsage()
	rc.cpuBase = used
	return true
}

// watchOOM registers an eventfd for the v1 memory cgroup's OOM notification.
func (rc *runCgroup) watchOOM() error {
	dir := rc.dirs[0]
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		return err
	}
	efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errno != 0 {
		ctl.Close()
		return fmt.Errorf("eventfd: %w", errno)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.event_control"), fmt.Sprintf("%d %d", efd, ctl.Fd())); err != nil {
		syscall.Close(int(efd))
		ctl.Close()
		return err
	}
	rc.oomEvents, rc.oomCtl = int(efd), ctl
	return nil
}

// oomCount reads (and resets) the number of OOM notifications so far.
func (rc *runCgroup) oomCount() uint64 {
	if rc.oomEvents < 0 {
		return 0
	}
	var b [8]byte
	n, err := syscall.Read(rc.oomEvents, b[:])
	if err != nil || n != 8 {
		return 0 // EAGAIN: none
	}
	return binary.NativeEndian.Uint64(b[:])
}

// nsjailArgs are the per-run nsjail flags placing the jail below this cgroup
// (they override the profile's config file).
func (rc *runCgroup) nsjailArgs() []string {
	if rc.cg.version == 1 {
		return []string{"--cgroup_mem_parent", rc.name, "--cgroup_pids_parent", rc.name, "--cgroup_cpu_parent", rc.name}
	}
	return []string{"--cgroupv2_mount", rc.dirs[0]}
}

// cgroupStats are the kernel's counters for one run, read after it ended.
type cgroupStats struct {
	PeakBytes int64
	// OOMKilled: the run's memory limit was reached and the kernel's OOM
	// killer acted in the run's cgroup (v2 oom_kill; v1 the OOM
	// notification), whichever process it chose.
	OOMKilled bool
	// MemoryLimitHit: OOMKilled, or the kernel refused a charge at the
	// limit (v1 failcnt, v2 oom): weaker evidence, used only when the jail
	// also ended without an envelope.
	MemoryLimitHit bool
}

func (rc *runCgroup) stats() cgroupStats {
	var s cgroupStats
	d := rc.dirs[0]
	if rc.cg.version == 1 {
		s.PeakBytes = rc.readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
		oomKills, _ := rc.readKey(filepath.Join(d, "memory.oom_control"), "oom_kill")
		s.OOMKilled = rc.oomCount() > 0 || oomKills > rc.oomKillBase
		// With swap accounting the memsw counter (same limit) is charged
		// first and records the failure.
		s.MemoryLimitHit = s.OOMKilled ||
			rc.readInt(filepath.Join(d, "memory.failcnt")) > 0 ||
			rc.readInt(filepath.Join(d, "memory.memsw.failcnt")) > 0
		return s
	}
	s.PeakBytes = rc.readInt(filepath.Join(d, "memory.peak"))
	ev := filepath.Join(d, "memory.events")
	kills, _ := rc.readKey(ev, "oom_kill")
	ooms, _ := rc.readKey(ev, "oom")
	s.OOMKilled = kills > 0
	s.MemoryLimitHit = s.OOMKilled || ooms > 0
	return s
}

// remove deletes the run's cgroup and whatever nsjail left below it,
// retrying while the last tasks are still exiting, for at most wait.
func (rc *runCgroup) remove(wait time.Duration) error {
	if rc.oomEvents >= 0 {
		syscall.Close(rc.oomEvents)
		rc.oomCtl.Close()
		rc.oomEvents, rc.oomCtl = -1, nil
	}
	if rc.into != nil {
		rc.into.Close()
		rc.into = nil
	}
	rc.closeFiles()
	deadline := time.Now().Add(wait)
	var errs []error
	for _, d := range rc.dirs {
		if err := removeCgroupDir(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeCgroupDir(dir string, deadline time.Time) error {
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		// Children (nsjail's NSJAIL.<pid> after a kill) go first.
		if entries, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range entries {
				if e.IsDir() {
					_ = syscall.Rmdir(filepath.Join(dir, e.Name()))
				}
			}
			if syscall.Rmdir(dir) == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(delay)
	}
}

func writeFile(path, value string) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	_, err = syscall.Write(fd, []byte(value))
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// keyValue finds "key value" in a flat-keyed cgroup file's content.
func keyValue(data []byte, key string) (int64, bool) {
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
