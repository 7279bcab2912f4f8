package rootfs

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/rootfs/debian"
)

// source is what a tree is built from: the host itself (the host
// runtime) or a directory the runtime's pinned packages were unpacked
// into. Paths in py are paths in root.
type source struct {
	root string
	py   *hostPython
	ca   *caStore
	// caFrom says where the trust store came from (progress and errors).
	caFrom string
	// lock and debs are the runtime's lock entry and pins (nil: host).
	lock *RuntimeLock
	arch string
	debs []LockedDeb
	// glibc is the packages' C library version ("2.41"); "" for the host.
	glibc string
}

// hostSource is the host runtime's source: the host's interpreter, its
// libraries and its CA store.
func hostSource(ctx context.Context, opts Options) (*source, error) {
	py, err := probePython(ctx, opts.PythonPath)
	if err != nil {
		return nil, err
	}
	ca, err := readCAStore(opts.CABundle, opts.CADir)
	if err != nil {
		return nil, err
	}
	return &source{root: "/", py: py, ca: ca, caFrom: opts.CABundle}, nil
}

// maxManylinuxMinor is the newest manylinux_2_N platform uv (the
// resolver, sandbox/deps_env.go) knows: a tree with a newer C library
// takes wheels up to it.
const maxManylinuxMinor = 40

// platform is uv's --python-platform for wheels that run on the source's
// C library ("" for the host: the sandbox's default applies).
func (s *source) platform() string {
	if s.glibc == "" {
		return ""
	}
	_, minor, ok := strings.Cut(s.glibc, ".")
	n, err := strconv.Atoi(minor)
	if !ok || err != nil {
		return ""
	}
	n = min(n, maxManylinuxMinor)
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	return fmt.Sprintf("%s-manylinux_2_%d", arch, n)
}

// debianSource fetches the runtime's pinned packages (from the cache, or
// the archive, each checked against its SHA256 in the lock) and unpacks
// them into dir, a new empty directory.
func debianSource(ctx context.Context, opts Options, rl *RuntimeLock, dir string) (*source, error) {
	arch := debianArch()
	pins, err := rl.pins(arch)
	if err != nil {
		return nil, err
	}
	c := &debian.Client{Log: func(format string, args ...any) { opts.progress("  "+format, args...) }}
	cache := debian.Cache{Dir: opts.DebCache}
	paths := make([]string, len(pins))
	for i, p := range pins {
		src, ok := rl.source(p.Suite)
		if !ok {
			return nil, fmt.Errorf("%s: suite %q of package %s is not one of the runtime's sources", rl.Name, p.Suite, p.Name)
		}
		paths[i], err = c.Fetch(ctx, cache, p.Name+"_"+p.Version, p.SHA256, p.Size, debURLs(opts, rl, src, p))
		if err != nil {
			return nil, fmt.Errorf("fetching %s %s of runtime %s: %w", p.Name, p.Version, rl.Name, err)
		}
	}
	if err := debian.MergedUsr(dir); err != nil {
		return nil, fmt.Errorf("preparing %s: %w", dir, err)
	}
	for _, p := range paths {
		if err := debian.Extract(ctx, p, dir); err != nil {
			return nil, fmt.Errorf("runtime %s: %w", rl.Name, err)
		}
	}
	s := &source{root: dir, lock: rl, arch: arch, debs: pins}
	var pyVersion string
	for _, p := range pins {
		switch p.Name {
		case "python" + rl.Python + "-minimal":
			pyVersion = upstreamVersion(p.Version)
		case "libc6":
			v := upstreamVersion(p.Version)
			if parts := strings.SplitN(v, ".", 3); len(parts) >= 2 {
				s.glibc = parts[0] + "." + parts[1]
			}
		}
	}
	if pyVersion == "" {
		return nil, fmt.Errorf("runtime %s: no python%s-minimal among its packages", rl.Name, rl.Python)
	}
	stdlib := "/usr/lib/python" + rl.Python
	s.py = &hostPython{
		Path: "/usr/bin/python" + rl.Python, Real: "/usr/bin/python" + rl.Python,
		Version: pyVersion, Short: rl.Python, PlatLibDir: "lib",
		Stdlib: stdlib, Dynload: stdlib + "/lib-dynload",
	}
	for _, p := range []string{s.py.Real, s.py.Stdlib + "/os.py", s.py.Dynload} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return nil, fmt.Errorf("runtime %s: its packages hold no %s", rl.Name, p)
		}
	}
	s.ca, err = readPackagedCAs(filepath.Join(dir, "usr/share/ca-certificates"))
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rl.Name, err)
	}
	s.caFrom = "ca-certificates"
	return s, nil
}

// debURLs are where a pinned package is fetched from, in order: the
// source's archive (or opts.DebianMirror in its place), then
// snapshot.debian.org at the time the lock was resolved (the archive drops
// superseded versions; the snapshot keeps them).
func debURLs(opts Options, rl *RuntimeLock, src debian.Source, p LockedDeb) []string {
	base := strings.TrimSuffix(src.URL, "/")
	if opts.DebianMirror != "" {
		if u, err := url.Parse(base); err == nil {
			base = strings.TrimSuffix(opts.DebianMirror, "/") + u.Path
		}
	}
	urls := []string{base + "/" + p.Filename}
	if rl.ResolvedAt != "" {
		if u, err := url.Parse(src.URL); err == nil {
			archive := path.Base(u.Path) // debian, debian-security
			urls = append(urls, "http://snapshot.debian.org/archive/"+archive+"/"+rl.ResolvedAt+"/"+p.Filename)
		}
	}
	return urls
}

// readPackagedCAs builds the trust store from the certificates the
// ca-certificates package ships (what update-ca-certificates would
// concatenate with Debian's default configuration: every one of them).
func readPackagedCAs(dir string) (*caStore, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".crt") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the packaged CA certificates: %w", err)
	}
	sort.Strings(files)
	var all []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		all = append(append(all, data...), '\n')
	}
	bundle, n := parseCABundle(all)
	if n == 0 {
		return nil, fmt.Errorf("no certificate in %s: %w", dir, ErrEmptyCAStore)
	}
	return &caStore{bundle: bundle, count: n, hashed: map[string][]byte{}}, nil
}

// manifestPackages are the pins as the manifest records them.
func (s *source) manifestPackages() []jaillayout.Package {
	out := make([]jaillayout.Package, len(s.debs))
	for i, p := range s.debs {
		out[i] = jaillayout.Package{Name: p.Name, Version: p.Version, SHA256: p.SHA256}
	}
	return out
}
