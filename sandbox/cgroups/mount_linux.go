package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// The cgroup2 mount as a container runtime gives it.
//
// A container with a private cgroup namespace (the default on cgroup v2
// for Docker, podman and Kubernetes) sees the hierarchy from its own
// cgroup down: the mount's root is the namespace's root, an ordinary
// cgroup with a cgroup.type, and /proc/self/cgroup reads "0::/". The
// runtimes mount it read-only unless the container is privileged. Holding
// CAP_SYS_ADMIN, execgate remounts it read-write, as an init inside such a
// container does: it can then write only below its own namespace's root,
// which the runtime made the container's, and where the host mounts
// cgroup2 with nsdelegate (systemd's default) not even the container's
// own limits at that root.
//
// A mount that is not the namespace's is refused: the host's
// /sys/fs/cgroup bind-mounted into a container with a private cgroup
// namespace shows the host's root cgroup while /proc/self/cgroup still
// reads "0::/", and execgate would take the host's root for its own base
// (moving the host's processes into its leaf).

// selfPID is the process looked for in its own cgroup (a variable for
// tests).
var selfPID = os.Getpid

// remountRW remounts the cgroup2 mount at path read-write, keeping flags
// (MS_NOSUID and the like); a variable for tests. The runtimes make the
// mount read-only, not the superblock it shares with the host's mount, so
// a bind remount (this mount's flags alone) is tried first; only a
// superblock that is read-only itself is remounted as a whole.
var remountRW = func(path string, flags uintptr) error {
	if err := unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return err
	}
	if f, err := statfsFlags(path); err == nil && f&unix.ST_RDONLY == 0 {
		return nil
	}
	return unix.Mount("", path, "", unix.MS_REMOUNT|flags, "")
}

// statfsFlags reads the mount flags of path (a variable for tests).
var statfsFlags = func(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return st.Flags, nil
}

// hasSysAdmin says whether this process may remount (CAP_SYS_ADMIN in its
// effective set); a variable for tests.
var hasSysAdmin = func() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
}

// Statfs flags (statvfs(3)'s ST_*) and the mount flags that keep them.
var keptMountFlags = []struct{ st, ms int64 }{
	{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
	{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
}

// unprivilegedHint is what to change where a container's cgroup2 is
// read-only and execgate may not remount it.
const unprivilegedHint = "an unprivileged container cannot run jails: run it --privileged, or with --cap-add SYS_ADMIN, " +
	"seccomp and AppArmor unconfined and a private cgroup namespace (deploy/helm/execgate/values.yaml says why each is needed); " +
	"never bind-mount the host's /sys/fs/cgroup"

// mountState is what the cgroup2 mount lets Setup do.
type mountState struct {
	readOnly bool    // mounted read-only
	remount  bool    // read-only, its namespace's root: Setup remounts it read-write
	flags    uintptr // the mount flags a remount keeps
}

// checkMount proves the cgroup2 mount is this process's cgroup
// namespace's hierarchy and says whether a read-only one may be
// remounted; the error names the precise reason.
func (c *Manager) checkMount() (mountState, error) {
	var m mountState
	if own := ownCgroupV2(selfCgroupFile); own != "" {
		procs := filepath.Join(c.mount, own, "cgroup.procs")
		data, err := os.ReadFile(procs)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return m, &unavailable.Error{Reason: "v2: reading " + procs, Hint: v2Hint, Err: err}
		}
		if err != nil || !slices.Contains(strings.Fields(string(data)), strconv.Itoa(selfPID())) {
			return m, &unavailable.Error{
				Reason: fmt.Sprintf("v2: %s is not this process's cgroup namespace's hierarchy: /proc/self/cgroup puts it in %s, but %s does not list it "+
					"(the host's /sys/fs/cgroup bind-mounted into a container with a private cgroup namespace?)", c.mount, own, procs),
				Hint: "do not bind-mount the host's /sys/fs/cgroup: give the container a private cgroup namespace and CAP_SYS_ADMIN " +
					"(execgate then remounts its own cgroup2 read-write), or run it --privileged",
			}
		}
	}
	flags, err := statfsFlags(c.mount)
	if err != nil {
		return m, &unavailable.Error{Reason: "v2: reading the mount flags of " + c.mount, Hint: v2Hint, Err: err}
	}
	m.readOnly = flags&unix.ST_RDONLY != 0
	if !m.readOnly || isRootCgroup(c.mount) {
		return m, nil // writable, or the host's own read-only mount: not execgate's to change
	}
	for _, f := range keptMountFlags {
		if flags&f.st != 0 {
			m.flags |= uintptr(f.ms)
		}
	}
	m.remount = true
	return m, nil
}

// makeWritable remounts a read-only cgroup2 mount of execgate's own
// namespace read-write (see checkMount) and refuses one it may not.
func (c *Manager) makeWritable() error {
	m, err := c.checkMount()
	if err != nil || !m.readOnly {
		return err
	}
	if !m.remount {
		return &unavailable.Error{Reason: "v2: " + c.mount + " is mounted read-only", Hint: v2Hint}
	}
	if err := remountRW(c.mount, m.flags); err != nil {
		return &unavailable.Error{
			Reason: "v2: " + c.mount + " is this container's cgroup namespace mounted read-only, as an unprivileged container gets it, and remounting it read-write was refused",
			Hint:   unprivilegedHint, Err: err,
		}
	}
	return nil
}
