package rootfs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/execgate/execgate/jaillayout"
)

// Build builds a fresh rootfs into opts.Dir and returns its manifest.
//
// The tree is built in a sibling directory (Dir+".tmp-XXXX") and swapped in
// with one atomic rename once complete; the previous tree stays in place
// until then and is removed afterwards. Concurrent builders of the same Dir
// (other processes included) serialise on a lock file beside it. Build fails
// when the CA store is empty, a shared library cannot be found or the
// standard library does not compile.
func Build(ctx context.Context, opts Options) (*Manifest, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	unlock, err := lockDir(ctx, opts.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return build(ctx, opts)
}

// Ensure returns the manifest of opts.Dir, building the rootfs first when it
// is missing or stale: built for another protocol version or harness, or
// from an interpreter binary that has changed since. A current rootfs costs
// one manifest read and a stat of the interpreter; the tree is not walked.
func Ensure(ctx context.Context, opts Options) (*Manifest, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	reason, m := staleness(opts)
	if reason == "" {
		return m, nil
	}
	unlock, err := lockDir(ctx, opts.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have built it while we waited for the lock.
	if reason, m = staleness(opts); reason == "" {
		return m, nil
	}
	opts.progress("%s: %s; building (takes a few seconds, once)", opts.Dir, reason)
	return build(ctx, opts)
}

// staleness returns why opts.Dir needs a build ("" if it does not) and its
// manifest when it has one.
func staleness(opts Options) (string, *Manifest) {
	m, err := ReadManifest(opts.Dir)
	switch {
	case errors.Is(err, ErrNoManifest):
		return "no rootfs yet", nil
	case err != nil:
		return err.Error(), nil
	}
	hv := currentHarness()
	switch {
	case m.Layout != jaillayout.Version:
		return fmt.Sprintf("built with layout %d, this binary builds layout %d", m.Layout, jaillayout.Version), m
	case m.ProtocolVersion != hv.protocol:
		return fmt.Sprintf("built for protocol %d, this binary speaks %d", m.ProtocolVersion, hv.protocol), m
	case m.HarnessSHA256 != hv.sha256:
		return "built with another harness", m
	case m.Runtime != opts.Runtime:
		return fmt.Sprintf("built as runtime %q, wanted %q", m.Runtime, opts.Runtime), m
	}
	if opts.Runtime == HostRuntime {
		stamp, err := pythonStamp(opts.PythonPath)
		switch {
		case err != nil:
			return err.Error(), m
		case m.PythonPath != opts.PythonPath || m.PythonStamp != stamp:
			return fmt.Sprintf("interpreter %s changed since the build", opts.PythonPath), m
		}
	} else {
		rl, err := opts.Lock.Runtime(opts.Runtime)
		if err != nil {
			return err.Error(), m
		}
		if m.LockSHA256 != rl.sha256(debianArch()) {
			return "built from another runtime lock", m
		}
	}
	if _, err := os.Lstat(filepath.Join(opts.Dir, jaillayout.PythonPath)); err != nil {
		return "interpreter missing from the tree", m
	}
	if reason := denoStale(opts, m); reason != "" {
		return reason, m
	}
	return "", m
}

// builder assembles one tree in root from src. Paths named "jail path"
// are absolute paths as seen inside the jail; root+jailPath is the host
// path, src+jailPath the host path of the source's file.
type builder struct {
	opts Options
	root string
	src  string
	pkg  bool // src holds unpacked packages (not the host)
	py   *hostPython
	deno *hostDeno // nil: built without Deno
	// denoCache is Manifest.DenoCodeCache (set by the deno code cache step).
	denoCache string
	// loader and libPath run the tree's interpreter on the host (a tree
	// built from packages: Manifest.Loader, LibraryPath); "" for the host
	// runtime, whose interpreter runs as it is.
	loader  string
	libPath []string
}

func build(ctx context.Context, opts Options) (_ *Manifest, err error) {
	start := time.Now()
	if err := checkReplaceable(opts.Dir); err != nil {
		return nil, err
	}
	deno, err := findHostDeno(opts)
	if err != nil {
		return nil, err
	}
	parent := filepath.Dir(opts.Dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("creating rootfs parent: %w", err)
	}
	var src *source
	if opts.Runtime == HostRuntime {
		if src, err = hostSource(ctx, opts); err != nil {
			return nil, err
		}
	} else {
		rl, err := opts.Lock.Runtime(opts.Runtime)
		if err != nil {
			return nil, err
		}
		unpacked, err := os.MkdirTemp(parent, filepath.Base(opts.Dir)+".src-")
		if err != nil {
			return nil, fmt.Errorf("creating the unpack dir: %w", err)
		}
		defer os.RemoveAll(unpacked)
		opts.progress("building runtime %s (%s) in %s from %d pinned packages", rl.Name, rl.Distribution, opts.Dir, len(rl.Packages[debianArch()]))
		if src, err = debianSource(ctx, opts, rl, unpacked); err != nil {
			return nil, err
		}
	}
	opts.progress("building %s from python %s (%s), %d CA certificates from %s", opts.Dir, src.py.Version, src.py.Real, src.ca.count, src.caFrom)

	tmp, err := os.MkdirTemp(parent, filepath.Base(opts.Dir)+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("creating build dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	b := &builder{opts: opts, root: tmp, src: src.root, pkg: src.lock != nil, py: src.py, deno: deno}

	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"interpreter", b.interpreter},
		{"standard library", b.stdlib},
		{"shared libraries", b.libraries},
		{"deno", b.installDeno},
		{"/etc", b.etc},
		{"CA trust store", func(context.Context) error { return b.trustStore(src.ca) }},
		{"time zones", b.zoneinfo},
		{"mount points", b.mountPoints},
		{"harness", b.harness},
		{"compiling to .pyc", b.compile},
		{"permissions", b.normalize},
		{"deno code cache", b.denoCodeCache},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return nil, fmt.Errorf("building rootfs: %s: %w", s.name, err)
		}
		opts.progress("  %-18s %s", s.name, time.Since(t).Round(time.Millisecond))
	}

	scan, err := scanTree(tmp)
	if err != nil {
		return nil, err
	}
	if len(scan.Setid) > 0 || len(scan.OtherWritable) > 0 || len(scan.Escaping) > 0 || len(scan.Special) > 0 {
		return nil, fmt.Errorf("building rootfs: unsafe entries: setid %v, writable %v, escaping links %v, special %v",
			scan.Setid, scan.OtherWritable, scan.Escaping, scan.Special)
	}
	hv := currentHarness()
	m := &Manifest{
		Format:          jaillayout.ManifestFormat,
		Layout:          jaillayout.Version,
		ProtocolVersion: hv.protocol,
		HarnessSHA256:   hv.sha256,
		PythonVersion:   src.py.Version,
		Stdlib:          src.py.jailStdlib(),
		Files:           scan.Files,
		Bytes:           scan.Bytes,
		CACerts:         src.ca.count,
		ContentSHA256:   scan.SHA256,
		BuiltAt:         opts.now().UTC().Truncate(time.Second),
		Runtime:         opts.Runtime,
		Glibc:           src.glibc,
		Platform:        src.platform(),
		Loader:          b.loader,
		LibraryPath:     b.libPath,
	}
	if src.lock == nil {
		m.PythonPath, m.PythonStamp = opts.PythonPath, src.py.Stamp
	} else {
		m.Distribution = src.lock.Distribution
		m.Packages = src.manifestPackages()
		m.LockSHA256 = src.lock.sha256(src.arch)
	}
	if deno != nil {
		m.DenoVersion, m.DenoStamp, m.DenoCodeCache = deno.Version, deno.Stamp, b.denoCache
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := b.writeFile(jaillayout.ManifestPath, append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("writing manifest: %w", err)
	}
	if err := syncTree(tmp); err != nil {
		return nil, err
	}
	if err := swapInto(tmp, opts.Dir); err != nil {
		return nil, err
	}
	opts.progress("built %s in %s: runtime %s, %d files, %.1f MiB, %d CA certificates, python %s",
		opts.Dir, time.Since(start).Round(time.Millisecond), m.Runtime, m.Files, float64(m.Bytes)/(1<<20), m.CACerts, m.PythonVersion)
	return m, nil
}

// checkReplaceable refuses to replace a directory that is not a rootfs: an
// operator who points rootfs_dir at the wrong place must not lose it.
func checkReplaceable(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking rootfs dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("rootfs dir %s: not a directory: %w", dir, ErrNotRootfs)
	}
	if _, err := os.Lstat(filepath.Join(dir, jaillayout.ManifestPath)); err == nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checking rootfs dir: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("rootfs dir %s: has %d entries and no %s: %w", dir, len(entries), jaillayout.ManifestPath, ErrNotRootfs)
	}
	return nil
}

// host returns the host path of a jail path in the tree being built.
func (b *builder) host(jailPath string) string {
	return filepath.Join(b.root, filepath.FromSlash(jailPath))
}

// from returns the host path of a path in the source the tree is built
// from: the host itself ("/"), or the directory the runtime's packages
// were unpacked into.
func (b *builder) from(p string) string {
	return filepath.Join(b.src, filepath.FromSlash(p))
}

// mirrorDir makes jail path p a directory in the tree and returns its
// canonical jail path. Where the host has a symlink along p (a merged-/usr
// /lib → usr/lib, say), the same link is created, relative, and followed,
// so the tree resolves paths exactly as the host does.
func (b *builder) mirrorDir(p string, depth int) (string, error) {
	if depth > 32 {
		return "", fmt.Errorf("%s: too many levels of symbolic links", p)
	}
	cur := "/"
	for _, part := range strings.Split(strings.Trim(path.Clean(p), "/"), "/") {
		if part == "" {
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(b.host(next))
		switch {
		case err == nil && fi.Mode().Type() == fs.ModeSymlink:
			t, err := os.Readlink(b.host(next))
			if err != nil {
				return "", err
			}
			if cur, err = b.mirrorDir(linkTarget(next, t), depth+1); err != nil {
				return "", err
			}
			continue
		case err == nil && fi.IsDir():
			cur = next
			continue
		case err == nil:
			return "", fmt.Errorf("%s: not a directory", next)
		case !errors.Is(err, os.ErrNotExist):
			return "", err
		}
		if hfi, herr := os.Lstat(b.from(next)); herr == nil && hfi.Mode().Type() == fs.ModeSymlink {
			t, err := os.Readlink(b.from(next))
			if err != nil {
				return "", err
			}
			abs := linkTarget(next, t)
			if err := b.symlink(next, abs); err != nil {
				return "", err
			}
			if cur, err = b.mirrorDir(abs, depth+1); err != nil {
				return "", err
			}
			continue
		}
		if err := os.Mkdir(b.host(next), 0o755); err != nil {
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// linkTarget is the absolute, clean path a symlink at link pointing to
// target names (".." at / stays at /, as in the jail).
func linkTarget(link, target string) string {
	if path.IsAbs(target) {
		return path.Clean(target)
	}
	return path.Join(path.Dir(link), target)
}

// symlink creates a relative symlink at jail path link to jail path abs, so
// the link resolves inside the tree both in the jail and on the host.
func (b *builder) symlink(link, abs string) error {
	rel, err := filepath.Rel(path.Dir(link), abs)
	if err != nil {
		return err
	}
	return os.Symlink(rel, b.host(link))
}

// installFile copies the source's file at hostPath to the same jail path,
// reproducing every symlink on the way (directories and the file itself).
func (b *builder) installFile(hostPath string, depth int) error {
	if depth > 32 {
		return fmt.Errorf("%s: too many levels of symbolic links", hostPath)
	}
	dir, err := b.mirrorDir(path.Dir(hostPath), 0)
	if err != nil {
		return err
	}
	p := path.Join(dir, path.Base(hostPath))
	if _, err := os.Lstat(b.host(p)); err == nil {
		return nil // already installed
	}
	fi, err := os.Lstat(b.from(p))
	if err != nil {
		return err
	}
	switch {
	case fi.Mode().Type() == fs.ModeSymlink:
		t, err := os.Readlink(b.from(p))
		if err != nil {
			return err
		}
		abs := linkTarget(p, t)
		if err := b.symlink(p, abs); err != nil {
			return err
		}
		return b.installFile(abs, depth+1)
	case fi.Mode().IsRegular():
		return copyFile(b.from(p), b.host(p), fi)
	default:
		return fmt.Errorf("%s: not a regular file", p)
	}
}

// copyFile copies a regular file, keeping its modification time (so .pyc
// files compiled from it are reproducible) and its executable bit only.
func copyFile(src, dst string, fi fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	mode := fs.FileMode(0o644)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o755
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

// writeFile writes a generated file at a jail path.
func (b *builder) writeFile(jailPath string, data []byte, mode fs.FileMode) error {
	if _, err := b.mirrorDir(path.Dir(jailPath), 0); err != nil {
		return err
	}
	if err := os.WriteFile(b.host(jailPath), data, mode); err != nil {
		return err
	}
	return os.Chtimes(b.host(jailPath), fixedMtime, fixedMtime)
}

// fixedMtime stamps generated files so the tree's .pyc files and content
// hash do not depend on when it was built.
var fixedMtime = time.Unix(315532800, 0) // 1980-01-01

func (b *builder) interpreter(context.Context) error {
	// Merged-/usr hosts: reproduce /bin, /lib, /lib64, /sbin → usr/….
	for _, top := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if fi, err := os.Lstat(b.from(top)); err == nil && fi.Mode().Type() == fs.ModeSymlink {
			if _, err := b.mirrorDir(top, 0); err != nil {
				return err
			}
		}
	}
	dir, err := b.mirrorDir(path.Dir(jaillayout.PythonPath), 0)
	if err != nil {
		return err
	}
	fi, err := os.Stat(b.from(b.py.Real))
	if err != nil {
		return err
	}
	return copyFile(b.from(b.py.Real), b.host(path.Join(dir, path.Base(jaillayout.PythonPath))), fi)
}

// Standard library pruning. Paths are relative to the stdlib directory.
var (
	// dropTopLevel are top-level stdlib entries not shipped: test suites,
	// GUI (no display in a jail), installers and build-time leftovers.
	dropTopLevel = map[string]bool{
		"test": true, "idlelib": true, "tkinter": true, "turtledemo": true,
		"ensurepip": true, "pydoc_data": true, "turtle.py": true,
		"site-packages": true, "dist-packages": true, "__phello__": true,
		"__hello__.py": true,
	}
	// dropDirNames are package sub-directories holding test suites
	// (ctypes/test, sqlite3/test, unittest/test, lib2to3/tests, …).
	dropDirNames = map[string]bool{"test": true, "tests": true, "idle_test": true, "__pycache__": true}
	// dropDynloadPrefixes are extension modules only the test suite uses.
	dropDynloadPrefixes = []string{"_test", "_ctypes_test", "xxlimited", "_xxtestfuzz", "_tkinter"}
)

func (b *builder) stdlib(context.Context) error {
	src := b.from(b.py.Stdlib)
	dst := b.py.jailStdlib()
	if _, err := b.mirrorDir(dst, 0); err != nil {
		return err
	}
	if err := b.copyTree(src, dst, true); err != nil {
		return err
	}
	// A lib-dynload outside the stdlib dir (some distributions) goes to
	// where the interpreter's exec-prefix search expects it.
	if rel, err := filepath.Rel(b.py.Stdlib, b.py.Dynload); err != nil || strings.HasPrefix(rel, "..") {
		if _, err := b.mirrorDir(path.Join(dst, "lib-dynload"), 0); err != nil {
			return err
		}
		return b.copyTree(b.from(b.py.Dynload), path.Join(dst, "lib-dynload"), false)
	}
	return nil
}

// copyTree copies the pruned stdlib tree at host dir src to jail dir dst.
// Symlinks staying inside src are kept (relative); ones leaving it (such as
// Debian's sitecustomize.py → /etc/python3.11/…) carry host configuration
// and are dropped.
func (b *builder) copyTree(src, dst string, top bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		name := d.Name()
		depth := strings.Count(rel, "/")
		if (top && depth == 0 && (dropTopLevel[name] || strings.HasPrefix(name, "config-"))) ||
			(d.IsDir() && dropDirNames[name]) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".pyo") {
			return nil
		}
		if inDynload := (top && path.Dir(rel) == "lib-dynload") || (!top && depth == 0); inDynload && !d.IsDir() {
			for _, pre := range dropDynloadPrefixes {
				if strings.HasPrefix(name, pre) {
					return nil
				}
			}
		}
		jp := path.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(b.host(jp), 0o755)
		case fi.Mode().Type() == fs.ModeSymlink:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			joined := path.Join(path.Dir(rel), t)
			if path.IsAbs(t) || joined == ".." || strings.HasPrefix(joined, "../") {
				return nil // leaves the tree
			}
			if _, err := os.Stat(p); err != nil {
				return nil // dangling
			}
			return b.symlink(jp, path.Join(dst, joined))
		case fi.Mode().IsRegular():
			return copyFile(p, b.host(jp), fi)
		default:
			return nil
		}
	})
}

// extensionModules lists the source paths of the extension modules shipped.
func (b *builder) extensionModules() ([]string, error) {
	var mods []string
	dyn := b.host(path.Join(b.py.jailStdlib(), "lib-dynload"))
	entries, err := os.ReadDir(dyn)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".so") {
			mods = append(mods, filepath.Join(b.py.Dynload, e.Name()))
		}
	}
	return mods, nil
}

// extraLibs are shipped, with their own closure, when the host has them
// (a runtime built from packages must have every one: its lock's roots
// name the packages that hold them), though neither the interpreter nor
// its extension modules link them: libgcc_s is loaded with dlopen by glibc (thread cancellation and
// unwinding, pthread_exit); the others are the system libraries a
// manylinux wheel may link without bundling them (PEP 599/600's
// whitelist, less its X11, OpenGL and GLib entries), so installed
// packages with C or C++ extensions (numpy, matplotlib, pillow) load.
var extraLibs = []string{
	"libgcc_s.so.1",
	"libstdc++.so.6",
	"libm.so.6",
	"libdl.so.2",
	"librt.so.1",
	"libpthread.so.0",
	"libutil.so.1",
	"libnsl.so.1",
	"libresolv.so.2",
}

func (b *builder) libraries(context.Context) error {
	mods, err := b.extensionModules()
	if err != nil {
		return err
	}
	r := newLibResolver(b.src)
	roots := append([]string{b.py.Real}, mods...)
	libs, err := r.closure(roots)
	if err != nil {
		return err
	}
	pyELF, err := r.read(b.py.Real)
	if err != nil {
		return err
	}
	for _, name := range extraLibs {
		p, err := r.resolve(name, pyELF)
		if err != nil {
			if b.pkg {
				// A runtime's packages are pinned: a library missing from
				// them is the lock's fault, not a host's lack.
				return fmt.Errorf("%s is not in the runtime's packages (add the package that holds it to its roots in the lock): %w", name, err)
			}
			continue
		}
		more, err := r.closure([]string{p})
		if err != nil {
			return err
		}
		libs = append(libs, p)
		libs = append(libs, more...)
	}
	for _, l := range libs {
		if err := b.installFile(l, 0); err != nil {
			return fmt.Errorf("installing %s: %w", l, err)
		}
	}
	b.opts.progress("  %d shared libraries for the interpreter and %d extension modules", len(libs), len(mods))
	if b.pkg {
		// The tree's interpreter needs the tree's C library, which may be
		// newer than the host's: on the host it runs through the tree's
		// own loader (compile, and the sandbox's package installs).
		if pyELF.interp == "" {
			return fmt.Errorf("%s has no ELF interpreter", b.py.Real)
		}
		if b.loader, err = realPathIn(b.root, pyELF.interp); err != nil {
			return fmt.Errorf("the interpreter's loader %s: %w", pyELF.interp, err)
		}
		seen := map[string]bool{}
		for _, d := range r.dirs {
			real, err := realPathIn(b.root, d)
			if err != nil || seen[real] {
				continue
			}
			if fi, err := os.Stat(b.host(real)); err == nil && fi.IsDir() {
				seen[real] = true
				b.libPath = append(b.libPath, real)
			}
		}
	}
	return nil
}

// Generated /etc files. Only the tool user (jaillayout.ToolUID), nobody and
// their groups exist: host root is not mapped into the jail.
var etcFiles = map[string]string{
	"/etc/passwd": fmt.Sprintf("tool:x:%d:%d:execgate tool:%s:/usr/sbin/nologin\n", jaillayout.ToolUID, jaillayout.ToolGID, jaillayout.TmpDir) +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"/etc/group": fmt.Sprintf("tool:x:%d:\nnogroup:x:65534:\n", jaillayout.ToolGID),
	"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\n" +
		"hosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	jaillayout.Hosts: "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	// The sandbox binds the resolver configuration over this file, read-only,
	// in network modes that resolve names.
	jaillayout.ResolvConf: "# execgate: no resolver in this jail (network none)\n",
}

// hostEtcFiles are public reference data copied from the host when present
// (service and protocol names for getaddrinfo/getservbyname).
var hostEtcFiles = []string{"/etc/services", "/etc/protocols"}

func (b *builder) etc(context.Context) error {
	for p, content := range etcFiles {
		if err := b.writeFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, p := range hostEtcFiles {
		data, err := os.ReadFile(b.from(p))
		if err != nil {
			continue
		}
		if err := b.writeFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// trustStore installs the bundle and the hash-named certificates as real
// files at Debian's and OpenSSL's default locations; OpenSSL's directory
// gets hard links to the same files.
func (b *builder) trustStore(ca *caStore) error {
	if err := b.writeFile(jaillayout.CABundlePath, ca.bundle, 0o644); err != nil {
		return err
	}
	for _, n := range ca.names() {
		if err := b.writeFile(path.Join(jaillayout.CADir, n), ca.hashed[n], 0o644); err != nil {
			return err
		}
	}
	// A real directory even where the host's is a link (Debian:
	// /usr/lib/ssl/certs → /etc/ssl/certs).
	sslDir, err := b.mirrorDir(jaillayout.OpenSSLDir, 0)
	if err != nil {
		return err
	}
	if err := os.Mkdir(b.host(path.Join(sslDir, "certs")), 0o755); err != nil {
		return err
	}
	if err := os.Link(b.host(jaillayout.CABundlePath), b.host(path.Join(jaillayout.OpenSSLDir, "cert.pem"))); err != nil {
		return err
	}
	for _, n := range ca.names() {
		if err := os.Link(b.host(path.Join(jaillayout.CADir, n)), b.host(path.Join(jaillayout.OpenSSLDir, "certs", n))); err != nil {
			return err
		}
	}
	return nil
}

// mountPointDirs exist so nsjail never has to create a mount point inside
// the (bind-mounted, host-backed) tree.
var mountPointDirs = jaillayout.MountPoints

// devPlaceholders are empty files the sandbox binds the host's devices
// over; without them nsjail would have to create the targets in the tree,
// which it cannot (and must not) do.
var devPlaceholders = jaillayout.Devices

func (b *builder) mountPoints(context.Context) error {
	for _, d := range mountPointDirs {
		if _, err := b.mirrorDir(d, 0); err != nil {
			return err
		}
	}
	for _, f := range devPlaceholders {
		if err := b.writeFile(f, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) harness(context.Context) error {
	hv := currentHarness()
	n := 0
	err := fs.WalkDir(hv.files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		jp := path.Join(jaillayout.HarnessDir, p)
		if d.IsDir() {
			_, err := b.mirrorDir(jp, 0)
			return err
		}
		if strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := fs.ReadFile(hv.files, p)
		if err != nil {
			return err
		}
		n++
		return b.writeFile(jp, data, 0o644)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("harness has no files")
	}
	return nil
}

// compile byte-compiles the stdlib and the harness with the host
// interpreter (the same binary as the tree's) so the read-only jail never
// compiles at start-up. -d records jail paths in tracebacks.
//
// The .pyc files are unchecked-hash based: the interpreter loads them
// without stat-ing or re-hashing the source (checked-hash pycs, the default
// under SOURCE_DATE_EPOCH, cost every start a read and hash of each imported
// source). That is sound because the tree is immutable: read-only in the
// jail and covered by the manifest's content hash, which Verify checks.
func (b *builder) compile(ctx context.Context) error {
	python, jobs := []string{b.py.Path}, "2"
	if b.pkg {
		m := Manifest{Loader: b.loader, LibraryPath: b.libPath}
		python = m.HostPython(b.root)
		// One process: compileall's workers would start sys.executable
		// itself, without the tree's loader.
		jobs = "1"
	}
	for _, dir := range []string{b.py.jailStdlib(), jaillayout.HarnessDir} {
		var out bytes.Buffer
		args := append(append([]string(nil), python[1:]...), "-I", "-S", "-m", "compileall",
			"-q", "-j", jobs, "--invalidation-mode", "unchecked-hash", "-d", dir, b.host(dir))
		cmd := exec.CommandContext(ctx, python[0], args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("compileall %s: %v: %s", dir, err, tail(out.String(), 2000)) // %v: an exit status is not the command's
		}
	}
	return nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// normalize makes every entry root-owned (when building as root), clears
// setuid/setgid/sticky bits and group/other write: directories 0755, files
// 0755 or 0644.
func (b *builder) normalize(context.Context) error { return b.normalizeUnder(b.root) }

// normalizeUnder normalizes top and everything below it.
func (b *builder) normalizeUnder(top string) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if asRoot {
			if err := os.Lchown(p, 0, 0); err != nil {
				return err
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode().Type() == fs.ModeSymlink:
			return nil
		case fi.IsDir():
			return os.Chmod(p, 0o755)
		case p == b.host(jaillayout.PythonPath) || p == b.host(jaillayout.DenoPath):
			return os.Chmod(p, interpreterMode)
		case fi.Mode().Perm()&0o111 != 0:
			return os.Chmod(p, 0o755)
		default:
			return os.Chmod(p, 0o644)
		}
	})
}

// interpreterMode keeps the interpreter executable but unreadable for the
// tool's user: execve of a file the caller cannot read leaves the new
// process non-dumpable (and its memory owned by the initial user
// namespace), so no process of the jail can open another's
// /proc/<pid>/mem, whichever started which. The ELF loader reads the file
// in the kernel; nothing in the interpreter reads its own binary.
const interpreterMode = 0o711

// zoneinfo installs the host's time zone database (IANA tzdata), so
// zoneinfo.ZoneInfo("Europe/Berlin") works in the jail. Every symlink is
// dereferenced: a link inside the database becomes a hard link to the
// file it names (no link is left to resolve at run time), and a link that
// leaves the database (localtime → /etc/localtime: host configuration) is
// dropped. A host without /usr/share/zoneinfo gets none, and a note.
func (b *builder) zoneinfo(context.Context) error {
	src := jaillayout.ZoneinfoDir
	if fi, err := os.Stat(b.from(src)); err != nil || !fi.IsDir() {
		b.opts.progress("  no %s in the source: the jail has no time zone database", src)
		return nil
	}
	if _, err := b.mirrorDir(jaillayout.ZoneinfoDir, 0); err != nil {
		return err
	}
	inside := func(p string) bool { return p == src || strings.HasPrefix(p, src+"/") }
	installed := map[string]string{} // real source path → tree path of its copy
	open := map[string]bool{}        // real directories being walked (a link back to one is a loop)
	// Paths below are paths in the source tree (b.from gives the host
	// path), resolved inside it (realPathIn).
	var walk func(dir string) error
	walk = func(dir string) error {
		real, err := realPathIn(b.src, dir)
		if err != nil {
			return err
		}
		open[real] = true
		defer delete(open, real)
		entries, err := os.ReadDir(b.from(dir))
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				// A link naming a path outside the database is host
				// configuration (localtime → /etc/localtime), wherever
				// it ends up.
				t, err := os.Readlink(b.from(p))
				if err != nil || !inside(linkTarget(p, t)) {
					continue
				}
			}
			real, err := realPathIn(b.src, p)
			if err != nil || !inside(real) {
				continue // dangling, or leaves the database
			}
			fi, err := os.Stat(b.from(real))
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir() && open[real]:
				continue // a link back up: the directory is already there
			case fi.IsDir():
				if err := os.Mkdir(b.host(p), 0o755); err != nil {
					return err
				}
				if err := walk(p); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				if first, ok := installed[real]; ok {
					if err := os.Link(b.host(first), b.host(p)); err != nil {
						return err
					}
					continue
				}
				if err := copyFile(b.from(real), b.host(p), fi); err != nil {
					return err
				}
				installed[real] = p
			}
		}
		return nil
	}
	if err := walk(src); err != nil {
		return err
	}
	b.opts.progress("  %d time zone files from %s", len(installed), b.from(src))
	return nil
}
