package npm

import (
	"cmp"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Requirement is one package a run asks for: an exact version.
type Requirement struct {
	Name    string
	Version string
}

func (r Requirement) String() string { return r.Name + "@" + r.Version }

// Package is one package of a lock.
type Package struct {
	Name    string
	Version string
	// Integrity is the tarball's Subresource Integrity digest from the
	// registry: "sha512-" and the base64 of its SHA-512.
	Integrity string
	// Requested: named by the run's requirements. Only requested packages
	// are importable by the tool (the import map maps their names).
	Requested bool
	// Parent is name@version of the package that pulled this one in (the
	// first one found, breadth first); "" for a requested package.
	Parent string
}

// Key is name@version.
func (p Package) Key() string { return p.Name + "@" + p.Version }

// Bounds on requests and locks.
const (
	// MaxRequirements bounds the packages one run asks for.
	MaxRequirements = 64
	// MaxPackages bounds the packages of one environment (its whole
	// dependency closure).
	MaxPackages = 512
	// MaxLockBytes bounds a lock's text.
	MaxLockBytes = 256 << 10
	// MaxDepth bounds how deep a package sits below a requested one: the
	// names of its chain (Chain), the requested package's own included.
	// Every package's chain goes into the policy's input, so a deeper one
	// would multiply a lock's size there (512 packages in one chain make
	// 131,328 names of a 256 KiB lock).
	MaxDepth = 32
	// maxNameLen is npm's limit on a package name.
	maxNameLen = 214
)

// LockHeader is the first line of every lock this package writes and
// reads: it tells an npm lock from a Python one.
const LockHeader = "# execgate npm lock 1"

// ErrInvalidLock is wrapped by every complaint about a lock.
var ErrInvalidLock = errors.New("invalid npm lock")

// nameRE is an npm package name: an optional @scope/, then URL-safe
// characters, not starting with "." or "_" (validate-npm-package-name;
// upper case is allowed for the old packages that have it).
var nameRE = regexp.MustCompile(`^(?:@[a-z0-9~-][a-z0-9._~-]*/)?[A-Za-z0-9~-][A-Za-z0-9._~-]*$`)

// ValidName reports whether name is a package name this package handles.
func ValidName(name string) bool {
	return len(name) <= maxNameLen && nameRE.MatchString(name)
}

// ParseRequirement reads "name@version" ("left-pad@1.3.0",
// "@scope/pkg@2.0.0-rc.1"): a package name and an exact version (no
// ranges, tags, URLs, paths or npm: prefix).
func ParseRequirement(s string) (Requirement, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "npm:") {
		return Requirement{}, fmt.Errorf("write it without the npm: prefix (%s)", strings.TrimPrefix(s, "npm:"))
	}
	i := strings.LastIndexByte(s, '@')
	if i <= 0 {
		return Requirement{}, errors.New("is not name@version with an exact version")
	}
	name, ver := s[:i], s[i+1:]
	if !ValidName(name) {
		return Requirement{}, fmt.Errorf("%q is not an npm package name", clip(name, 80))
	}
	v, ok := parseVersion(ver)
	if !ok || v.text != ver {
		return Requirement{}, fmt.Errorf("%q is not an exact version (like 1.3.0): ranges, tags and URLs are not allowed", clip(ver, 80))
	}
	return Requirement{Name: name, Version: ver}, nil
}

// ParseRequirements reads every requirement (ParseRequirement), refusing
// more than MaxRequirements and a package named twice, and returns them
// sorted. The error names the first bad entry.
func ParseRequirements(reqs []string) ([]Requirement, error) {
	if len(reqs) > MaxRequirements {
		return nil, fmt.Errorf("requirements: %d entries, at most %d are allowed", len(reqs), MaxRequirements)
	}
	out := make([]Requirement, 0, len(reqs))
	seen := map[string]bool{}
	for i, raw := range reqs {
		r, err := ParseRequirement(raw)
		if err != nil {
			return nil, fmt.Errorf("requirements[%d]: %q %v; want an npm package with an exact version like left-pad@1.3.0", i, clip(raw, 120), err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("requirements[%d]: %q names %s again", i, clip(raw, 120), r.Name)
		}
		seen[r.Name] = true
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Requirement) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// validIntegrity reports whether s is "sha512-" and the base64 of 64 bytes.
func validIntegrity(s string) bool {
	b64, ok := strings.CutPrefix(s, "sha512-")
	if !ok {
		return false
	}
	d, err := base64.StdEncoding.DecodeString(b64)
	return err == nil && len(d) == sha512.Size
}

// sortPackages orders pkgs by name, then version precedence.
func sortPackages(pkgs []Package) {
	slices.SortFunc(pkgs, func(a, b Package) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		va, _ := parseVersion(a.Version)
		vb, _ := parseVersion(b.Version)
		return cmp.Or(compareVersions(va, vb), strings.Compare(a.Version, b.Version))
	})
}

// RenderLock writes pkgs as a lock:
//
//	# execgate npm lock 1
//	debug@4.3.4 sha512-…
//	ms@2.1.2 sha512-… # via debug@4.3.4
//
// one package per line, sorted; a requested package has no "# via".
// ParseLock(RenderLock(p)) gives p back (sorted).
func RenderLock(pkgs []Package) string {
	pkgs = slices.Clone(pkgs)
	sortPackages(pkgs)
	var b strings.Builder
	b.WriteString(LockHeader + "\n")
	for _, p := range pkgs {
		b.WriteString(p.Key() + " " + p.Integrity)
		if !p.Requested {
			b.WriteString(" # via " + p.Parent)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// IsLock reports whether text starts like a lock of this package.
func IsLock(text string) bool {
	return strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), LockHeader)
}

// ParseLock reads a lock RenderLock wrote (or one written the same way):
// the header, then name@version integrity [# via parent@version] lines.
// Every package needs a sha512 integrity; every parent must be in the
// lock; at least one package must be requested.
func ParseLock(text string) ([]Package, error) {
	if len(text) > MaxLockBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidLock, len(text), MaxLockBytes)
	}
	if !IsLock(text) {
		return nil, fmt.Errorf("%w: it does not start with %q", ErrInvalidLock, LockHeader)
	}
	var pkgs []Package
	seen := map[string]bool{}
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(why string) error {
			return fmt.Errorf("%w: line %d %q %s", ErrInvalidLock, i+1, clip(line, 120), why)
		}
		entry, via, hasVia := strings.Cut(line, " # via ")
		fields := strings.Fields(entry)
		if len(fields) != 2 {
			return nil, bad("is not name@version integrity [# via parent@version]")
		}
		r, err := ParseRequirement(fields[0])
		if err != nil {
			return nil, bad(err.Error())
		}
		if !validIntegrity(fields[1]) {
			return nil, bad("has no sha512 integrity (sha512-<base64>)")
		}
		p := Package{Name: r.Name, Version: r.Version, Integrity: fields[1], Requested: !hasVia}
		if hasVia {
			parent, err := ParseRequirement(strings.TrimSpace(via))
			if err != nil {
				return nil, bad("names a parent that is not name@version")
			}
			p.Parent = parent.String()
		}
		if seen[p.Key()] {
			return nil, bad("locks " + p.Key() + " twice")
		}
		seen[p.Key()] = true
		pkgs = append(pkgs, p)
		if len(pkgs) > MaxPackages {
			return nil, fmt.Errorf("%w: more than %d packages", ErrInvalidLock, MaxPackages)
		}
	}
	requested := false
	for _, p := range pkgs {
		requested = requested || p.Requested
		if p.Parent != "" && !seen[p.Parent] {
			return nil, fmt.Errorf("%w: %s is pulled in by %s, which is not in the lock", ErrInvalidLock, p.Key(), p.Parent)
		}
	}
	if !requested {
		return nil, fmt.Errorf("%w: no requested package (a line without \"# via\")", ErrInvalidLock)
	}
	if p, ok := tooDeep(pkgs); ok {
		return nil, fmt.Errorf("%w: %s is more than %d packages below a requested one (or its parents loop)", ErrInvalidLock, p.Key(), MaxDepth-1)
	}
	sortPackages(pkgs)
	return pkgs, nil
}

// tooDeep finds a package whose chain (Chain) is longer than MaxDepth,
// walking at most MaxDepth parents from each.
func tooDeep(pkgs []Package) (Package, bool) {
	byKey := make(map[string]Package, len(pkgs))
	for _, q := range pkgs {
		byKey[q.Key()] = q
	}
	for _, p := range pkgs {
		cur, n := p, 1
		for !cur.Requested && cur.Parent != "" {
			next, ok := byKey[cur.Parent]
			if !ok {
				break
			}
			if n++; n > MaxDepth {
				return p, true
			}
			cur = next
		}
	}
	return Package{}, false
}

// Chain is how p was pulled in, as package names from a requested package
// down to p (["debug", "ms"]); a requested package's chain is itself.
func Chain(pkgs []Package, p Package) []string {
	byKey := make(map[string]Package, len(pkgs))
	for _, q := range pkgs {
		byKey[q.Key()] = q
	}
	chain := []string{p.Name}
	seen := map[string]bool{p.Key(): true}
	for cur := p; !cur.Requested && cur.Parent != "" && !seen[cur.Parent]; {
		next, ok := byKey[cur.Parent]
		if !ok {
			break
		}
		seen[next.Key()] = true
		chain = append([]string{next.Name}, chain...)
		cur = next
	}
	return chain
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
