// Package view mounts, once per runner, the jail's view of the host
// directories it uses (the rootfs, the package environments and the jails'
// own directories) read-only below a root-owned, traversable runtime
// directory, and checks that the jail's uid can reach them there.
package view

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/runid"
	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// The jail's view of the host directories it uses.
//
// nsjail mounts a jail's directories (the rootfs, a requirements set, the
// egress directory) in the child, after it switched to the jail's uid: the
// child's capabilities hold only in the jail's new user namespace, which
// maps none of the host's owners, so resolving a mount's source path needs
// the search bit for others on every directory above it. The state dir
// holding them also holds the dev signing key and the audit log, and a
// careful operator keeps it 0700 (mktemp -d does too).
//
// So each runner mounts, at start-up, a view of them below a root-owned,
// traversable runtime directory, and points nsjail there:
//
//	<runtime_dir>/view-<pid>-<hash>/        tmpfs, 0755, private propagation
//	    rootfs  → sandbox.rootfs_dir       bind, read-only
//	    deps    → sandbox.deps_dir         bind, read-only
//	    jails   → <work_dir>/jails         bind, read-only
//	    ws/                                tmpfs, 0711: the mount points of
//	                                       the jails' workspaces (package
//	                                       sandbox/workspace attaches each
//	                                       run's there for nsjail to bind)
//
// (nsjail adds nosuid, nodev and noexec per jail mount, as its config says.)
//
// <hash> is of the three sources (runners of one process sharing them share
// the view, counted); <pid> is the owner's, so a later runner unmounts the
// views of dead processes (sweepViews). Close unmounts it.
//
// The binds are not recursive: mounts below the sources are not part of
// the view.
type View struct {
	key string
	// Dir is the view's directory below the runtime directory.
	Dir  string
	refs int // guarded by viewsMu

	// Host paths of the view's mounts, and what each shows.
	Rootfs, Deps, Jails string
	// Workspaces is where the runner attaches jails' workspaces.
	Workspaces string
	sources    map[string]string // view path → source
}

var (
	viewsMu sync.Mutex // guards views and every view's refs
	views   = map[string]*View{}
)

var viewDirRE = regexp.MustCompile(`^view-([0-9]+)-[0-9a-f]+$`)

// Open returns the view of rootfs, deps and jails under runtimeDir,
// mounting it unless this process already has it. Close it when done.
func Open(runtimeDir, rootfs, deps, jails string) (*View, error) {
	h := sha256.Sum256([]byte(rootfs + "\x00" + deps + "\x00" + jails))
	key := runtimeDir + "\x00" + hex.EncodeToString(h[:])
	viewsMu.Lock()
	defer viewsMu.Unlock()
	if err := makeRuntimeDir(runtimeDir); err != nil {
		return nil, err
	}
	sweepViews(runtimeDir)
	if v, ok := views[key]; ok {
		v.refs++
		return v, nil
	}
	dir := filepath.Join(runtimeDir, fmt.Sprintf("view-%d-%s", os.Getpid(), hex.EncodeToString(h[:6])))
	v := &View{
		key:     key,
		Dir:     dir,
		refs:    1,
		Rootfs:  filepath.Join(dir, "rootfs"),
		Deps:    filepath.Join(dir, "deps"),
		Jails:   filepath.Join(dir, "jails"),
		sources: map[string]string{},
		// Its own tmpfs: one mount point per live jail.
		Workspaces: filepath.Join(dir, "ws"),
	}
	if err := v.mount(rootfs, deps, jails); err != nil {
		unmountView(dir)
		return nil, &unavailable.Error{
			Reason: "mounting the jail's view of its directories under " + runtimeDir,
			Hint:   "execgate mounts the rootfs, deps and work dirs read-only under sandbox.runtime_dir; it needs root and a host that allows mounts (in a container: --privileged)",
			Err:    err,
		}
	}
	views[key] = v
	return v, nil
}

// makeRuntimeDir creates runtimeDir (root-owned, 0755) unless it exists,
// and checks that the jail's uid can traverse it and its parents.
func makeRuntimeDir(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return &unavailable.Error{Reason: "creating sandbox.runtime_dir " + dir, Err: err}
		}
		if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
			return &unavailable.Error{Reason: "creating sandbox.runtime_dir " + dir, Err: err}
		}
	}
	return checkSearchable(dir, dir)
}

func (v *View) mount(rootfs, deps, jails string) error {
	if err := os.Mkdir(v.Dir, 0o755); err != nil {
		return err
	}
	// A tmpfs of its own with private propagation: the binds below it are
	// not copied into other mount namespaces, and unmounting it (detached)
	// takes them all.
	if err := unix.Mount("execgate-view", v.Dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=16,mode=0755"); err != nil {
		return fmt.Errorf("mounting a tmpfs at %s: %w", v.Dir, err)
	}
	if err := unix.Mount("", v.Dir, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making %s private: %w", v.Dir, err)
	}
	for _, m := range []struct{ src, dst string }{{rootfs, v.Rootfs}, {deps, v.Deps}, {jails, v.Jails}} {
		if err := os.Mkdir(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mounting %s at %s: %w", m.src, m.dst, err)
		}
		// Read-only and nothing else: the flags of a mount become locked
		// in the jail's user namespace, and nsjail's read-only remount of
		// its own bind (with the flags of its config) must not clear one.
		if err := unix.Mount("", m.dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", m.dst, err)
		}
		v.sources[m.dst] = m.src
	}
	if err := os.Mkdir(v.Workspaces, 0o711); err != nil {
		return err
	}
	if err := unix.Mount("execgate-ws", v.Workspaces, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=65536,mode=0711"); err != nil {
		return fmt.Errorf("mounting a tmpfs at %s: %w", v.Workspaces, err)
	}
	return nil
}

// Close drops one reference; the last one unmounts the view.
func (v *View) Close() error {
	viewsMu.Lock()
	defer viewsMu.Unlock()
	if v.refs <= 0 {
		return nil
	}
	v.refs--
	if v.refs > 0 {
		return nil
	}
	delete(views, v.key)
	return unmountView(v.Dir)
}

// unmountView detaches the view's tmpfs (and the binds on it) and removes
// its directory.
func unmountView(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		err = nil // not mounted
	}
	if rerr := os.Remove(dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("removing the jail's view %s: %w", dir, err)
	}
	return nil
}

// sweepViews unmounts the views dead execgate processes left in
// runtimeDir. Failures are ignored: it is housekeeping.
func sweepViews(runtimeDir string) int {
	entries, err := os.ReadDir(runtimeDir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		m := viewDirRE.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, err := strconv.Atoi(m[1]); err == nil && runid.Gone(pid) {
			if unmountView(filepath.Join(runtimeDir, e.Name())) == nil {
				n++
			}
		}
	}
	return n
}

// source returns the host directory a path of the view shows, for
// messages: the operator knows the source, not the view.
func (v *View) source(p string) string {
	for dst, src := range v.sources {
		if p == dst {
			return src
		}
		if rel, err := filepath.Rel(dst, p); err == nil && filepath.IsLocal(rel) {
			return filepath.Join(src, rel)
		}
	}
	return p
}

// Check makes sure the jail's uid can reach the view's path p: the
// runtime directory's components and the source directory itself (the root
// of its bind, which the user may have made private). Errors name the
// source.
func (v *View) Check(p string) error {
	err := checkSearchable(p, v.source(p))
	var ue *unavailable.Error
	if errors.As(err, &ue) {
		ue.Reason = fmt.Sprintf("%s (the jail sees it through %s)", ue.Reason, p)
	}
	return err
}

// checkSearchable makes sure the jail's uid can reach dir: nsjail mounts a
// jail's directories as the jail's uid (some uid of sandbox.uid_range, the
// owner of nothing on the host), so dir and every directory above it need
// the search bit for others. shown names dir in the error (for a path of
// the view, the directory it shows).
func checkSearchable(dir, shown string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return &unavailable.Error{Reason: "jail path " + shown + ": " + err.Error(), Err: err}
		}
		if fi.Mode().Perm()&0o001 == 0 {
			name := d
			if d == dir {
				name = shown
			}
			return &unavailable.Error{
				Reason: fmt.Sprintf("%s is not searchable by others, so the jail (a uid of sandbox.uid_range) cannot reach %s", name, shown),
				Hint:   "chmod o+x " + name,
			}
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}
