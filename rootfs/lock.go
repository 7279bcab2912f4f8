package rootfs

import (
	"context"
	"crypto/sha256"
	_ "embed" // runtimes.lock.json
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/execgate/execgate/rootfs/debian"
)

// Runtimes (issue #25): a runtime is a rootfs tree a run chooses by name.
// "python3.11" and "python3.13" are built from pinned Debian packages
// (bookworm and trixie): the interpreter, its standard library, its own
// C library and every shared library, the CA bundle and tzdata, all
// unpacked from .debs whose names, versions and SHA256 sums are pinned in
// one file, runtimes.lock.json beside this one, and checked before use.
// The host's interpreter is not used. "host" is the tree copied from the
// host's interpreter (Options.PythonPath): the fallback for hosts that
// cannot reach a Debian archive, off unless configured.
//
// How to add a runtime:
//  1. Add an entry to runtimes.lock.json with its name, distribution,
//     sources (archive URL, suite, keyrings), root packages and
//     exclusions, and no packages.
//  2. Run `go run ./cmd/execgate rootfs lock --runtime NAME` to resolve
//     and pin its packages (signatures and hashes checked).
//  3. Add the name to platform.rego's runtimes and limits.Runtimes.
//  4. Build it (`execgate rootfs build --runtime NAME`), list it in
//     sandbox.runtimes, and grant it to tenants (policy data runtimes).

// HostRuntime names the runtime copied from the host's interpreter.
const HostRuntime = "host"

// LockFormat is the version of runtimes.lock.json's own layout.
const LockFormat = 1

// Lock is runtimes.lock.json: for each runtime built from packages, the
// recipe (where its packages come from, which packages it starts from,
// which it never takes) and the result (every package of the closure,
// pinned by version and SHA256, per architecture).
type Lock struct {
	Comment  []string      `json:"_comment,omitempty"`
	Format   int           `json:"format"`
	Runtimes []RuntimeLock `json:"runtimes"`
}

// RuntimeLock is one runtime of the lock.
type RuntimeLock struct {
	// Name is what requests ask for ("python3.13").
	Name string `json:"name"`
	// Python is the interpreter's minor version ("3.13"): the tree's
	// interpreter is /usr/bin/python<Python> of the packages.
	Python string `json:"python"`
	// Distribution names the release ("debian trixie").
	Distribution string `json:"distribution"`
	// Sources are the suites resolved together (a release, its updates,
	// its security archive): the newest version of each package wins.
	Sources []debian.Source `json:"sources"`
	// Roots are the packages the tree starts from; their dependencies
	// are added. Exclude are packages never taken (tooling a tree has no
	// use for: dpkg, debconf, perl); a dependency on them is dropped.
	Roots   []string `json:"roots"`
	Exclude []string `json:"exclude"`
	// ResolvedAt is when the packages were resolved (UTC,
	// 20060102T150405Z): the snapshot.debian.org time a build falls back
	// to when the archive no longer serves a pinned version.
	ResolvedAt string `json:"resolved_at"`
	// Packages are the pinned packages per Debian architecture (amd64,
	// arm64).
	Packages map[string][]LockedDeb `json:"packages"`
}

// LockedDeb is one pinned package.
type LockedDeb struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Suite is the suite it came from (one of the runtime's Sources).
	Suite    string `json:"suite"`
	Filename string `json:"filename"`
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
}

//go:embed runtimes.lock.json
var embeddedLock []byte

// ErrUnknownRuntime is wrapped when a runtime name is neither in the lock
// nor "host".
var ErrUnknownRuntime = errors.New("unknown runtime")

var (
	runtimeNameRE = regexp.MustCompile(`^[a-z][a-z0-9._-]{0,31}$`)
	minorRE       = regexp.MustCompile(`^3\.[0-9]{1,2}$`)
	sha256RE      = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// DefaultLock is the lock compiled into this binary.
func DefaultLock() *Lock {
	l, err := ParseLock(embeddedLock)
	if err != nil {
		panic("rootfs: the embedded runtimes.lock.json is invalid: " + err.Error()) // a test guards it
	}
	return l
}

// ReadLock reads a lock file.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the runtime lock: %w", err)
	}
	l, err := ParseLock(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

// ParseLock decodes and checks a lock: known format, valid and unique
// names, sources, well-formed pins.
func ParseLock(data []byte) (*Lock, error) {
	var l Lock
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("decoding the runtime lock: %w", err)
	}
	if l.Format != LockFormat {
		return nil, fmt.Errorf("runtime lock format %d, this binary reads %d", l.Format, LockFormat)
	}
	seen := map[string]bool{}
	for _, r := range l.Runtimes {
		switch {
		case !runtimeNameRE.MatchString(r.Name) || r.Name == HostRuntime:
			return nil, fmt.Errorf("runtime lock: %q is not a runtime name", r.Name)
		case seen[r.Name]:
			return nil, fmt.Errorf("runtime lock: %s twice", r.Name)
		case !minorRE.MatchString(r.Python):
			return nil, fmt.Errorf("runtime lock: %s: python %q is not like 3.13", r.Name, r.Python)
		case len(r.Sources) == 0 || len(r.Roots) == 0:
			return nil, fmt.Errorf("runtime lock: %s needs sources and roots", r.Name)
		}
		seen[r.Name] = true
		suites := map[string]bool{}
		for _, s := range r.Sources {
			suites[s.Suite] = true
		}
		for arch, pkgs := range r.Packages {
			for _, p := range pkgs {
				if !suites[p.Suite] || p.Name == "" || p.Version == "" || p.Size <= 0 ||
					!sha256RE.MatchString(p.SHA256) || !strings.HasPrefix(p.Filename, "pool/") || strings.Contains(p.Filename, "..") {
					return nil, fmt.Errorf("runtime lock: %s %s: package %q is not a well-formed pin", r.Name, arch, p.Name)
				}
			}
		}
	}
	return &l, nil
}

// Names are the runtimes of the lock, in its order.
func (l *Lock) Names() []string {
	out := make([]string, len(l.Runtimes))
	for i, r := range l.Runtimes {
		out[i] = r.Name
	}
	return out
}

// Runtime returns the lock's entry for name.
func (l *Lock) Runtime(name string) (*RuntimeLock, error) {
	for i := range l.Runtimes {
		if l.Runtimes[i].Name == name {
			return &l.Runtimes[i], nil
		}
	}
	return nil, fmt.Errorf("%w %q: the lock has %s (and %q, the host's interpreter)", ErrUnknownRuntime, name, strings.Join(l.Names(), ", "), HostRuntime)
}

// debianArch is the Debian architecture of this binary's machine.
func debianArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return runtime.GOARCH // amd64, and the others by the same name
}

// pins returns the packages pinned for arch, or an error saying how to
// pin them.
func (r *RuntimeLock) pins(arch string) ([]LockedDeb, error) {
	pkgs := r.Packages[arch]
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("runtime %s has no packages pinned for %s: run `go run ./cmd/execgate rootfs lock --runtime %s --arch %s`", r.Name, arch, r.Name, arch)
	}
	return pkgs, nil
}

// sha256 hashes the entry's recipe and its pins for arch: a tree built
// from another lock is stale.
func (r *RuntimeLock) sha256(arch string) string {
	h := sha256.New()
	rec := *r
	rec.Packages = map[string][]LockedDeb{arch: r.Packages[arch]}
	rec.ResolvedAt = ""
	_ = json.NewEncoder(h).Encode(rec)
	return hex.EncodeToString(h.Sum(nil))
}

// source returns the source of suite with the archive URL as mirror maps it.
func (r *RuntimeLock) source(suite string) (debian.Source, bool) {
	for _, s := range r.Sources {
		if s.Suite == suite {
			return s, true
		}
	}
	return debian.Source{}, false
}

// upstreamVersion is a Debian version's upstream part ("3.13.5" of
// "3.13.5-2+deb13u5").
func upstreamVersion(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	return v
}

// snapshotTime is the format of ResolvedAt (snapshot.debian.org's).
const snapshotTime = "20060102T150405Z"

// Relock resolves the runtimes of l named in names (all when empty) for
// arch against their archives, and returns the lock with their packages
// replaced: every InRelease verified against the source's keyrings, every
// index checked against its Release, the newest version of each package
// of the closure pinned with its SHA256. log, when set, gets progress.
func Relock(ctx context.Context, l *Lock, names []string, arch string, log io.Writer) (*Lock, error) {
	if arch == "" {
		arch = debianArch()
	}
	want := map[string]bool{}
	for _, n := range names {
		if _, err := l.Runtime(n); err != nil {
			return nil, err
		}
		want[n] = true
	}
	c := &debian.Client{}
	if log != nil {
		c.Log = func(format string, args ...any) { fmt.Fprintf(log, "lock: "+format+"\n", args...) }
	}
	out := *l
	out.Runtimes = append([]RuntimeLock(nil), l.Runtimes...)
	for i := range out.Runtimes {
		r := &out.Runtimes[i]
		if len(want) > 0 && !want[r.Name] {
			continue
		}
		var ixs []*debian.Index
		for _, s := range r.Sources {
			ix, err := c.FetchIndex(ctx, s, arch)
			if err != nil {
				return nil, fmt.Errorf("locking %s: %w", r.Name, err)
			}
			ixs = append(ixs, ix)
		}
		pkgs, err := debian.NewUniverse(arch, ixs...).Closure(r.Roots, r.Exclude)
		if err != nil {
			return nil, fmt.Errorf("locking %s: %w", r.Name, err)
		}
		pinned := make([]LockedDeb, len(pkgs))
		for j, p := range pkgs {
			pinned[j] = LockedDeb{Name: p.Name, Version: p.Version, Suite: p.Suite, Filename: p.Filename, Size: p.Size, SHA256: p.SHA256}
		}
		m := map[string][]LockedDeb{}
		for a, ps := range r.Packages {
			m[a] = ps
		}
		m[arch] = pinned
		r.Packages = m
		r.ResolvedAt = time.Now().UTC().Format(snapshotTime)
		if log != nil {
			fmt.Fprintf(log, "lock: %s (%s): %d packages for %s\n", r.Name, r.Distribution, len(pinned), arch)
		}
	}
	return &out, nil
}

// Encode renders the lock as the file holds it: indented JSON, each
// pinned package on one line (so a re-lock's diff reads package by
// package).
func (l *Lock) Encode() ([]byte, error) {
	bare := *l
	bare.Runtimes = make([]RuntimeLock, len(l.Runtimes))
	for i, r := range l.Runtimes {
		r.Packages = nil
		bare.Runtimes[i] = r
	}
	data, err := json.MarshalIndent(bare, "", "  ")
	if err != nil {
		return nil, err
	}
	const hole = `"packages": null`
	var out strings.Builder
	rest := string(data)
	for _, r := range l.Runtimes {
		i := strings.Index(rest, hole)
		if i < 0 {
			return nil, errors.New("encoding the lock: packages missing")
		}
		out.WriteString(rest[:i])
		rest = rest[i+len(hole):]
		out.WriteString(`"packages": {`)
		arches := make([]string, 0, len(r.Packages))
		for a := range r.Packages {
			arches = append(arches, a)
		}
		sort.Strings(arches)
		for j, a := range arches {
			ps := append([]LockedDeb(nil), r.Packages[a]...)
			sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
			key, _ := json.Marshal(a)
			fmt.Fprintf(&out, "\n        %s: [", key)
			for k, p := range ps {
				line, err := json.Marshal(p)
				if err != nil {
					return nil, err
				}
				out.WriteString("\n          ")
				out.Write(line)
				if k < len(ps)-1 {
					out.WriteString(",")
				}
			}
			out.WriteString("\n        ]")
			if j < len(arches)-1 {
				out.WriteString(",")
			}
		}
		if len(arches) > 0 {
			out.WriteString("\n      ")
		}
		out.WriteString("}")
	}
	out.WriteString(rest)
	out.WriteString("\n")
	if _, err := ParseLock([]byte(out.String())); err != nil {
		return nil, fmt.Errorf("encoding the lock: %w", err)
	}
	return []byte(out.String()), nil
}
