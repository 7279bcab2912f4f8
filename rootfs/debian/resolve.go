package debian

import (
	"fmt"
	"sort"
	"strings"
)

// Universe is the packages of several suites merged: for each name the
// newest version any of them offers (a point release or security update
// beats the release it updates), and who provides each virtual name.
type Universe struct {
	arch     string
	newest   map[string]Package
	provides map[string][]string
}

// NewUniverse merges indices for one architecture. Packages of other
// architectures than arch and "all" are left out.
func NewUniverse(arch string, indices ...*Index) *Universe {
	u := &Universe{arch: arch, newest: map[string]Package{}, provides: map[string][]string{}}
	for _, ix := range indices {
		for _, p := range ix.Packages {
			if p.Architecture != arch && p.Architecture != "all" {
				continue
			}
			if cur, ok := u.newest[p.Name]; ok && CompareVersions(cur.Version, p.Version) >= 0 {
				continue
			}
			u.newest[p.Name] = p
		}
	}
	for _, p := range u.newest {
		for _, v := range p.Provides {
			u.provides[v] = append(u.provides[v], p.Name)
		}
	}
	for v := range u.provides {
		sort.Strings(u.provides[v])
	}
	return u
}

// Lookup returns the newest version of a real package.
func (u *Universe) Lookup(name string) (Package, bool) {
	p, ok := u.newest[name]
	return p, ok
}

// Closure returns roots and everything they depend on (Depends and
// Pre-Depends, transitively), sorted by name. Of alternatives ("a | b")
// the first real, not excluded package is taken; a virtual package is
// satisfied by the first (by name) real package providing it. A
// dependency whose alternatives are all excluded is dropped: exclude lists
// what a runtime tree never needs (package tooling, debconf, perl). A
// root or a dependency that nothing satisfies is an error naming the chain.
func (u *Universe) Closure(roots, exclude []string) ([]Package, error) {
	ex := map[string]bool{}
	for _, e := range exclude {
		ex[e] = true
	}
	chosen := map[string]Package{}
	type item struct {
		name string
		via  []string
	}
	var queue []item
	for _, r := range roots {
		if ex[r] {
			return nil, fmt.Errorf("root package %s is also excluded", r)
		}
		if _, ok := u.newest[r]; !ok {
			return nil, fmt.Errorf("root package %s: no such package for %s in the suites", r, u.arch)
		}
		queue = append(queue, item{r, nil})
	}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		if _, done := chosen[it.name]; done {
			continue
		}
		p := u.newest[it.name]
		chosen[it.name] = p
		via := append(append([]string(nil), it.via...), it.name)
		for _, dep := range append(ParseRelations(p.PreDepends), ParseRelations(p.Depends)...) {
			name, ok, err := u.pick(dep, ex)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", strings.Join(via, " → "), err)
			}
			if ok {
				queue = append(queue, item{name, via})
			}
		}
	}
	out := make([]Package, 0, len(chosen))
	for _, p := range chosen {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// pick chooses the package satisfying one dependency; ok is false when
// every alternative is excluded.
func (u *Universe) pick(alts []Relation, ex map[string]bool) (string, bool, error) {
	excluded := 0
	for _, a := range alts {
		if ex[a.Name] {
			excluded++
			continue
		}
		if _, ok := u.newest[a.Name]; ok {
			return a.Name, true, nil
		}
		for _, prov := range u.provides[a.Name] {
			if !ex[prov] {
				return prov, true, nil
			}
		}
		if len(u.provides[a.Name]) > 0 {
			excluded++
		}
	}
	if excluded == len(alts) {
		return "", false, nil
	}
	names := make([]string, len(alts))
	for i, a := range alts {
		names[i] = a.Name
	}
	return "", false, fmt.Errorf("nothing satisfies %q", strings.Join(names, " | "))
}
