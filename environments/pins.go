package environments

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

const (
	// maxRequirements bounds the pins of one run.
	maxRequirements = 64
	// maxRequirementLen bounds one pin.
	maxRequirementLen = 200
	// maxInstallerOutput bounds the installer output kept for a
	// DependencyError traceback.
	maxInstallerOutput = 32 << 10
	// depsKeyVersion changes whenever the install recipe changes, so old
	// cache entries are never reused for a different recipe.
	depsKeyVersion = "execgate-deps-v1"
)

// pinRE is one requirement: a PEP 508 name, optional extras, "==", and a
// PEP 440 version without wildcards.
var pinRE = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[\s*([A-Za-z0-9._,\s-]*)\])?\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)$`)

var nameSeparators = regexp.MustCompile(`[-_.]+`)

// normalizeName is the PEP 503 normal form of a distribution or extra name.
func normalizeName(n string) string {
	return nameSeparators.ReplaceAllString(strings.ToLower(n), "-")
}

// requirementRefusal says why a trimmed requirement string is refused before
// its grammar is checked ("" when it is not): what would make uv read a
// file, fetch a URL, take an option or evaluate a marker. One list for the
// exact pins here and the PEP 508 requirements of environments.
func requirementRefusal(r string) string {
	switch {
	case r == "":
		return "is empty"
	case len(r) > maxRequirementLen:
		return fmt.Sprintf("is longer than %d characters", maxRequirementLen)
	case strings.HasPrefix(r, "-"):
		return "is an installer option, which is not allowed"
	case strings.Contains(r, "://") || strings.Contains(r, "@"):
		return "is a URL or direct reference, which is not allowed"
	case strings.ContainsAny(r, `/\`) || strings.HasPrefix(r, "."):
		return "is a path, which is not allowed"
	case strings.Contains(r, ";"):
		return "has an environment marker, which is not allowed"
	}
	return ""
}

// normalizeRequirements checks every entry and returns the pins in normal
// form ("name[extra,...]==version", names per PEP 503, extras sorted),
// sorted by name. The error names the first bad entry and why.
func normalizeRequirements(reqs []string) ([]string, error) {
	if len(reqs) > maxRequirements {
		return nil, fmt.Errorf("requirements: %d entries, at most %d are allowed", len(reqs), maxRequirements)
	}
	out := make([]string, 0, len(reqs))
	seen := map[string]string{}
	for i, raw := range reqs {
		r := strings.TrimSpace(raw)
		bad := func(why string) error {
			return fmt.Errorf("requirements[%d]: %q %s; want an exact pin like six==1.16.0", i, raw, why)
		}
		if why := requirementRefusal(r); why != "" {
			return nil, bad(why)
		}
		m := pinRE.FindStringSubmatch(r)
		if m == nil {
			return nil, bad("is not pinned with ==")
		}
		name := normalizeName(m[1])
		var extras []string
		for _, e := range strings.Split(m[2], ",") {
			if e = strings.TrimSpace(e); e != "" {
				extras = append(extras, normalizeName(e))
			}
		}
		sort.Strings(extras)
		pin := name
		if len(extras) > 0 {
			pin += "[" + strings.Join(extras, ",") + "]"
		}
		pin += "==" + m[3]
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("requirements[%d]: %q names %s again (already %q)", i, raw, name, prev)
		}
		seen[name] = raw
		out = append(out, pin)
	}
	sort.Strings(out)
	return out, nil
}

// depsKey names the cache directory of a normalised set for an
// interpreter version.
func depsKey(pythonVersion string, pins []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\npython=%s\n", depsKeyVersion, pythonVersion)
	for _, p := range pins {
		h.Write([]byte(p))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// installerEnv are the variables of the gateway's environment uv may see:
// how to reach an index (proxies, a private index, its CA), nothing else.
var installerEnv = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_HTTP_TIMEOUT",
}
