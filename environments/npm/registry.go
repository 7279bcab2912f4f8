package npm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Registry is an npm registry (registry.npmjs.org, or a mirror that keeps
// its URL layout: packuments at <URL><name>, tarballs at
// <URL><name>/-/<name without scope>-<version>.tgz). It only reads.
type Registry struct {
	// URL is the registry's base URL, ending in "/".
	URL string
	// Token, when not empty, is sent as a bearer token (a private
	// registry's); never logged or written.
	Token string
	// Client makes the requests (its transport: proxies from the
	// environment, the system's CA store). Nil: http.DefaultClient.
	Client *http.Client
}

// Bounds on what a registry may send (variables for tests).
var (
	// maxPackumentBytes bounds one package's metadata (the abbreviated
	// document; the largest common packages are a few MiB).
	maxPackumentBytes int64 = 32 << 20
	// maxTarballBytes bounds one package's tarball as downloaded.
	maxTarballBytes int64 = 64 << 20
)

// ErrNotFound: the registry has no such package.
var ErrNotFound = errors.New("no such package on the registry")

// packument is the abbreviated metadata of a package
// (application/vnd.npm.install-v1+json). Versions are decoded one at a
// time, when a range picks them: an old version with broken metadata does
// not break the others.
type packument struct {
	Name     string                     `json:"name"`
	DistTags map[string]string          `json:"dist-tags"`
	Versions map[string]json.RawMessage `json:"versions"`
}

// manifest is one version of a package, as the resolver reads it.
type manifest struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Dependencies         map[string]string `json:"dependencies"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	PeerDependencies     map[string]string `json:"peerDependencies"`
	PeerDependenciesMeta map[string]struct {
		Optional bool `json:"optional"`
	} `json:"peerDependenciesMeta"`
	OS         stringList      `json:"os"`
	CPU        stringList      `json:"cpu"`
	Deprecated json.RawMessage `json:"deprecated"`
	Dist       struct {
		Integrity string `json:"integrity"`
	} `json:"dist"`
}

// stringList is a JSON array of strings, or one string (old metadata).
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

func (r *Registry) client() *http.Client {
	if r.Client != nil {
		return r.Client
	}
	return http.DefaultClient
}

// Redacted is the registry's URL without credentials (for locks, logs and
// the policy).
func (r *Registry) Redacted() string {
	u, err := url.Parse(r.URL)
	if err != nil {
		return "(an unparsable registry URL)"
	}
	u.User = nil
	return u.String()
}

// escapeName is a package name as a registry path: a scope's "/" encoded.
func escapeName(name string) string {
	return strings.Replace(name, "/", "%2f", 1)
}

// TarballPath is where a registry keeps a version's tarball, relative to
// its URL: <name>/-/<name without scope>-<version>.tgz.
func TarballPath(name, version string) string {
	base := name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		base = name[i+1:]
	}
	return name + "/-/" + base + "-" + version + ".tgz"
}

// get fetches path below the registry's URL, reading at most max bytes.
func (r *Registry) get(ctx context.Context, path, accept string, max int64, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+path, nil)
	if err != nil {
		return fmt.Errorf("registry %s: %w", r.Redacted(), err)
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", "execgate")
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	resp, err := r.client().Do(req)
	if err != nil {
		// The URL in a *url.Error may carry the registry's credentials.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("fetching %s%s: %w", r.Redacted(), path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("fetching %s%s: HTTP %d", r.Redacted(), path, resp.StatusCode)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, max+1))
	if err != nil {
		return fmt.Errorf("fetching %s%s: %w", r.Redacted(), path, err)
	}
	if n > max {
		return fmt.Errorf("fetching %s%s: more than %s", r.Redacted(), path, sizeText(max))
	}
	return nil
}

// packument fetches name's abbreviated metadata, and its size.
func (r *Registry) packument(ctx context.Context, name string) (*packument, int64, error) {
	var b bytes.Buffer
	err := r.get(ctx, escapeName(name), "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8", maxPackumentBytes, &b)
	if errors.Is(err, ErrNotFound) {
		return nil, 0, fmt.Errorf("package %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, 0, err
	}
	var p packument
	if err := json.Unmarshal(b.Bytes(), &p); err != nil {
		return nil, 0, fmt.Errorf("package %s: the registry's metadata is not readable: %w", name, err)
	}
	if p.Name != name {
		return nil, 0, fmt.Errorf("package %s: the registry answered with the metadata of %q", name, clip(p.Name, 80))
	}
	return &p, int64(b.Len()), nil
}

// tarball writes name@version's tarball to w.
func (r *Registry) tarball(ctx context.Context, name, version string, w io.Writer) error {
	err := r.get(ctx, TarballPath(name, version), "application/octet-stream", maxTarballBytes, w)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s@%s: the registry has no tarball at %s: %w", name, version, TarballPath(name, version), ErrNotFound)
	}
	return err
}

// sizeText is n bytes in MiB when it is a whole number of them.
func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
