package npm

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// version is a semantic version (semver 2.0.0) as npm's registry holds
// them: major.minor.patch, optional prerelease identifiers; build metadata
// is kept in the text but never compared.
type version struct {
	major, minor, patch uint64
	pre                 []string // prerelease identifiers; nil for a release
	text                string   // as published, "v" and "=" removed
}

// maxVersionLen bounds a version or range string read from a registry or
// a request.
const maxVersionLen = 256

var versionRE = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$`)

// parseVersion reads a strict semantic version ("1.2.3", "1.2.3-rc.1+b",
// an optional leading "v").
func parseVersion(s string) (version, bool) {
	if len(s) > maxVersionLen {
		return version{}, false
	}
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, false
	}
	var v version
	var err error
	for i, p := range []*uint64{&v.major, &v.minor, &v.patch} {
		if *p, err = strconv.ParseUint(m[i+1], 10, 64); err != nil {
			return version{}, false
		}
	}
	if m[4] != "" {
		v.pre = strings.Split(m[4], ".")
	}
	v.text = strings.TrimPrefix(s, "v")
	return v, true
}

func (v version) String() string { return v.text }

// compareVersions orders versions by semver precedence (build metadata
// ignored).
func compareVersions(a, b version) int {
	if c := cmp.Or(cmp.Compare(a.major, b.major), cmp.Compare(a.minor, b.minor), cmp.Compare(a.patch, b.patch)); c != 0 {
		return c
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		if c := compareIdent(a.pre[i], b.pre[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a.pre), len(b.pre))
}

// compareIdent orders two prerelease identifiers: numeric ones
// numerically and below alphanumeric ones, those in ASCII order.
func compareIdent(a, b string) int {
	an, aerr := strconv.ParseUint(a, 10, 64)
	bn, berr := strconv.ParseUint(b, 10, 64)
	switch {
	case aerr == nil && berr == nil:
		return cmp.Compare(an, bn)
	case aerr == nil:
		return -1
	case berr == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// comparator is one primitive condition of a range: op is "<", "<=", ">",
// ">=" or "="; any matches every version (the empty comparator).
type comparator struct {
	op  string
	v   version
	any bool
}

func (c comparator) test(v version) bool {
	if c.any {
		return true
	}
	d := compareVersions(v, c.v)
	switch c.op {
	case "<":
		return d < 0
	case "<=":
		return d <= 0
	case ">":
		return d > 0
	case ">=":
		return d >= 0
	}
	return d == 0
}

// versionRange is a range of npm's grammar (node-semver, not loose): sets
// joined by "||", each a list of comparators that must all hold.
type versionRange [][]comparator

// partial is a version in a range, where any part may be missing or a
// wildcard ("1", "1.2", "1.x", "*").
type partial struct {
	major, minor, patch uint64
	// n is how many parts are given as numbers (0 to 3).
	n   int
	pre []string
}

var partialRE = regexp.MustCompile(`^v?(?:(0|[1-9][0-9]*|[xX*])(?:\.(0|[1-9][0-9]*|[xX*])(?:\.(0|[1-9][0-9]*|[xX*])(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?)?$`)

func parsePartial(s string) (partial, error) {
	m := partialRE.FindStringSubmatch(s)
	if m == nil {
		return partial{}, fmt.Errorf("%q is not a version", s)
	}
	var p partial
	for i, dst := range []*uint64{&p.major, &p.minor, &p.patch} {
		part := m[i+1]
		if part == "" || part == "x" || part == "X" || part == "*" {
			break
		}
		n, err := strconv.ParseUint(part, 10, 64)
		if err != nil {
			return partial{}, fmt.Errorf("%q is not a version", s)
		}
		*dst = n
		p.n++
	}
	if m[4] != "" {
		if p.n < 3 {
			return partial{}, fmt.Errorf("%q has a prerelease without a patch version", s)
		}
		p.pre = strings.Split(m[4], ".")
	}
	return p, nil
}

// at builds the version major.minor.patch with pre.
func at(major, minor, patch uint64, pre ...string) version {
	v := version{major: major, minor: minor, patch: patch, pre: pre}
	v.text = fmt.Sprintf("%d.%d.%d", major, minor, patch)
	if len(pre) > 0 {
		v.text += "-" + strings.Join(pre, ".")
	}
	return v
}

func (p partial) version() version { return at(p.major, p.minor, p.patch, p.pre...) }

// upper is the first version past what p's given parts cover ("1" → 2.0.0-0,
// "1.2" → 1.3.0-0): "-0" is the lowest prerelease, so no prerelease of the
// next version is included.
func (p partial) upper() version {
	if p.n == 1 {
		return at(p.major+1, 0, 0, "0")
	}
	return at(p.major, p.minor+1, 0, "0")
}

var (
	orSplitRE   = regexp.MustCompile(`\s*\|\|\s*`)
	hyphenRE    = regexp.MustCompile(`^\s*(\S+)\s+-\s+(\S+)\s*$`)
	opSpaceRE   = regexp.MustCompile(`(<=|>=|<|>|=|~>|~|\^)\s+`)
	comparatorR = regexp.MustCompile(`^(<=|>=|<|>|=|~>|~|\^)?(.*)$`)
)

// maxRangeComparators bounds the comparators of one range.
const maxRangeComparators = 64

// parseRange reads an npm version range: "^1.2.3", "~1.2", ">=1 <2",
// "1.x || >=2.5.0", "1.2.3 - 2.3.4", "*", "" (any), a bare version.
func parseRange(s string) (versionRange, error) {
	if len(s) > maxVersionLen {
		return nil, fmt.Errorf("the range is longer than %d characters", maxVersionLen)
	}
	var r versionRange
	n := 0
	for _, set := range orSplitRE.Split(strings.TrimSpace(s), -1) {
		cs, err := parseSet(set)
		if err != nil {
			return nil, err
		}
		if n += len(cs); n > maxRangeComparators {
			return nil, fmt.Errorf("the range has more than %d comparators", maxRangeComparators)
		}
		r = append(r, cs)
	}
	return r, nil
}

func parseSet(set string) ([]comparator, error) {
	set = strings.TrimSpace(set)
	if m := hyphenRE.FindStringSubmatch(set); m != nil {
		return hyphen(m[1], m[2])
	}
	set = opSpaceRE.ReplaceAllString(set, "$1")
	var out []comparator
	for _, f := range strings.Fields(set) {
		cs, err := parseComparator(f)
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	if len(out) == 0 {
		out = []comparator{{any: true}}
	}
	return out, nil
}

func hyphen(from, to string) ([]comparator, error) {
	a, err := parsePartial(from)
	if err != nil {
		return nil, err
	}
	b, err := parsePartial(to)
	if err != nil {
		return nil, err
	}
	var out []comparator
	if a.n > 0 {
		out = append(out, comparator{op: ">=", v: a.version()})
	}
	switch b.n {
	case 0:
	case 3:
		out = append(out, comparator{op: "<=", v: b.version()})
	default:
		out = append(out, comparator{op: "<", v: b.upper()})
	}
	if len(out) == 0 {
		out = []comparator{{any: true}}
	}
	return out, nil
}

func parseComparator(f string) ([]comparator, error) {
	m := comparatorR.FindStringSubmatch(f)
	op, p0 := m[1], m[2]
	if p0 == "" {
		return nil, fmt.Errorf("%q is not a comparator", f)
	}
	p, err := parsePartial(p0)
	if err != nil {
		return nil, err
	}
	switch op {
	case "^":
		return caret(p), nil
	case "~", "~>":
		return tilde(p), nil
	}
	if p.n == 3 {
		if op == "" {
			op = "="
		}
		return []comparator{{op: op, v: p.version()}}, nil
	}
	// An x-range.
	switch op {
	case "", "=":
		if p.n == 0 {
			return []comparator{{any: true}}, nil
		}
		return []comparator{{op: ">=", v: p.version()}, {op: "<", v: p.upper()}}, nil
	case ">":
		if p.n == 0 {
			return []comparator{{op: "<", v: at(0, 0, 0, "0")}}, nil // nothing
		}
		next := at(p.major+1, 0, 0)
		if p.n == 2 {
			next = at(p.major, p.minor+1, 0)
		}
		return []comparator{{op: ">=", v: next}}, nil
	case ">=":
		return []comparator{{op: ">=", v: p.version()}}, nil
	case "<":
		if p.n == 0 {
			return []comparator{{op: "<", v: at(0, 0, 0, "0")}}, nil
		}
		return []comparator{{op: "<", v: at(p.major, p.minor, 0, "0")}}, nil
	case "<=":
		if p.n == 0 {
			return []comparator{{any: true}}, nil
		}
		return []comparator{{op: "<", v: p.upper()}}, nil
	}
	return nil, fmt.Errorf("%q is not a comparator", f)
}

func caret(p partial) []comparator {
	lo := comparator{op: ">=", v: p.version()}
	switch {
	case p.n == 0:
		return []comparator{{any: true}}
	case p.n == 1:
		return []comparator{lo, {op: "<", v: at(p.major+1, 0, 0, "0")}}
	case p.n == 2 && p.major == 0:
		return []comparator{lo, {op: "<", v: at(0, p.minor+1, 0, "0")}}
	case p.n == 2:
		return []comparator{lo, {op: "<", v: at(p.major+1, 0, 0, "0")}}
	case p.major == 0 && p.minor == 0:
		return []comparator{lo, {op: "<", v: at(0, 0, p.patch+1, "0")}}
	case p.major == 0:
		return []comparator{lo, {op: "<", v: at(0, p.minor+1, 0, "0")}}
	}
	return []comparator{lo, {op: "<", v: at(p.major+1, 0, 0, "0")}}
}

func tilde(p partial) []comparator {
	switch p.n {
	case 0:
		return []comparator{{any: true}}
	case 1:
		return []comparator{{op: ">=", v: p.version()}, {op: "<", v: at(p.major+1, 0, 0, "0")}}
	}
	return []comparator{{op: ">=", v: p.version()}, {op: "<", v: at(p.major, p.minor+1, 0, "0")}}
}

// satisfiedBy reports whether v is in the range. A prerelease version is
// in a set only when a comparator of the set names a prerelease of the
// same major.minor.patch (npm's rule: ranges opt in to prereleases one
// version at a time).
func (r versionRange) satisfiedBy(v version) bool {
	for _, set := range r {
		if setSatisfied(set, v) {
			return true
		}
	}
	return false
}

func setSatisfied(set []comparator, v version) bool {
	for _, c := range set {
		if !c.test(v) {
			return false
		}
	}
	if len(v.pre) == 0 {
		return true
	}
	for _, c := range set {
		if c.any || len(c.v.pre) == 0 {
			continue
		}
		if c.v.major == v.major && c.v.minor == v.minor && c.v.patch == v.patch {
			return true
		}
	}
	return false
}
