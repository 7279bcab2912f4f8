package environments

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/sandbox"
)

// LockedPackage is one distribution of an environment.
type LockedPackage struct {
	Name    string `json:"name"`    // PEP 503 normal form
	Version string `json:"version"` // exact
	// Index is the index or find-links location it came from (credentials
	// removed); "" when the lock does not say.
	Index string `json:"index,omitempty"`
	// Via is the chain from a requested package to this one, this one last
	// (["requests", "urllib3"]); a requested package's chain is itself.
	Via    []string `json:"via"`
	hashes []string
}

// Environment is a locked package set: Python distributions for this
// rootfs's Python and platform, or npm packages for JavaScript and
// TypeScript (Ecosystem).
type Environment struct {
	ID       string          `json:"environment_id"`
	Lock     string          `json:"lock"`
	Packages []LockedPackage `json:"packages"`
	// Ecosystem is EcosystemPython or EcosystemNPM: the runs that may bind
	// the environment (their language's).
	Ecosystem string `json:"ecosystem"`
	// npm is the lock of an npm environment.
	npm []npm.Package
}

// Ecosystems of an Environment.
const (
	EcosystemPython = "pypi"
	EcosystemNPM    = "npm"
)

// EcosystemOf is the ecosystem of a run's language: npm for javascript and
// typescript, pypi otherwise.
func EcosystemOf(language string) string {
	switch language {
	case sandbox.LanguageJavaScript, sandbox.LanguageTypeScript:
		return EcosystemNPM
	}
	return EcosystemPython
}

const (
	// envKeyVersion changes whenever the environment recipe changes.
	envKeyVersion = "execgate-env-v1"
	// maxLockBytes bounds a lock given by a caller.
	maxLockBytes = 256 << 10
	// maxLockPackages bounds the packages of one environment.
	maxLockPackages = 512
	// requirementsIn is the file name uv sees for the requested list; its
	// "# via -r requirements.in" marks a requested package.
	requirementsIn = "requirements.in"
)

// ErrInvalidLock is wrapped by every complaint about a caller's lock.
var ErrInvalidLock = errors.New("invalid requirements_lock")

// envIDRE is an environment id.
var envIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// platformRE is a uv platform ("x86_64-manylinux_2_28").
var platformRE = regexp.MustCompile(`^[a-z0-9_]+-[a-z0-9_.-]+$`)

// pythonVersionRE is a Python version as a rootfs manifest records it.
var pythonVersionRE = regexp.MustCompile(`^3\.[0-9]{1,3}(\.[0-9]{1,3})?$`)

// ValidID reports whether id has the form of an environment id.
func ValidID(id string) bool { return envIDRE.MatchString(id) }

// specRE is one requirement: a name, optional extras, optional version
// specifiers; no URL, path, marker or option.
var specRE = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(\[\s*[A-Za-z0-9._,\s-]*\])?\s*((?:===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*(?:,\s*(?:===|==|~=|!=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*)*)?$`)

// NormalizeSpecs checks requirement strings (PEP 508 without URLs, paths,
// markers or options) and returns them trimmed, names in normal form,
// sorted. The error names the first bad entry.
func NormalizeSpecs(reqs []string) ([]string, error) {
	if len(reqs) > maxRequirements {
		return nil, fmt.Errorf("requirements: %d entries, at most %d are allowed", len(reqs), maxRequirements)
	}
	out := make([]string, 0, len(reqs))
	for i, raw := range reqs {
		r := strings.TrimSpace(raw)
		bad := func(why string) error {
			return fmt.Errorf("requirements[%d]: %q %s; want a requirement like requests>=2.31 or six==1.16.0", i, raw, why)
		}
		if why := requirementRefusal(r); why != "" {
			return nil, bad(why)
		}
		m := specRE.FindStringSubmatch(r)
		if m == nil {
			return nil, bad("is not a valid requirement")
		}
		out = append(out, normalizeName(m[1])+strings.ReplaceAll(m[2]+m[3], " ", ""))
	}
	sort.Strings(out)
	return out, nil
}

// lockLineRE is one requirement line of a lock: name, optional extras, ==
// version, then options (only --hash is accepted).
var lockLineRE = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?:\[[A-Za-z0-9._,\s-]*\])?\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*(.*)$`)

var hashRE = regexp.MustCompile(`^--hash[= ](sha256|sha384|sha512):([0-9a-f]{64,128})$`)

// ParseLock reads a lock in pip's hashes format, with uv's optional
// "# via" and "# from" annotations. Every entry must be name==version with
// at least one --hash; no other option, URL or marker is accepted.
func ParseLock(text string) ([]LockedPackage, error) {
	if len(text) > maxLockBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidLock, len(text), maxLockBytes)
	}
	var (
		pkgs    []LockedPackage
		parents = map[string][]string{} // name → what pulled it in ("" = requested)
		annots  = false
		inVia   = false
	)
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		// Join continuations ("\" at the end of a line).
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSpace(strings.TrimSuffix(line, `\`)) + " " + strings.TrimSpace(lines[i])
		}
		line = strings.TrimSpace(strings.TrimSuffix(line, `\`))
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			c := strings.TrimSpace(strings.TrimPrefix(line, "#"))
			if len(pkgs) == 0 {
				continue
			}
			cur := &pkgs[len(pkgs)-1]
			switch {
			case c == "via":
				inVia, annots = true, true
			case strings.HasPrefix(c, "via "):
				inVia, annots = false, true
				parents[cur.Name] = append(parents[cur.Name], viaParent(strings.TrimSpace(strings.TrimPrefix(c, "via "))))
			case strings.HasPrefix(c, "from "):
				inVia = false
				cur.Index = redactURL(strings.TrimSpace(strings.TrimPrefix(c, "from ")))
			case inVia:
				parents[cur.Name] = append(parents[cur.Name], viaParent(c))
			}
			continue
		}
		inVia = false
		if j := strings.Index(line, " #"); j >= 0 {
			line = strings.TrimSpace(line[:j])
		}
		m := lockLineRE.FindStringSubmatch(line)
		if m == nil || strings.Contains(line, ";") || strings.Contains(line, "://") {
			return nil, fmt.Errorf("%w: line %q is not name==version with --hash options", ErrInvalidLock, clip(line, 120))
		}
		p := LockedPackage{Name: normalizeName(m[1]), Version: m[2]}
		for _, opt := range splitOptions(m[3]) {
			h := hashRE.FindStringSubmatch(opt)
			if h == nil {
				return nil, fmt.Errorf("%w: %s: option %q is not allowed (only --hash)", ErrInvalidLock, p.Name, clip(opt, 80))
			}
			p.hashes = append(p.hashes, h[1]+":"+h[2])
		}
		if len(p.hashes) == 0 {
			return nil, fmt.Errorf("%w: %s==%s has no --hash (locks are installed with --require-hashes)", ErrInvalidLock, p.Name, p.Version)
		}
		sort.Strings(p.hashes)
		for _, q := range pkgs {
			if q.Name == p.Name {
				return nil, fmt.Errorf("%w: %s is locked twice", ErrInvalidLock, p.Name)
			}
		}
		pkgs = append(pkgs, p)
		if len(pkgs) > maxLockPackages {
			return nil, fmt.Errorf("%w: more than %d packages", ErrInvalidLock, maxLockPackages)
		}
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("%w: no packages", ErrInvalidLock)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	for i := range pkgs {
		if annots {
			pkgs[i].Via = chainOf(pkgs[i].Name, parents)
		} else {
			pkgs[i].Via = []string{pkgs[i].Name}
		}
	}
	return pkgs, nil
}

// splitOptions splits "--hash=a --hash b" into "--hash=a", "--hash b".
func splitOptions(s string) []string {
	var out []string
	f := strings.Fields(s)
	for i := 0; i < len(f); i++ {
		if f[i] == "--hash" && i+1 < len(f) {
			out = append(out, "--hash "+f[i+1])
			i++
			continue
		}
		out = append(out, f[i])
	}
	return out
}

// viaParent is the package a "# via" entry names; "" for the requested list
// ("-r requirements.in") or a constraint file.
func viaParent(s string) string {
	if strings.HasPrefix(s, "-r ") || strings.HasPrefix(s, "-c ") {
		return ""
	}
	if m := lockLineRE.FindStringSubmatch(s + "==0"); m != nil {
		return normalizeName(m[1])
	}
	return normalizeName(s)
}

// chainOf walks the parents from name up to a requested package, taking
// the first parent at each step (never looping): ["requests", "urllib3"].
func chainOf(name string, parents map[string][]string) []string {
	chain := []string{name}
	seen := map[string]bool{name: true}
	cur := name
	for {
		ps := parents[cur]
		next := ""
		requested := false
		for _, p := range ps {
			if p == "" {
				requested = true
				break
			}
			if next == "" && !seen[p] {
				next = p
			}
		}
		if requested || next == "" {
			break
		}
		chain = append([]string{next}, chain...)
		seen[next] = true
		cur = next
	}
	return chain
}

// redactURL drops credentials from an index URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// RenderLock writes pkgs as a lock in pip's hashes format with uv-style
// annotations; ParseLock(RenderLock(p)) gives p back.
func RenderLock(pkgs []LockedPackage) string {
	var b strings.Builder
	for _, p := range pkgs {
		fmt.Fprintf(&b, "%s==%s", p.Name, p.Version)
		for _, h := range p.hashes {
			fmt.Fprintf(&b, " \\\n    --hash=%s", h)
		}
		b.WriteString("\n")
		if len(p.Via) <= 1 {
			b.WriteString("    # via -r " + requirementsIn + "\n")
		} else {
			b.WriteString("    # via " + p.Via[len(p.Via)-2] + "\n")
		}
		if p.Index != "" {
			b.WriteString("    # from " + p.Index + "\n")
		}
	}
	return b.String()
}

// environmentID names the environment of pkgs for a Python version and
// platform: annotations do not change it, versions and hashes do.
func environmentID(pyVersion, platform string, pkgs []LockedPackage) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\npython=%s\nplatform=%s\n", envKeyVersion, pyVersion, platform)
	for _, p := range pkgs {
		fmt.Fprintf(h, "%s==%s %s\n", p.Name, p.Version, strings.Join(p.hashes, " "))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// resolveKey names a resolution of specs (normalised) against an index.
func resolveKey(pyVersion, platform, index string, specs []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s-resolve\npython=%s\nplatform=%s\nindex=%s\n", envKeyVersion, pyVersion, platform, index)
	for _, s := range specs {
		h.Write([]byte(s + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}
