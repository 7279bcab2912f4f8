package debian

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Package is one binary package of a Packages index.
type Package struct {
	Name         string
	Version      string
	Architecture string
	// Depends and PreDepends are the raw relationship fields.
	Depends    string
	PreDepends string
	// Provides names the virtual packages it provides.
	Provides []string
	// Filename is the path of the .deb below the archive root
	// (pool/main/…); Size and SHA256 describe it.
	Filename string
	Size     int64
	SHA256   string
	// Suite is the suite whose index listed it (set by the reader's caller).
	Suite string
}

// maxStanzaLine bounds one line of a control file (long Description
// lines and Depends lists fit easily).
const maxStanzaLine = 1 << 20

// ReadPackages reads a Packages index (deb822 stanzas separated by blank
// lines), keeping the fields a resolver needs. A stanza without Package,
// Version, Filename or SHA256 is an error naming it.
func ReadPackages(r io.Reader) ([]Package, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxStanzaLine)
	var (
		out   []Package
		cur   Package
		field string // the field a continuation line belongs to
		n     int    // lines in the current stanza
		line  int
	)
	flush := func() error {
		if n == 0 {
			return nil
		}
		n = 0
		if cur.Name == "" || cur.Version == "" || cur.Filename == "" || cur.SHA256 == "" {
			return fmt.Errorf("stanza ending at line %d: Package, Version, Filename and SHA256 are required (got %q %q)", line, cur.Name, cur.Version)
		}
		out = append(out, cur)
		cur = Package{}
		return nil
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.TrimSpace(text) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			field = ""
			continue
		}
		n++
		if text[0] == ' ' || text[0] == '\t' {
			// A continuation: only multi-line Depends-like fields matter.
			switch field {
			case "Depends":
				cur.Depends += " " + strings.TrimSpace(text)
			case "Pre-Depends":
				cur.PreDepends += " " + strings.TrimSpace(text)
			}
			continue
		}
		k, v, ok := strings.Cut(text, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not a field", line, clip(text, 80))
		}
		field, v = k, strings.TrimSpace(v)
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Architecture":
			cur.Architecture = v
		case "Depends":
			cur.Depends = v
		case "Pre-Depends":
			cur.PreDepends = v
		case "Provides":
			for _, p := range strings.Split(v, ",") {
				if name := relationName(p); name != "" {
					cur.Provides = append(cur.Provides, name)
				}
			}
		case "Filename":
			cur.Filename = v
		case "Size":
			s, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: Size %q: %w", line, v, err)
			}
			cur.Size = s
		case "SHA256":
			cur.SHA256 = strings.ToLower(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the index at line %d: %w", line, err)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// Relation is one alternative of a dependency: a package name (an
// architecture qualifier such as ":any" removed). Version constraints are
// not kept: the resolver takes the newest version a suite offers.
type Relation struct {
	Name string
}

// ParseRelations splits a Depends-like field into its dependencies, each
// a list of alternatives ("a | b").
func ParseRelations(field string) [][]Relation {
	var out [][]Relation
	for _, dep := range strings.Split(field, ",") {
		var alts []Relation
		for _, alt := range strings.Split(dep, "|") {
			if name := relationName(alt); name != "" {
				alts = append(alts, Relation{Name: name})
			}
		}
		if len(alts) > 0 {
			out = append(out, alts)
		}
	}
	return out
}

// relationName is the package name of one relation ("libc6 (>= 2.34)",
// "python3:any", "foo [amd64]").
func relationName(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, " ([<"); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
