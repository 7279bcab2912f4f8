package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

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
	"in a container --privileged, or a private cgroup namespace (--cgroupns=private) and CAP_SYS_ADMIN, with which execgate remounts its own cgroup2 read-write; " +
	"or set sandbox.cgroups to the version the host has"

// supervisorLeaf is the leaf cgroup processes sharing execgate's base
// cgroup are moved into so that the base may delegate controllers (cgroup
// v2 "no internal processes": only the root may both hold processes and
// enable controllers for its children).
func (c *Manager) supervisorLeaf() string {
	return filepath.Join(c.root, strings.ReplaceAll(c.parent, "/", "-")+".supervisor")
}

// v2Controllers are the controllers a run's cgroup uses on v2; cpu only
// where the host has it (without it nsjail's RLIMIT_CPU still holds).
var v2Controllers = []string{"memory", "pids", "cpu"}

// v2Setup is what Setup does on cgroup v2, planned by v2Plan.
type v2Setup struct {
	remount string     // a read-only mount of execgate's own cgroup namespace, remounted read-write first
	move    []string   // pids sharing the base cgroup, moved into the supervisor leaf first
	leaf    string     // the supervisor leaf (with move)
	create  string     // the first directory of the tree that does not exist yet
	enable  [][]string // per directory from the base down: {dir, controllers...}
}

func (s v2Setup) String() string {
	if s.remount == "" && len(s.enable) == 0 && s.create == "" {
		return "memory, pids and cpu delegated down to it already"
	}
	var parts []string
	if s.remount != "" {
		parts = append(parts, "remounts "+s.remount+" read-write (its own cgroup namespace, mounted read-only as a container runtime does)")
	}
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

// v2Plan works out what Setup would do on cgroup v2 and whether the host
// lets it, reading the tree only: every controller needed is offered to
// the base, its cgroupfs is writable, and processes that share the base
// (a container's shell entrypoint, an init such as tini, a sidecar, the
// other processes of a systemd unit) can be moved into a leaf. The
// error names the precise reason.
func (c *Manager) v2Plan() (v2Setup, error) {
	var plan v2Setup
	m, err := c.checkMount()
	if err != nil {
		return plan, err
	}
	readOnly := m.readOnly
	if m.remount {
		if !hasSysAdmin() {
			return plan, &unavailable.Error{Reason: "v2: " + c.mount + " is this container's cgroup namespace mounted read-only, as an unprivileged container gets it, " +
				"and this process lacks CAP_SYS_ADMIN to remount it read-write", Hint: unprivilegedHint}
		}
		plan.remount, readOnly = c.mount, false
	}
	offered, err := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
	if err != nil {
		return plan, &unavailable.Error{Reason: "v2: reading " + filepath.Join(c.root, "cgroup.controllers"), Hint: v2Hint, Err: err}
	}
	want := controllersOffered(string(offered))
	for _, need := range []string{"memory", "pids"} {
		if !slices.Contains(want, need) {
			return plan, &unavailable.Error{Reason: fmt.Sprintf("v2: the %s controller is not offered to %s (its cgroup.controllers: %q)", need, c.root, strings.TrimSpace(string(offered))),
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
				return plan, &unavailable.Error{Reason: "v2: " + c.mount + " is mounted read-only, so " + dir + " cannot be created", Hint: v2Hint}
			}
			plan.create = dir
			break
		}
		if last {
			break // the parent's children get controllers at create
		}
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return plan, &unavailable.Error{Reason: "v2: reading " + filepath.Join(dir, "cgroup.subtree_control"), Hint: v2Hint, Err: err}
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
			return plan, &unavailable.Error{Reason: fmt.Sprintf("v2: %s is mounted read-only and %s does not delegate %s", c.mount, dir, strings.Join(missing[1:], ", ")), Hint: v2Hint}
		}
		plan.enable = append(plan.enable, missing)
		if i == 0 && !isRootCgroup(dir) {
			procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				return plan, &unavailable.Error{Reason: "v2: reading " + filepath.Join(dir, "cgroup.procs"), Hint: v2Hint, Err: err}
			}
			plan.move, plan.leaf = strings.Fields(string(procs)), c.supervisorLeaf()
		}
	}
	return plan, nil
}

// v2Ctrls are the controllers a run's cgroup delegates to nsjail's (or
// the level-process tool leaf).
func (c *Manager) v2Ctrls() []string {
	if c.ctrls == nil {
		return v2Controllers // a Manager made without Setup (tests)
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

// setupV2 creates the parent cgroup on v2 and delegates the controllers
// down to it.
func (c *Manager) setupV2() error {
	if err := c.makeWritable(); err != nil {
		return err
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
func (c *Manager) enableControllers(dir string, ctrls []string, mayMove bool) error {
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
			return &unavailable.Error{Reason: "cgroups: enabling the " + ctrl + " controller in " + dir, Hint: v2Hint, Err: err}
		}
	}
	return nil
}

// moveIntoLeaf moves every process in dir into the supervisor leaf,
// again while processes keep appearing (a process forking as it is
// moved), for at most a second.
func (c *Manager) moveIntoLeaf(dir string) error {
	leaf := c.supervisorLeaf()
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return &unavailable.Error{Reason: "cgroups: creating the leaf cgroup " + leaf + " for the processes sharing " + dir, Hint: v2Hint, Err: err}
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
				return &unavailable.Error{Reason: fmt.Sprintf("cgroups: moving process %s from %s into the leaf %s", pid, dir, leaf), Hint: v2Hint, Err: err}
			}
		}
		if time.Now().After(deadline) {
			return &unavailable.Error{Reason: "cgroups: processes keep appearing in " + dir + " while they are moved into " + leaf, Hint: v2Hint}
		}
	}
}
