package debian

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
)

// Release is a suite's verified Release file (from its InRelease).
type Release struct {
	Suite    string
	Codename string
	Version  string
	Date     string
	// Signer names the key that signed it (its first identity).
	Signer string
	// Files maps a path below dists/<suite>/ to its SHA256 and size.
	Files map[string]FileSum
}

// FileSum is a file's SHA256 (lower-case hex) and size as a Release lists it.
type FileSum struct {
	SHA256 string
	Size   int64
}

// ErrSignature is wrapped by every InRelease that does not verify against
// the keyrings.
var ErrSignature = errors.New("InRelease signature does not verify")

// ReadKeyrings reads OpenPGP keyrings (binary, as in
// /usr/share/keyrings/debian-archive-*.gpg, or armored). A missing file is
// an error naming it.
func ReadKeyrings(paths []string) (openpgp.EntityList, error) {
	var all openpgp.EntityList
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading keyring %s (apt-get install debian-archive-keyring): %w", p, err)
		}
		var el openpgp.EntityList
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN")) {
			el, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
		} else {
			el, err = openpgp.ReadKeyRing(bytes.NewReader(data))
		}
		if err != nil {
			return nil, fmt.Errorf("reading keyring %s: %w", p, err)
		}
		all = append(all, el...)
	}
	if len(all) == 0 {
		return nil, errors.New("no keys in the keyrings")
	}
	return all, nil
}

// VerifyInRelease checks the clear-signed InRelease data against keys and
// parses the signed text (and only it: anything outside the signature is
// ignored). wantSuite, when set, must be the file's Suite or Codename.
func VerifyInRelease(data []byte, keys openpgp.EntityList, wantSuite string) (*Release, error) {
	block, _ := clearsign.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: not a clear-signed message", ErrSignature)
	}
	signer, err := block.VerifySignature(keys, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	rel, err := parseRelease(block.Plaintext)
	if err != nil {
		return nil, err
	}
	for name := range signer.Identities {
		rel.Signer = name
		break
	}
	if wantSuite != "" && rel.Suite != wantSuite && rel.Codename != wantSuite {
		// A signed Release of another suite served under this name (a
		// downgrade or mix-up) is refused.
		return nil, fmt.Errorf("InRelease of %s: it is signed for suite %q (codename %q)", wantSuite, rel.Suite, rel.Codename)
	}
	return rel, nil
}

// parseRelease reads the fields of a Release file this package uses.
func parseRelease(text []byte) (*Release, error) {
	rel := &Release{Files: map[string]FileSum{}}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), maxStanzaLine)
	inSHA := false
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if line[0] == ' ' {
			if !inSHA {
				continue
			}
			f := strings.Fields(line)
			if len(f) != 3 {
				return nil, fmt.Errorf("release: SHA256 line %q is not \"sum size path\"", clip(line, 120))
			}
			size, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("release: SHA256 line %q: %w", clip(line, 120), err)
			}
			rel.Files[f[2]] = FileSum{SHA256: strings.ToLower(f[0]), Size: size}
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		inSHA = k == "SHA256"
		switch k {
		case "Suite":
			rel.Suite = v
		case "Codename":
			rel.Codename = v
		case "Version":
			rel.Version = v
		case "Date":
			rel.Date = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if len(rel.Files) == 0 {
		return nil, errors.New("release: no SHA256 file list")
	}
	return rel, nil
}
