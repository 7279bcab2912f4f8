package rootfs

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// libResolver finds the shared libraries an ELF object needs the way the
// dynamic loader would: DT_RPATH (when there is no DT_RUNPATH), DT_RUNPATH,
// then the directories of /etc/ld.so.conf, then the loader's system
// directories. It reads ELF headers only; nothing is executed.
type libResolver struct {
	dirs []string // default search directories, in order
}

// newLibResolver reads ldConf (normally /etc/ld.so.conf) and appends the
// system directories for the running architecture.
func newLibResolver(ldConf string) *libResolver {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, d := range readLdConf(ldConf, 0) {
		add(d)
	}
	for _, d := range systemLibDirs {
		add(d)
	}
	return &libResolver{dirs: dirs}
}

// systemLibDirs are the loader's built-in directories on the multiarch and
// the classic layouts (Debian/Ubuntu, Fedora/RHEL, Arch).
var systemLibDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// readLdConf returns the directories listed in an ld.so.conf file,
// following "include" globs. Unreadable files yield nothing: the system
// directories still apply.
func readLdConf(path string, depth int) []string {
	if depth > 8 {
		return nil
	}
	f, err := os.Open(path)
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
			matches, _ := filepath.Glob(pat)
			for _, m := range matches {
				dirs = append(dirs, readLdConf(m, depth+1)...)
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

func readELF(path string) (*elfDeps, error) {
	f, err := elf.Open(path)
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
		if matchesArch(p, from) {
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

// closure returns every host path the given ELF objects need at run time:
// their interpreters and the transitive DT_NEEDED closure. The roots
// themselves are not included. Paths are as the loader would open them
// (possibly through symlinks).
func (r *libResolver) closure(roots []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}     // paths already listed
	seenReal := map[string]bool{} // real files already read
	queue := append([]string(nil), roots...)
	for _, p := range roots {
		seen[p] = true
		if rp, err := filepath.EvalSymlinks(p); err == nil {
			seenReal[rp] = true
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		d, err := readELF(p)
		if err != nil {
			return nil, err
		}
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
			rp, err := filepath.EvalSymlinks(n)
			if err != nil {
				return nil, fmt.Errorf("resolving %s: %w", n, err)
			}
			if !seenReal[rp] {
				seenReal[rp] = true
				queue = append(queue, n)
			}
		}
	}
	return out, nil
}
