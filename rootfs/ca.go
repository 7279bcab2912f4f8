package rootfs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
)

// defaultCABundles are the well-known CA bundle locations, in order
// (Debian/Ubuntu/Alpine, Fedora/RHEL, openSUSE, OpenSSL's own default).
var defaultCABundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// defaultCADir holds OpenSSL's hash-named certificate links on Debian.
const defaultCADir = "/etc/ssl/certs"

// hashedCertName matches OpenSSL's c_rehash names: 8 hex digits, a dot and
// a collision counter.
var hashedCertName = regexp.MustCompile(`^[0-9a-f]{8}\.[0-9]+$`)

// parseCABundle returns the certificate blocks of a PEM bundle (re-encoded,
// so comments and stray text do not travel into the jail) and how many of
// them parse as X.509 certificates.
func parseCABundle(data []byte) (clean []byte, count int) {
	var out bytes.Buffer
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			continue
		}
		count++
		_ = pem.Encode(&out, &pem.Block{Type: block.Type, Bytes: block.Bytes})
	}
	return out.Bytes(), count
}

// caStore is the trust store read from the host.
type caStore struct {
	bundle []byte            // PEM, certificates only
	count  int               // certificates in bundle
	hashed map[string][]byte // c_rehash name → PEM content (dereferenced)
}

// readCAStore reads the bundle (following symlinks) and the hash-named
// entries of dir. An empty or certificate-less bundle is ErrEmptyCAStore.
func readCAStore(bundlePath, dir string) (*caStore, error) {
	data, err := os.ReadFile(bundlePath)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	bundle, n := parseCABundle(data)
	if n == 0 {
		return nil, fmt.Errorf("CA bundle %s holds no parseable certificate (%d bytes): %w", bundlePath, len(data), ErrEmptyCAStore)
	}
	s := &caStore{bundle: bundle, count: n, hashed: map[string][]byte{}}
	if dir == "" {
		return s, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading CA dir: %w", err)
	}
	for _, e := range entries {
		if !hashedCertName.MatchString(e.Name()) {
			continue
		}
		pemData, err := os.ReadFile(filepath.Join(dir, e.Name())) // follows the link
		if err != nil {
			continue // dangling c_rehash link: OpenSSL would skip it too
		}
		clean, n := parseCABundle(pemData)
		if n == 0 {
			continue
		}
		s.hashed[e.Name()] = clean
	}
	return s, nil
}

// names returns the hashed entry names in order.
func (s *caStore) names() []string {
	names := make([]string, 0, len(s.hashed))
	for n := range s.hashed {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
