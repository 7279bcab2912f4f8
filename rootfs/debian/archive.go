package debian

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Source is one suite of a Debian archive: where it is and which keys sign it.
type Source struct {
	// URL is the archive root (http://deb.debian.org/debian).
	URL string `json:"url"`
	// Suite is the suite or codename (bookworm, bookworm-security).
	Suite string `json:"suite"`
	// Keyrings are the OpenPGP keyrings its InRelease must verify against.
	Keyrings []string `json:"keyrings"`
}

// Index is a suite's verified package index for one architecture.
type Index struct {
	Source   Source
	Release  *Release
	Packages []Package
}

// Client fetches from Debian archives. The zero value uses
// http.DefaultClient's transport (proxies from the environment) with a
// per-request timeout.
type Client struct {
	HTTP *http.Client
	// Log receives one line per download. Nil: silent.
	Log func(format string, args ...any)
}

// Bounds of what one fetch may read.
const (
	maxInRelease = 4 << 20   // an InRelease is ~150 KiB
	maxPackages  = 256 << 20 // an uncompressed Packages index is ~60 MiB
	maxDeb       = 256 << 20 // the largest .deb a runtime uses is a few MiB
	fetchTimeout = 5 * time.Minute
)

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: fetchTimeout}
}

func (c *Client) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

// get reads url, refusing more than max bytes.
func (c *Client) get(ctx context.Context, url string, max int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("fetching %s: larger than %d bytes", url, max)
	}
	return data, nil
}

// FetchIndex fetches the suite's InRelease, verifies its signature against
// the source's keyrings, then fetches main/binary-<arch>/Packages.gz and
// checks it against the SHA256 the signed Release lists. Every package it
// returns is thereby covered by the archive's signature.
func (c *Client) FetchIndex(ctx context.Context, src Source, arch string) (*Index, error) {
	keys, err := ReadKeyrings(src.Keyrings)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(src.URL, "/") + "/dists/" + src.Suite + "/"
	data, err := c.get(ctx, base+"InRelease", maxInRelease)
	if err != nil {
		return nil, err
	}
	rel, err := VerifyInRelease(data, keys, src.Suite)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", base+"InRelease", err)
	}
	c.logf("%s %s: InRelease signed by %s, dated %s", src.URL, src.Suite, rel.Signer, rel.Date)
	text, err := c.fetchPackages(ctx, base, arch, rel)
	if err != nil {
		return nil, err
	}
	pkgs, err := ReadPackages(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("%s main/binary-%s/Packages: %w", base, arch, err)
	}
	for i := range pkgs {
		pkgs[i].Suite = src.Suite
	}
	c.logf("%s %s: %d packages for %s", src.URL, src.Suite, len(pkgs), arch)
	return &Index{Source: src, Release: rel, Packages: pkgs}, nil
}

// fetchPackages fetches main/binary-<arch>/Packages in the first form
// the Release lists (gzip, then xz through the host's xz, then plain),
// checks it against the Release's SHA256 and returns it uncompressed.
func (c *Client) fetchPackages(ctx context.Context, base, arch string, rel *Release) ([]byte, error) {
	name := "main/binary-" + arch + "/Packages"
	for _, ext := range []string{".gz", ".xz", ""} {
		sum, ok := rel.Files[name+ext]
		if !ok {
			continue
		}
		data, err := c.get(ctx, base+name+ext, maxPackages)
		if err != nil {
			if ext == "" {
				return nil, err
			}
			continue // listed but not served: try the next form
		}
		if err := checkSum(data, sum); err != nil {
			return nil, fmt.Errorf("%s: %w", base+name+ext, err)
		}
		switch ext {
		case ".gz":
			zr, err := gzip.NewReader(bytes.NewReader(data))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", base+name+ext, err)
			}
			data, err = io.ReadAll(io.LimitReader(zr, maxPackages))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", base+name+ext, err)
			}
		case ".xz":
			var out, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, "xz", "-dc")
			cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &out, &stderr
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("%s: xz -dc (apt-get install xz-utils): %w: %s", base+name+ext, err, clip(stderr.String(), 200))
			}
			data = out.Bytes()
		}
		return data, nil
	}
	return nil, fmt.Errorf("%s: the Release lists no %s(.gz|.xz)", base, name)
}

// ErrChecksum is wrapped by every file whose SHA256 or size is not the
// expected one.
var ErrChecksum = errors.New("checksum mismatch")

func checkSum(data []byte, want FileSum) error {
	if int64(len(data)) != want.Size {
		return fmt.Errorf("%w: %d bytes, want %d (sha256 %s)", ErrChecksum, len(data), want.Size, want.SHA256)
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != want.SHA256 {
		return fmt.Errorf("%w: sha256 %x, want %s", ErrChecksum, got, want.SHA256)
	}
	return nil
}

// Cache holds downloaded .debs by content: <Dir>/<sha256>.deb. A file
// there has been checked against its sha256 when it was stored; Fetch
// checks it again before handing it out, so a damaged cache is noticed.
type Cache struct {
	Dir string
}

// Path is where the .deb with this sha256 lives in the cache.
func (c Cache) Path(sha string) string { return filepath.Join(c.Dir, sha+".deb") }

// Fetch returns the path of the .deb with the given sha256 and size,
// downloading it from the first of urls that serves it when the cache has
// none. A download or cached file with another sha256 or size is refused
// with ErrChecksum (a cached one is removed).
func (c *Client) Fetch(ctx context.Context, cache Cache, name, sha string, size int64, urls []string) (string, error) {
	want := FileSum{SHA256: strings.ToLower(sha), Size: size}
	if len(want.SHA256) != 64 {
		return "", fmt.Errorf("%s: sha256 %q is not 64 hex digits", name, clip(sha, 80))
	}
	p := cache.Path(want.SHA256)
	if data, err := os.ReadFile(p); err == nil {
		if err := checkSum(data, want); err == nil {
			return p, nil
		}
		os.Remove(p)
	}
	if err := os.MkdirAll(cache.Dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the .deb cache: %w", err)
	}
	var errs []error
	for _, u := range urls {
		data, err := c.get(ctx, u, maxDeb)
		if err == nil {
			if err = checkSum(data, want); err != nil {
				err = fmt.Errorf("%s from %s: %w", name, u, err)
			}
		}
		if err != nil {
			errs = append(errs, err)
			if errors.Is(err, ErrChecksum) || ctx.Err() != nil {
				break // a wrong file is not retried elsewhere
			}
			continue
		}
		c.logf("fetched %s (%d KiB) from %s", name, len(data)>>10, u)
		if err := writeAtomic(p, data); err != nil {
			return "", err
		}
		return p, nil
	}
	return "", errors.Join(errs...)
}

// Verify checks that the file at p has the given sha256 and size (a .deb
// handed to the builder from outside the cache).
func Verify(p, sha string, size int64) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return checkSum(data, FileSum{SHA256: strings.ToLower(sha), Size: size})
}

func writeAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-")
	if err != nil {
		return fmt.Errorf("caching %s: %w", p, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("caching %s: %w", p, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}
