package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// outInodes bounds the entries /workspace/out can hold (its tmpfs's
// nr_inodes): a tool cannot make the collection look at more, however
// many files it tries to create (ENOSPC beyond).
const outInodes = 4096

// pageBytes is what the inputs' tmpfs rounds each file up to.
const pageBytes = 4096

// Config sizes a workspace.
type Config struct {
	// Files and FilesBytes size the inputs' tmpfs (the run's limits.files
	// and limits.files_bytes): Write refuses more.
	Files, FilesBytes int64
	// OutBytes sizes /workspace/out's tmpfs (the run's tmp_mb, in bytes).
	OutBytes int64
	// UID owns /workspace/out (the jail's host uid, which the tool is).
	UID int
}

// Workspace is one run's /workspace: made by New, given to the jail by
// Attach (level jail) or Clones (level process), filled by Write at the
// hand-off, read by Collect once the run's processes are gone, let go by
// Close. Its methods are not safe for concurrent use.
type Workspace struct {
	cfg Config
	// in and out are the runner's descriptors of the two tmpfs, writable:
	// what keeps them alive.
	in, out *os.File
	// attached is the host directory in is attached at (Attach); "" when
	// it is not.
	attached string
	written  bool
}

// New makes a workspace: the two tmpfs, detached, with the out/ mount
// point in the inputs'. A host that refuses them gets an
// *unavailable.Error.
func New(c Config) (_ *Workspace, err error) {
	if c.Files <= 0 || c.FilesBytes <= 0 || c.OutBytes <= 0 {
		return nil, fmt.Errorf("workspace: files %d, files_bytes %d and out bytes %d must be positive", c.Files, c.FilesBytes, c.OutBytes)
	}
	w := &Workspace{cfg: c}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	if w.in, err = tmpfs("workspace", [][2]string{
		{"size", strconv.FormatInt(c.FilesBytes+(c.Files+1)*pageBytes, 10)},
		{"nr_inodes", strconv.FormatInt(c.Files*MaxDepth+8, 10)},
		{"mode", "0755"},
	}); err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(int(w.in.Fd()), OutDir, 0o755); err != nil {
		return nil, unavailableErr("creating /workspace/out's mount point", err)
	}
	if err := unix.Fchmodat(int(w.in.Fd()), OutDir, 0o755, 0); err != nil {
		return nil, unavailableErr("creating /workspace/out's mount point", err)
	}
	uid := strconv.Itoa(c.UID)
	if w.out, err = tmpfs("workspace-out", [][2]string{
		{"size", strconv.FormatInt(c.OutBytes, 10)},
		{"nr_inodes", strconv.Itoa(outInodes)},
		{"mode", "0700"},
		{"uid", uid},
		{"gid", uid},
	}); err != nil {
		return nil, err
	}
	return w, nil
}

// tmpfs makes a detached tmpfs with opts, nosuid, nodev and noexec, and
// returns its mount's descriptor.
func tmpfs(name string, opts [][2]string) (*os.File, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, unavailableErr("creating a tmpfs for "+name+" (fsopen)", err)
	}
	defer unix.Close(fs)
	for _, o := range opts {
		if err := unix.FsconfigSetString(fs, o[0], o[1]); err != nil {
			return nil, unavailableErr(fmt.Sprintf("configuring the tmpfs of %s (%s=%s)", name, o[0], o[1]), err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return nil, unavailableErr("creating the tmpfs of "+name, err)
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return nil, unavailableErr("mounting the tmpfs of "+name+" (fsmount)", err)
	}
	return os.NewFile(uintptr(m), name), nil
}

func unavailableErr(what string, err error) error {
	return &unavailable.Error{Reason: what, Err: err,
		Hint: "a run's /workspace is a tmpfs made with the mount API (fsopen, fsmount, open_tree, move_mount: Linux 5.12 or later); execgate needs root and a host that allows mounts (in a container: --privileged)"}
}

// Attach attaches the workspace at dir, a host directory the jail's uid
// can reach (created here; it must not exist), with out/ on dir/out, for
// nsjail to bind (BindArgs). Close detaches it.
func (w *Workspace) Attach(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return unavailableErr("creating the workspace's mount point", err)
	}
	if err := unix.MoveMount(int(w.in.Fd()), "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(dir)
		return unavailableErr("attaching the workspace (move_mount)", err)
	}
	w.attached = dir
	if err := unix.MoveMount(int(w.out.Fd()), "", unix.AT_FDCWD, filepath.Join(dir, OutDir), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return unavailableErr("attaching /workspace/out (move_mount)", err)
	}
	return nil
}

// BindArgs are nsjail's flags that bind an attached workspace (Attach) at
// dst and dst/out in the jail: the inputs read-only, out/ writable (both
// keep the tmpfs's nosuid, nodev and noexec).
func (w *Workspace) BindArgs(dst string) []string {
	if w.attached == "" {
		return nil
	}
	return []string{
		"--bindmount_ro", w.attached + ":" + dst,
		"--bindmount", filepath.Join(w.attached, OutDir) + ":" + dst + "/" + OutDir,
	}
}

// Clones returns detached copies of the workspace's mounts for a process
// that moves them into its own mount namespace (move_mount with
// MOVE_MOUNT_F_EMPTY_PATH): the inputs read-only, and out/ writable. The
// caller closes them once it handed them on.
//
// Linux 6.15 and later clone the detached mounts themselves. Older
// kernels (Debian 12's 6.1, Ubuntu 22.04's 5.15, RHEL 9's 5.14) clone
// only a mount of the caller's mount namespace (EINVAL otherwise): there
// the two are attached for the moment of the clone at a fresh directory
// below os.TempDir() and lazily detached again (the runner's descriptors
// keep them, as before), see cloneAttached.
func (w *Workspace) Clones() (ro, out *os.File, err error) {
	return w.clones(false)
}

// clones is Clones; attached goes straight to cloneAttached (a test's way
// to prove that path on a kernel that does not need it).
func (w *Workspace) clones(attached bool) (ro, out *os.File, err error) {
	r, o, err := -1, -1, unix.EINVAL
	if !attached {
		r, o, err = w.cloneDetached()
	}
	if errors.Is(err, unix.EINVAL) {
		r, o, err = w.cloneAttached()
	}
	if err != nil {
		return nil, nil, err
	}
	ro, out = os.NewFile(uintptr(r), "workspace-ro"), os.NewFile(uintptr(o), "workspace-out")
	if err := unix.MountSetattr(r, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		ro.Close()
		out.Close()
		return nil, nil, unavailableErr("making the workspace's clone read-only (mount_setattr)", err)
	}
	return ro, out, nil
}

const cloneFlags = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC

// cloneDetached clones the two detached mounts through their descriptors
// (Linux 6.15 and later; EINVAL before).
func (w *Workspace) cloneDetached() (r, o int, err error) {
	if r, err = unix.OpenTree(int(w.in.Fd()), "", cloneFlags|unix.AT_EMPTY_PATH); err != nil {
		return -1, -1, unavailableErr("cloning the workspace (open_tree)", err)
	}
	if o, err = unix.OpenTree(int(w.out.Fd()), "", cloneFlags|unix.AT_EMPTY_PATH); err != nil {
		unix.Close(r)
		return -1, -1, unavailableErr("cloning /workspace/out (open_tree)", err)
	}
	return r, o, nil
}

// cloneAttached attaches the workspace at a new private directory, clones
// the two mounts by path and detaches them again (MNT_DETACH: nothing
// stays mounted there; the runner's descriptors still reach both), for
// kernels that clone only mounts of the caller's namespace.
func (w *Workspace) cloneAttached() (r, o int, err error) {
	dir, err := os.MkdirTemp("", "execgate-ws-")
	if err != nil {
		return -1, -1, unavailableErr("creating a directory to clone the workspace at", err)
	}
	defer os.Remove(dir)
	at := filepath.Join(dir, "w")
	if err := os.Mkdir(at, 0o700); err != nil {
		return -1, -1, unavailableErr("creating a directory to clone the workspace at", err)
	}
	defer os.Remove(at)
	if err := unix.MoveMount(int(w.in.Fd()), "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return -1, -1, unavailableErr("attaching the workspace to clone it (move_mount)", err)
	}
	defer func() {
		if derr := unix.Unmount(at, unix.MNT_DETACH); derr != nil && err == nil {
			unix.Close(r)
			unix.Close(o)
			r, o, err = -1, -1, unavailableErr("detaching the workspace after its clone", derr)
		}
	}()
	outAt := filepath.Join(at, OutDir)
	if err := unix.MoveMount(int(w.out.Fd()), "", unix.AT_FDCWD, outAt, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return -1, -1, unavailableErr("attaching /workspace/out to clone it (move_mount)", err)
	}
	if r, err = unix.OpenTree(unix.AT_FDCWD, at, cloneFlags); err != nil {
		return -1, -1, unavailableErr("cloning the workspace (open_tree)", err)
	}
	if o, err = unix.OpenTree(unix.AT_FDCWD, outAt, cloneFlags); err != nil {
		unix.Close(r)
		return -1, -1, unavailableErr("cloning /workspace/out (open_tree)", err)
	}
	return r, o, nil
}

// ErrTooMany: the files are more, or larger, than the workspace was made
// for (the run's limits.files and limits.files_bytes).
var ErrTooMany = errors.New("more input files than the run's limits")

// Write writes the input files (each path checked by CheckPath; a file
// and a directory of one name conflict) into the workspace, root's,
// read-only: the files 0444, their directories 0755. It is called once,
// before the tool runs.
func (w *Workspace) Write(files []File) error {
	if w.written {
		return errors.New("workspace: written twice")
	}
	w.written = true
	var total int64
	for _, f := range files {
		total += int64(len(f.Content))
	}
	if int64(len(files)) > w.cfg.Files || total > w.cfg.FilesBytes {
		return fmt.Errorf("%w: %d files of %d bytes (limits.files %d, limits.files_bytes %d)", ErrTooMany, len(files), total, w.cfg.Files, w.cfg.FilesBytes)
	}
	root := int(w.in.Fd())
	for _, f := range files {
		if err := CheckPath(f.Path); err != nil {
			return fmt.Errorf("input file %q: path %w", f.Path, err)
		}
		if err := mkdirs(root, filepath.Dir(f.Path)); err != nil {
			return fmt.Errorf("input file %q: %w", f.Path, err)
		}
		if err := writeFile(root, f); err != nil {
			return fmt.Errorf("input file %q: %w", f.Path, err)
		}
	}
	return nil
}

// resolveBeneath never leaves the directory it starts from and follows no
// link on the way.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// mkdirs creates dir's components below root (0755, root's).
func mkdirs(root int, dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		err := unix.Mkdirat(root, p, 0o755)
		switch {
		case errors.Is(err, unix.EEXIST):
			var st unix.Stat_t
			if err := unix.Fstatat(root, p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%s is a file and a directory", p)
			}
		case err != nil:
			return fmt.Errorf("creating directory %s: %w", p, err)
		default:
			if err := unix.Fchmodat(root, p, 0o755, 0); err != nil {
				return fmt.Errorf("creating directory %s: %w", p, err)
			}
		}
	}
	return nil
}

// writeFile creates f below root, exclusively, and writes it.
func writeFile(root int, f File) error {
	fd, err := unix.Openat2(root, f.Path, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Mode:    0o444,
		Resolve: resolveBeneath,
	})
	if errors.Is(err, unix.EEXIST) {
		return errors.New("given twice (or also a directory)")
	}
	if err != nil {
		return fmt.Errorf("creating it: %w", err)
	}
	file := os.NewFile(uintptr(fd), f.Path)
	defer file.Close()
	if err := file.Chmod(0o444); err != nil {
		return err
	}
	if _, err := file.Write(f.Content); err != nil {
		return fmt.Errorf("writing it: %w", err)
	}
	return nil
}

// Collect reads the artifacts in /workspace/out within b, in name order.
// Call it once the run's processes are gone (or frozen); it holds even if
// one is not: it follows no link, opens nothing that is not a regular file
// (a FIFO is never waited on), and reads at most the size fstat gave
// before reading, within the bytes left.
func (w *Workspace) Collect(b Bounds) Collected {
	var c Collected
	dfd, err := unix.Openat(int(w.out.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return NotCollected(ReasonUnreadable + ": " + err.Error())
	}
	dir := os.NewFile(uintptr(dfd), "out")
	defer dir.Close()
	// At most outInodes entries exist (the tmpfs's nr_inodes).
	names, err := dir.Readdirnames(outInodes + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return NotCollected(ReasonUnreadable + ": " + err.Error())
	}
	if len(names) > outInodes {
		c.drop("*", ReasonTooMany)
		names = names[:outInodes]
	}
	sort.Strings(names)
	left := b.Bytes
	for _, name := range names {
		if err := CheckName(name); err != nil {
			c.drop(name, "an invalid name: "+err.Error())
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.drop(name, ReasonUnreadable)
			continue
		}
		if why := notRegular(st.Mode); why != "" {
			c.drop(name, why)
			continue
		}
		if int64(len(c.Artifacts)) >= b.Artifacts {
			c.drop(name, fmt.Sprintf("%s (%d)", ReasonCount, b.Artifacts))
			continue
		}
		if st.Size > left {
			c.drop(name, fmt.Sprintf("%s (%d bytes; %d of %d left)", ReasonBytes, st.Size, left, b.Bytes))
			continue
		}
		a, why := readArtifact(dfd, name, left)
		if why != "" {
			c.drop(name, why)
			continue
		}
		left -= a.Bytes
		a.MIME = MIMEOf(name, b.MIMEs[name])
		c.Artifacts = append(c.Artifacts, a)
	}
	return c
}

// notRegular says why a file of mode m is not an artifact ("" when it is
// a regular file).
func notRegular(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFLNK:
		return ReasonSymlink
	case unix.S_IFDIR:
		return ReasonDirectory
	case unix.S_IFIFO:
		return ReasonFIFO
	case unix.S_IFSOCK:
		return ReasonSocket
	case unix.S_IFCHR, unix.S_IFBLK:
		return ReasonDevice
	}
	return ReasonOther
}

// readArtifact opens name below dfd (no link followed, a regular file
// only) and reads at most its fstat size, which must be within left.
func readArtifact(dfd int, name string, left int64) (Artifact, string) {
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: resolveBeneath,
	})
	if errors.Is(err, unix.ELOOP) {
		return Artifact{}, ReasonSymlink
	}
	if err != nil {
		return Artifact{}, ReasonUnreadable
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Artifact{}, ReasonUnreadable
	}
	if why := notRegular(st.Mode); why != "" {
		return Artifact{}, why
	}
	if st.Size > left {
		return Artifact{}, fmt.Sprintf("%s (%d bytes; %d left)", ReasonBytes, st.Size, left)
	}
	data := make([]byte, st.Size)
	n, err := io.ReadFull(f, data)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Artifact{}, ReasonUnreadable
	}
	data = data[:n]
	sum := sha256.Sum256(data)
	return Artifact{Name: name, Bytes: int64(n), SHA256: hex.EncodeToString(sum[:]), Data: data}, ""
}

// Release is Close in the background: unmounting and letting go of a
// mount waits for an RCU grace period (about 2 ms on the development VM),
// which a run's answer need not wait for. The workspace must not be used
// after it.
func (w *Workspace) Release() {
	if w == nil {
		return
	}
	go w.Close()
}

// Close detaches an attached workspace and lets go of its tmpfs (their
// memory is freed once no jail holds them either). It may be called more
// than once, and on nil.
func (w *Workspace) Close() {
	if w == nil {
		return
	}
	if w.attached != "" {
		_ = unix.Unmount(filepath.Join(w.attached, OutDir), unix.MNT_DETACH)
		_ = unix.Unmount(w.attached, unix.MNT_DETACH)
		os.Remove(w.attached)
		w.attached = ""
	}
	for _, f := range []*os.File{w.in, w.out} {
		if f != nil {
			f.Close()
		}
	}
	w.in, w.out = nil, nil
}
