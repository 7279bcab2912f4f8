package npm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Platform is the os and cpu (npm's names: "linux", "x64") optional
// dependencies are chosen for: one whose package names other systems is
// left out, as npm leaves it out.
type Platform struct{ OS, CPU string }

// HostPlatform is the platform of this host.
func HostPlatform() Platform {
	cpu := runtime.GOARCH
	switch cpu {
	case "amd64":
		cpu = "x64"
	case "386":
		cpu = "ia32"
	}
	return Platform{OS: runtime.GOOS, CPU: cpu}
}

// fits reports whether a package's os or cpu list admits ours: an empty
// list admits every system; "!x" excludes x; otherwise ours must be listed.
func fits(list []string, ours string) bool {
	positive := false
	for _, e := range list {
		if neg, ok := strings.CutPrefix(e, "!"); ok {
			if neg == ours {
				return false
			}
			continue
		}
		positive = true
		if e == ours {
			return true
		}
	}
	return !positive
}

// maxFetchers bounds the registry requests one resolution has in flight.
const maxFetchers = 8

// maxResolveBytes bounds the metadata one resolution holds (every
// packument it fetched, kept until it ends): a requirement whose
// dependencies pull in hundreds of packages with long histories is
// refused rather than held in memory.
var maxResolveBytes int64 = 128 << 20

// Bounds on the work of one resolution, besides MaxPackages and MaxDepth
// (variables for tests). A package's metadata names its dependencies, so
// whoever publishes it chooses how many packages a resolution looks up:
// each bound is checked before the requests it would cost are made.
var (
	// maxPackuments bounds the packages whose metadata one resolution
	// fetches: the packages it chooses, and the optional dependencies it
	// looks up and leaves out (another platform's, missing ones).
	maxPackuments = 2 * MaxPackages
	// maxEdges bounds the dependency entries of the chosen packages in
	// all (each is matched against what is chosen, and reported when it
	// fails).
	maxEdges = 64 * MaxPackages
)

// boundError is the error of a bound above: it is never skipped as an
// optional dependency's failure is.
type boundError struct{ error }

// resolveSlots bounds the resolutions of this process in flight, so what
// they hold together stays below a few times maxResolveBytes whoever asks.
var resolveSlots = make(chan struct{}, 2)

// edge is a dependency to resolve: name and the range (or tag) asked for,
// by parent (name@version; "" for a requirement).
type edge struct {
	name, spec, parent string
	optional           bool
	depth              int // 1 for a requirement
}

// node is a chosen version.
type node struct {
	v   version
	pkg Package
}

// resolution is the state of one Resolve.
type resolution struct {
	reg      *Registry
	platform Platform
	docs     map[string]*packument
	bytes    int64             // the metadata held in docs
	failed   map[string]error  // packuments that could not be fetched
	chosen   map[string][]node // name → versions chosen, in the order chosen
	count    int               // packages chosen
	fetched  int               // packuments asked for
	edges    int               // dependency entries of the chosen packages
}

// Resolve finds the complete set of packages reqs need: each requirement's
// exact version, then every dependency (dependencies, non-optional peer
// dependencies, and optional dependencies that fit platform), breadth
// first. A range already met by a chosen version reuses it; otherwise the
// registry's "latest" tag when the range admits it, else the highest
// version in the range (not deprecated, when one is). Every package must
// have a sha512 integrity; dependencies must be registry ranges, tags or
// npm: aliases (no git, file, link or URL dependencies). The error names
// the package and the chain that asked for it.
func Resolve(ctx context.Context, reg *Registry, platform Platform, reqs []Requirement) ([]Package, error) {
	select {
	case resolveSlots <- struct{}{}:
		defer func() { <-resolveSlots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &resolution{reg: reg, platform: platform, docs: map[string]*packument{}, failed: map[string]error{}, chosen: map[string][]node{}}
	var level []edge
	for _, r := range reqs {
		level = append(level, edge{name: r.Name, spec: r.Version, depth: 1})
	}
	for len(level) > 0 {
		if err := res.fetch(ctx, level); err != nil {
			return nil, err
		}
		var next []edge
		for _, e := range level {
			more, err := res.visit(e)
			if err != nil {
				if e.optional && !errors.As(err, new(boundError)) {
					continue // npm skips an optional dependency it cannot install
				}
				return nil, err
			}
			next = append(next, more...)
		}
		level = next
	}
	var out []Package
	for _, ns := range res.chosen {
		for _, n := range ns {
			out = append(out, n.pkg)
		}
	}
	sortPackages(out)
	return out, nil
}

// fetch gets the packuments of the edges' packages not fetched yet.
func (res *resolution) fetch(ctx context.Context, level []edge) error {
	var names []string
	seen := map[string]bool{}
	for _, e := range level {
		name, _, err := target(e)
		if err != nil || res.docs[name] != nil || res.failed[name] != nil || seen[name] {
			continue
		}
		seen[name] = true
		if res.fetched++; res.fetched > maxPackuments {
			return boundError{fmt.Errorf("the dependencies name more than %d packages to look up (at %s)", maxPackuments, name)}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	docs := make([]*packument, len(names))
	sizes := make([]int64, len(names))
	errs := make([]error, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxFetchers)
	for i, name := range names {
		g.Go(func() error {
			docs[i], sizes[i], errs[i] = res.reg.packument(gctx, name)
			return nil
		})
	}
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	// A failed fetch is reported when an edge needs it (an optional
	// dependency's failure is skipped there).
	for i, name := range names {
		if errs[i] != nil {
			res.failed[name] = errs[i]
			continue
		}
		if res.bytes += sizes[i]; res.bytes > maxResolveBytes {
			return boundError{fmt.Errorf("the metadata of the dependencies comes to more than %s (at %s)", sizeText(maxResolveBytes), name)}
		}
		res.docs[name] = docs[i]
	}
	return nil
}

// target is the package and range an edge asks for: an npm: alias names
// another package.
func target(e edge) (name, spec string, err error) {
	name, spec = e.name, strings.TrimSpace(e.spec)
	if aliased, ok := strings.CutPrefix(spec, "npm:"); ok {
		i := strings.LastIndexByte(aliased, '@')
		if i <= 0 {
			name, spec = aliased, "*"
		} else {
			name, spec = aliased[:i], aliased[i+1:]
		}
	}
	if !ValidName(name) {
		return "", "", fmt.Errorf("%q is not an npm package name", clip(name, 80))
	}
	if strings.Contains(spec, ":") || strings.Contains(spec, "/") {
		return "", "", fmt.Errorf("%s@%s is not a registry version (git, file, link and URL dependencies are not installed)", name, clip(spec, 120))
	}
	return name, spec, nil
}

// visit resolves one edge, returning the dependencies of a newly chosen
// version.
func (res *resolution) visit(e edge) ([]edge, error) {
	name, spec, err := target(e)
	if err != nil {
		return nil, res.fail(e, err.Error())
	}
	if err := res.failed[name]; err != nil {
		return nil, res.fail(e, err.Error())
	}
	doc := res.docs[name]
	rng, rerr := parseRange(spec)
	var tagged string
	if rerr != nil {
		v, ok := doc.DistTags[spec]
		if !ok {
			return nil, res.fail(e, fmt.Sprintf("%s@%s: %q is neither a version range nor a tag of %s", name, clip(spec, 80), clip(spec, 80), name))
		}
		tagged = v
	}
	matches := func(v version) bool {
		if tagged != "" {
			return v.text == tagged
		}
		return rng.satisfiedBy(v)
	}
	for _, n := range res.chosen[name] {
		if matches(n.v) {
			return nil, nil
		}
	}
	v, m, err := res.pick(doc, matches)
	if err != nil {
		return nil, res.fail(e, fmt.Sprintf("%s@%s: %v", name, clip(spec, 80), err))
	}
	if e.optional && (!fits(m.OS, res.platform.OS) || !fits(m.CPU, res.platform.CPU)) {
		return nil, res.fail(e, "not for this platform") // skipped by the caller
	}
	if !validIntegrity(m.Dist.Integrity) {
		return nil, res.fail(e, fmt.Sprintf("%s@%s has no sha512 integrity in the registry's metadata (%q)", name, v.text, clip(m.Dist.Integrity, 40)))
	}
	if res.count++; res.count > MaxPackages {
		return nil, boundError{res.fail(e, fmt.Sprintf("the dependencies come to more than %d packages", MaxPackages))}
	}
	if e.depth > MaxDepth {
		return nil, boundError{res.fail(e, fmt.Sprintf("%s@%s is more than %d packages below a requested one", name, v.text, MaxDepth-1))}
	}
	pkg := Package{Name: name, Version: v.text, Integrity: m.Dist.Integrity, Requested: e.parent == "", Parent: e.parent}
	res.chosen[name] = append(res.chosen[name], node{v: v, pkg: pkg})
	deps := dependencies(pkg.Key(), e.depth+1, m)
	if res.edges += len(deps); res.edges > maxEdges {
		return nil, boundError{fmt.Errorf("the dependencies come to more than %d dependency entries (at %s)", maxEdges, pkg.Key())}
	}
	return deps, nil
}

// dependencies are the edges a chosen version adds, in a stable order.
func dependencies(parent string, depth int, m manifest) []edge {
	var out []edge
	seen := map[string]bool{}
	add := func(deps map[string]string, optional func(string) bool, skip func(string) bool) {
		names := make([]string, 0, len(deps))
		for n := range deps {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if seen[n] || skip(n) {
				continue
			}
			seen[n] = true
			out = append(out, edge{name: n, spec: deps[n], parent: parent, optional: optional(n), depth: depth})
		}
	}
	isOptional := func(n string) bool { _, ok := m.OptionalDependencies[n]; return ok }
	never := func(string) bool { return false }
	add(m.Dependencies, isOptional, never)
	add(m.OptionalDependencies, func(string) bool { return true }, never)
	add(m.PeerDependencies, never, func(n string) bool { return m.PeerDependenciesMeta[n].Optional })
	return out
}

// pick chooses a version of doc that matches: the "latest" tag when it
// matches, else the highest match that is not deprecated, else the
// highest match.
func (res *resolution) pick(doc *packument, matches func(version) bool) (version, manifest, error) {
	decode := func(text string) (manifest, bool) {
		var m manifest
		raw, ok := doc.Versions[text]
		if !ok || json.Unmarshal(raw, &m) != nil || m.Version != text {
			return manifest{}, false
		}
		return m, true
	}
	if latest, ok := parseVersion(doc.DistTags["latest"]); ok && matches(latest) {
		if m, ok := decode(latest.text); ok {
			return latest, m, nil
		}
	}
	var cands []version
	for text := range doc.Versions {
		if v, ok := parseVersion(text); ok && v.text == text && matches(v) {
			cands = append(cands, v)
		}
	}
	if len(cands) == 0 {
		return version{}, manifest{}, fmt.Errorf("no published version matches")
	}
	slices.SortFunc(cands, func(a, b version) int { return compareVersions(b, a) })
	var fallback *version
	var fallbackM manifest
	for _, v := range cands {
		m, ok := decode(v.text)
		if !ok {
			continue
		}
		if len(m.Deprecated) == 0 || string(m.Deprecated) == "false" || string(m.Deprecated) == `""` {
			return v, m, nil
		}
		if fallback == nil {
			fallback, fallbackM = &v, m
		}
	}
	if fallback != nil {
		return *fallback, fallbackM, nil
	}
	return version{}, manifest{}, fmt.Errorf("the registry's metadata of every matching version is unreadable")
}

// fail is an error naming the chain that asked for e.
func (res *resolution) fail(e edge, msg string) error {
	if e.parent == "" {
		return fmt.Errorf("%s", msg)
	}
	var all []Package
	for _, ns := range res.chosen {
		for _, n := range ns {
			all = append(all, n.pkg)
		}
	}
	for _, p := range all {
		if p.Key() == e.parent {
			return fmt.Errorf("%s (needed by %s)", msg, strings.Join(Chain(all, p), " → "))
		}
	}
	return fmt.Errorf("%s (needed by %s)", msg, e.parent)
}
