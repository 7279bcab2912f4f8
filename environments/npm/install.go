package npm

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Layout of an installed environment (the directory bound read-only at
// jaillayout.DepsDir), as the jail's Deno reads it:
//
//	import_map.json                                  the import map Deno runs with
//	deno/npm/registry.npmjs.org/<name>/registry.json the locked versions' metadata
//	deno/npm/registry.npmjs.org/<name>/<version>/    a package's files
//
// deno/ is a Deno cache directory (DENO_DIR) holding npm packages the way
// Deno keeps those it downloads (its global cache, without node_modules),
// so Deno resolves npm: specifiers from it with --cached-only and never
// reaches a registry. registry.json lists only the locked versions, so
// Deno can resolve no other.
const (
	ImportMapFile = "import_map.json"
	DenoDirName   = "deno"
	// cacheRegistryDir is the registry's directory in Deno's cache: the
	// default registry's host, which Deno reads when NPM_CONFIG_REGISTRY
	// is unset (as in the jail), whatever registry the files came from.
	cacheRegistryDir = "npm/registry.npmjs.org"
	// cacheTarballURL is the tarball URL written into registry.json:
	// Deno never fetches it (--cached-only).
	cacheTarballURL = "https://registry.npmjs.org/"
)

// Limits bound an install.
type Limits struct {
	// MaxBytes bounds the environment's extracted files in all; 0: no cap.
	MaxBytes int64
	// MaxFiles bounds its files and directories in all; 0: DefaultMaxFiles.
	MaxFiles int
}

// DefaultMaxFiles is Limits.MaxFiles when it is 0.
const DefaultMaxFiles = 100_000

// Bounds on a tarball's entries.
const (
	maxEntryPath      = 1024
	maxEntryDepth     = 64
	maxPackageJSON    = 1 << 20
	maxInstallWorkers = 4
)

// InstallOptions are what Install needs besides the packages.
type InstallOptions struct {
	// BaseImportMap is the harness's import map (its "imports" block every
	// specifier a tool may not use); the environment's adds its packages.
	BaseImportMap []byte
	// DenoDir is the jail's path of the environment's Deno cache
	// (jaillayout.DepsDenoDir): its npm files are mapped to themselves so
	// the packages' own modules load.
	DenoDir string
	// TarballCache, when not empty, is a directory of verified tarballs
	// named by name@version and digest (cacheKey), reused across installs.
	TarballCache string
	Limits       Limits
}

// Install downloads each package's tarball from reg (or the tarball
// cache), checks it against the lock's integrity, extracts it into dir
// (which must exist and be empty) with the layout above, and writes the
// registry.json files and the import map. Nothing of a package runs: no
// install scripts, no bin links; links in a tarball are skipped, and
// entries that would land outside their package (absolute paths, "..")
// refuse the package. dir is left partly written on error: the caller
// removes it.
func Install(ctx context.Context, reg *Registry, pkgs []Package, dir string, opts InstallOptions) error {
	b := newBudget(opts.Limits)
	root := filepath.Join(dir, DenoDirName, filepath.FromSlash(cacheRegistryDir))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxInstallWorkers)
	for _, p := range pkgs {
		g.Go(func() error {
			tgz, err := fetchVerified(gctx, reg, p, opts.TarballCache, dir, b)
			if err != nil {
				return err
			}
			defer tgz.Close()
			if err := extract(tgz, filepath.Join(root, filepath.FromSlash(p.Name), p.Version), b); err != nil {
				return fmt.Errorf("%s: %w", p.Key(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := writeRegistryFiles(root, pkgs); err != nil {
		return err
	}
	imap, err := ImportMap(opts.BaseImportMap, opts.DenoDir, pkgs)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ImportMapFile), imap, 0o644)
}

// fetchVerified returns p's tarball, open at its start, checked against
// its integrity and taken from b's tarball bytes: from the cache when
// there, else downloaded (into the cache, or a temporary file in tmpDir
// that is gone once the file is closed). The bytes checked are the bytes
// extracted, through the one open file: the cache may drop the file (its
// cap, Cache.trimDownloads) or another install may write it meanwhile
// without either mattering.
func fetchVerified(ctx context.Context, reg *Registry, p Package, cache, tmpDir string, b *budget) (*os.File, error) {
	want, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(p.Integrity, "sha512-"))
	if err != nil || len(want) != sha512.Size {
		return nil, fmt.Errorf("%s: integrity %q is not sha512", p.Key(), clip(p.Integrity, 40))
	}
	// A cached tarball is named by the package and version as well as
	// its digest: it was downloaded for exactly that name@version and
	// verified, so a lock pairing another name with its digest never finds
	// it (and cannot have a denied package's bytes installed under an
	// allowed name).
	cacheName := cacheKey(p) + ".tgz"
	if cache != "" {
		cached := filepath.Join(cache, cacheName)
		if f, size, ok := openWithSum(cached, want); ok {
			if err := b.takeTarball(size); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", p.Key(), err)
			}
			now := time.Now() // used now: the cache's cap drops the least recently used first
			_ = os.Chtimes(cached, now, now)
			return f, nil
		}
	}
	dst := tmpDir
	if cache != "" {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return nil, err
		}
		dst = cache
	}
	f, err := os.CreateTemp(dst, ".tgz-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("%s: %w", p.Key(), err)
	}
	h := sha512.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	if err := reg.tarball(ctx, p.Name, p.Version, cw); err != nil {
		return fail(err)
	}
	if err := b.takeTarball(cw.n); err != nil {
		return fail(err)
	}
	if got := h.Sum(nil); string(got) != string(want) {
		return fail(fmt.Errorf("the tarball's SHA-512 is sha512-%s, not the locked %s: refused", base64.StdEncoding.EncodeToString(got), p.Integrity))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	// Kept in the cache under its name, or unlinked at once (the open file
	// stays readable until closed).
	if cache == "" {
		err = os.Remove(f.Name())
	} else {
		err = os.Rename(f.Name(), filepath.Join(cache, cacheName))
	}
	if err != nil {
		return fail(err)
	}
	return f, nil
}

// cacheKey names p's tarball in the tarball cache: the SHA-256 of its
// name@version and integrity.
func cacheKey(p Package) string {
	sum := sha256.Sum256([]byte(p.Key() + " " + p.Integrity))
	return hex.EncodeToString(sum[:])
}

// openWithSum opens the file at p and reports whether its content has
// SHA-512 sum, and its size; when it has, the file is returned open at its
// start (else closed).
func openWithSum(p string, sum []byte) (*os.File, int64, bool) {
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, false
	}
	h := sha512.New()
	n, err := io.Copy(h, f)
	if err == nil && string(h.Sum(nil)) == string(sum) {
		if _, err = f.Seek(0, io.SeekStart); err == nil {
			return f, n, true
		}
	}
	f.Close()
	return nil, 0, false
}

// countingWriter counts what it passes on.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// budget is what is left of an environment's bytes and files, and of the
// bytes of its tarballs; shared by the downloads and extractions of one
// install. The tarballs get a cap of their own, MaxBytes as well: what a
// tarball holds past its end (or in entries that are not extracted) is
// downloaded and kept in the tarball cache without being extracted.
type budget struct {
	mu       sync.Mutex // guards bytes, files and tarballs
	capBytes bool       // false: bytes and tarballs are not counted
	bytes    int64
	files    int64
	tarballs int64
}

func newBudget(l Limits) *budget {
	b := &budget{capBytes: l.MaxBytes > 0, bytes: l.MaxBytes, files: int64(l.MaxFiles), tarballs: l.MaxBytes}
	if b.files <= 0 {
		b.files = DefaultMaxFiles
	}
	return b
}

func (b *budget) take(bytes, files int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.capBytes && bytes > b.bytes {
		return errTooLarge
	}
	if files > b.files {
		return errTooManyFiles
	}
	b.bytes -= bytes
	b.files -= files
	return nil
}

// takeTarball takes a tarball's size from what the tarballs may come to.
func (b *budget) takeTarball(size int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.capBytes && size > b.tarballs {
		return errTarballsTooLarge
	}
	b.tarballs -= size
	return nil
}

var (
	errTarballsTooLarge = errors.New("the packages' tarballs come to more than the size cap (sandbox.deps_max_mb)")
	errTooLarge         = errors.New("the environment's files are over the size cap (sandbox.deps_max_mb)")
	errTooManyFiles     = errors.New("the environment has too many files")
)

// extract extracts the gzipped tarball r into dst (created), dropping each
// entry's first path component ("package/" in npm's tarballs).
func extract(r io.Reader, dst string, b *budget) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("the tarball is not gzip: %w", err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the tarball: %w", err)
		}
		rel, err := entryPath(h.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := b.take(0, 1); err != nil {
				return err
			}
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg: // the reader turns old tarballs' TypeRegA into TypeReg
			if h.Size < 0 {
				return fmt.Errorf("entry %q has a negative size", clip(h.Name, 120))
			}
			if err := b.take(h.Size, 1); err != nil {
				return err
			}
			if err := writeEntry(target, tr, h); err != nil {
				return err
			}
		default:
			// Links (symbolic or hard), devices and fifos are not
			// installed: nothing in a package may point outside it.
		}
	}
}

// entryPath is a tarball entry's path below its package (the first
// component dropped), or an error for one that would leave it.
func entryPath(name string) (string, error) {
	bad := func(why string) error { return fmt.Errorf("entry %q %s: refused", clip(name, 120), why) }
	if len(name) > maxEntryPath {
		return "", bad(fmt.Sprintf("is longer than %d bytes", maxEntryPath))
	}
	if strings.ContainsAny(name, "\x00\\") {
		return "", bad("holds a NUL or a backslash")
	}
	if strings.HasPrefix(name, "/") {
		return "", bad("is absolute")
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", bad(`has a ".." component`)
		}
	}
	i := strings.IndexByte(name, '/')
	if i < 0 {
		return "", nil // the top directory itself
	}
	rel := path.Clean(name[i+1:])
	if rel == "." || rel == "" {
		return "", nil
	}
	if !filepath.IsLocal(rel) {
		return "", bad("leaves its package")
	}
	if strings.Count(rel, "/") >= maxEntryDepth {
		return "", bad(fmt.Sprintf("is nested deeper than %d directories", maxEntryDepth))
	}
	return rel, nil
}

// writeEntry writes a regular file: 0644, or 0755 when the tarball marks
// it executable; never through a link (none are extracted).
func writeEntry(target string, r io.Reader, h *tar.Header) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if h.Mode&0o111 != 0 {
		mode = 0o755
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, h.Size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// versionInfo is one version in a registry.json file: what Deno's npm
// resolver reads (dependencies and their kinds, platforms, the tarball's
// integrity), taken from the package's own package.json.
type versionInfo struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Dependencies         map[string]string `json:"dependencies,omitempty"`
	OptionalDependencies map[string]string `json:"optionalDependencies,omitempty"`
	PeerDependencies     map[string]string `json:"peerDependencies,omitempty"`
	PeerDependenciesMeta map[string]struct {
		Optional bool `json:"optional"`
	} `json:"peerDependenciesMeta,omitempty"`
	OS   stringList `json:"os,omitempty"`
	CPU  stringList `json:"cpu,omitempty"`
	Dist struct {
		Tarball   string `json:"tarball"`
		Integrity string `json:"integrity"`
	} `json:"dist"`
}

// writeRegistryFiles writes each package name's registry.json below root
// (one directory per name), listing its locked versions. An optional
// dependency (or optional peer) the lock does not hold, one the resolver
// left out for another platform or could not have, is left out of its
// dependent's entry too: Deno would otherwise look for it in the cache and
// fail the import (measured on Deno 2.9.8: "npm package not found in
// cache", even for an optional dependency), where the package's own code
// expects to do without it.
func writeRegistryFiles(root string, pkgs []Package) error {
	byName := map[string][]Package{}
	for _, p := range pkgs {
		byName[p.Name] = append(byName[p.Name], p)
	}
	locked := func(name string) bool { return len(byName[name]) > 0 }
	for name, versions := range byName {
		// "_deno.packumentFormat": "full" marks the document complete:
		// without it `deno check` (mode validate) fetches it again,
		// --cached-only or not (measured on Deno 2.9.8).
		doc := struct {
			Name     string                 `json:"name"`
			DistTags map[string]string      `json:"dist-tags"`
			Versions map[string]versionInfo `json:"versions"`
			Format   string                 `json:"_deno.packumentFormat"`
		}{Name: name, DistTags: map[string]string{}, Versions: map[string]versionInfo{}, Format: "full"}
		for _, p := range versions {
			info := readPackageJSON(filepath.Join(root, filepath.FromSlash(name), p.Version, "package.json"))
			info.Name, info.Version = name, p.Version
			for dep := range info.OptionalDependencies {
				if !locked(dep) {
					delete(info.OptionalDependencies, dep)
					delete(info.Dependencies, dep)
				}
			}
			for dep := range info.PeerDependencies {
				if info.PeerDependenciesMeta[dep].Optional && !locked(dep) {
					delete(info.PeerDependencies, dep)
					delete(info.PeerDependenciesMeta, dep)
				}
			}
			info.Dist.Tarball = cacheTarballURL + TarballPath(name, p.Version)
			info.Dist.Integrity = p.Integrity
			doc.Versions[p.Version] = info
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name), "registry.json"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readPackageJSON reads what versionInfo keeps of a package.json; a
// missing or unreadable one gives an empty entry (a package without
// dependencies, as far as Deno is concerned).
func readPackageJSON(p string) versionInfo {
	var info versionInfo
	f, err := os.Open(p)
	if err != nil {
		return info
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPackageJSON+1))
	if err != nil || len(b) > maxPackageJSON {
		return versionInfo{}
	}
	if json.Unmarshal(b, &info) != nil {
		// One field of an odd type: keep what reads.
		var loose map[string]json.RawMessage
		if json.Unmarshal(b, &loose) != nil {
			return versionInfo{}
		}
		info = versionInfo{}
		for k, dst := range map[string]*map[string]string{"dependencies": &info.Dependencies, "optionalDependencies": &info.OptionalDependencies, "peerDependencies": &info.PeerDependencies} {
			_ = json.Unmarshal(loose[k], dst)
		}
	}
	return info
}

// ImportMap is the environment's import map: base's "imports" (the
// harness's blocked specifiers), the environment's Deno cache mapped to
// itself (its packages' own modules load from there) and, for each
// requested package, its name and its subpaths mapped to npm: specifiers
// of the locked version ("left-pad" → "npm:left-pad@1.3.0", "left-pad/" →
// "npm:/left-pad@1.3.0/").
func ImportMap(base []byte, denoDir string, pkgs []Package) ([]byte, error) {
	var m struct {
		Imports map[string]string `json:"imports"`
	}
	if err := json.Unmarshal(base, &m); err != nil || m.Imports == nil {
		return nil, fmt.Errorf("the harness's import map does not read: %v", err)
	}
	m.Imports["file://"+denoDir+"/"+cacheRegistryDir+"/"] = "file://" + denoDir + "/" + cacheRegistryDir + "/"
	for _, p := range pkgs {
		if !p.Requested {
			continue
		}
		m.Imports[p.Name] = "npm:" + p.Key()
		m.Imports[p.Name+"/"] = "npm:/" + p.Key() + "/"
	}
	return json.MarshalIndent(m, "", " ")
}

// Specifiers are the bare names an environment's import map lets a tool
// import (its requested packages), read from the map itself.
func Specifiers(importMap []byte) ([]string, error) {
	var m struct {
		Imports map[string]string `json:"imports"`
	}
	if err := json.Unmarshal(importMap, &m); err != nil {
		return nil, err
	}
	var out []string
	for k, v := range m.Imports {
		if !strings.HasSuffix(k, "/") && strings.HasPrefix(v, "npm:") && ValidName(k) {
			out = append(out, k)
		}
	}
	return out, nil
}
