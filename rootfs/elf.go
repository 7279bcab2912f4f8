package rootfs

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// libResolver finds the shared libraries an ELF object needs the way the
// dynamic loader would: DT_RPATH (when there is no DT_RUNPATH), DT_RUNPATH,
// then the directories of /etc/ld.so.conf, then the loader's system
// directories. It reads ELF headers only; nothing is executed.
//
// It works in a tree rooted at root ("/" for the host; a directory of
// unpacked packages for a runtime built from them): every path it takes
// and returns is a path inside that tree, and symlinks resolve inside it
// as they would after a chroot.
type libResolver struct {
	root string
	dirs []string // default search directories, in order
}

// newLibResolver reads root's /etc/ld.so.conf and appends the system
// directories for the running architecture.
func newLibResolver(root string) *libResolver {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, d := range readLdConf(root, "/etc/ld.so.conf", 0) {
		add(d)
	}
	for _, d := range systemLibDirs {
		add(d)
	}
	return &libResolver{root: root, dirs: dirs}
}

// hostPath is the host path of tree path p.
func (r *libResolver) hostPath(p string) string { return filepath.Join(r.root, p) }

// systemLibDirs are the loader's built-in directories on the multiarch and
// the classic layouts (Debian/Ubuntu, Fedora/RHEL, Arch).
var systemLibDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// readLdConf returns the directories listed in the ld.so.conf file at
// tree path path, following "include" globs. Unreadable files yield
// nothing: the system directories still apply.
func readLdConf(root, path string, depth int) []string {
	if depth > 8 {
		return nil
	}
	f, err := os.Open(filepath.Join(root, path))
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "include ") || strings.HasPrefix(line, "include\t"):
			pat := strings.TrimSpace(line[len("include"):])
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(path), pat)
			}
			matches, _ := filepath.Glob(filepath.Join(root, pat))
			for _, m := range matches {
				rel, err := filepath.Rel(root, m)
				if err != nil {
					continue
				}
				dirs = append(dirs, readLdConf(root, "/"+filepath.ToSlash(rel), depth+1)...)
			}
		case strings.HasPrefix(line, "hwcap "):
		default:
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// elfDeps is what one ELF object asks of the loader.
type elfDeps struct {
	interp  string   // PT_INTERP, "" for shared objects
	needed  []string // DT_NEEDED
	rpath   []string // DT_RPATH entries with $ORIGIN expanded
	runpath []string // DT_RUNPATH entries with $ORIGIN expanded
	class   elf.Class
	machine elf.Machine
}

// readELF reads the ELF object at host path file; path is its path in the
// tree ($ORIGIN expands to its directory).
func readELF(file, path string) (*elfDeps, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading ELF %s: %w", path, err)
	}
	defer f.Close()
	d := &elfDeps{class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			buf := make([]byte, p.Filesz)
			if _, err := p.ReadAt(buf, 0); err != nil {
				return nil, fmt.Errorf("reading PT_INTERP of %s: %w", path, err)
			}
			d.interp = strings.TrimRight(string(buf), "\x00")
		}
	}
	if f.Section(".dynamic") == nil && d.interp == "" {
		return d, nil // static
	}
	if d.needed, err = f.ImportedLibraries(); err != nil {
		return nil, fmt.Errorf("reading DT_NEEDED of %s: %w", path, err)
	}
	origin := filepath.Dir(path)
	expand := func(tag elf.DynTag) []string {
		vals, _ := f.DynString(tag)
		var out []string
		for _, v := range vals {
			for _, p := range strings.Split(v, ":") {
				if p == "" {
					continue
				}
				p = strings.ReplaceAll(p, "${ORIGIN}", origin)
				p = strings.ReplaceAll(p, "$ORIGIN", origin)
				out = append(out, p)
			}
		}
		return out
	}
	d.rpath = expand(elf.DT_RPATH)
	d.runpath = expand(elf.DT_RUNPATH)
	return d, nil
}

// errLibNotFound is returned when a DT_NEEDED entry resolves nowhere.
var errLibNotFound = errors.New("shared library not found")

// resolve finds the file for a DT_NEEDED name as needed by from.
func (r *libResolver) resolve(name string, from *elfDeps) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var search []string
	if len(from.runpath) == 0 {
		search = append(search, from.rpath...)
	}
	search = append(search, from.runpath...)
	search = append(search, r.dirs...)
	for _, dir := range search {
		p := filepath.Join(dir, name)
		if matchesArch(r.hostPath(p), from) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w (searched %s)", name, errLibNotFound, strings.Join(search, ":"))
}

// matchesArch reports whether p is an ELF object of from's class and machine
// (the loader skips, e.g., 32-bit libraries of the same name).
func matchesArch(p string, from *elfDeps) bool {
	f, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == from.class && f.Machine == from.machine
}

// read reads the ELF object at tree path p.
func (r *libResolver) read(p string) (*elfDeps, error) { return readELF(r.hostPath(p), p) }

// closure returns every tree path the given ELF objects (tree paths) need
// at run time: their interpreters and the transitive DT_NEEDED closure.
// The roots themselves are not included. Paths are as the loader would
// open them (possibly through symlinks).
func (r *libResolver) closure(roots []string) ([]string, error) {
	deps := make([]*elfDeps, 0, len(roots))
	for _, p := range roots {
		d, err := r.read(p)
		if err != nil {
			return nil, err
		}
		deps = append(deps, d)
	}
	return r.closureOf(roots, deps)
}

// closureOf is closure for objects already read: names[i] (a path, for
// errors and de-duplication; it need not be in the tree) was read as
// deps[i]. A host binary that goes into a tree built from packages (Deno)
// is read from the host and resolved against the tree's libraries.
func (r *libResolver) closureOf(names []string, deps []*elfDeps) ([]string, error) {
	var out []string
	seen := map[string]bool{}     // paths already listed
	seenReal := map[string]bool{} // real files already read
	type item struct {
		p string
		d *elfDeps
	}
	var queue []item
	for i, p := range names {
		seen[p] = true
		if rp, err := realPathIn(r.root, p); err == nil {
			seenReal[rp] = true
		}
		queue = append(queue, item{p, deps[i]})
	}
	for len(queue) > 0 {
		p, d := queue[0].p, queue[0].d
		queue = queue[1:]
		var next []string
		if d.interp != "" {
			next = append(next, d.interp)
		}
		for _, n := range d.needed {
			lib, err := r.resolve(n, d)
			if err != nil {
				return nil, fmt.Errorf("resolving libraries of %s: %w", p, err)
			}
			next = append(next, lib)
		}
		for _, n := range next {
			if seen[n] {
				continue
			}
			seen[n] = true
			out = append(out, n)
			rp, err := realPathIn(r.root, n)
			if err != nil {
				return nil, fmt.Errorf("resolving %s: %w", n, err)
			}
			if !seenReal[rp] {
				seenReal[rp] = true
				nd, err := r.read(n)
				if err != nil {
					return nil, err
				}
				queue = append(queue, item{n, nd})
			}
		}
	}
	return out, nil
}

// realPathIn resolves every symlink of tree path p inside root, as the
// kernel would after chroot(root): an absolute link target starts again at
// root, ".." stops at root. The result is a clean tree path.
func realPathIn(root, p string) (string, error) {
	const maxLinks = 40
	links := 0
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", p)
		}
		t, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(t) {
			cur = "/"
		}
		rest = append(strings.Split(t, "/"), rest...)
	}
	return cur, nil
}
