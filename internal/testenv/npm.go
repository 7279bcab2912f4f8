package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
)

// NPMPackage is one version of a package a test registry (NPMRegistry)
// serves: a tarball with package/package.json and Files, described in the
// package's metadata with its sha512 integrity.
type NPMPackage struct {
	Name, Version string
	// Dependencies, PeerDependencies and OptionalDependencies go into
	// package.json and the registry's metadata.
	Dependencies, PeerDependencies, OptionalDependencies map[string]string
	// OptionalPeers are marked optional in peerDependenciesMeta.
	OptionalPeers []string
	// Main is package.json's "main"; Type its "type" ("module" for ESM).
	Main, Type string
	// Files are the package's files (path below the package → content);
	// package.json is written unless Files has one.
	Files map[string]string
	// Scripts go into package.json ("postinstall": "...").
	Scripts map[string]string
	// OS and CPU go into the metadata and package.json.
	OS, CPU []string
	// Deprecated marks the version deprecated in the metadata.
	Deprecated string
	// Raw, when set, is served as the tarball instead of the one made
	// from Files (for broken or hostile tarballs); the metadata's
	// integrity is Raw's.
	Raw []byte
	// WrongIntegrity makes the metadata announce another tarball's digest.
	WrongIntegrity bool
}

// NPMRegistry is a registry on the host's loopback serving packuments
// (abbreviated metadata) and tarballs with npm's URL layout. It counts the
// requests for each path.
type NPMRegistry struct {
	URL string

	mu       sync.Mutex // guards requests, tags and holds
	requests map[string]int
	tags     map[string]map[string]string
	holds    map[string]chan struct{}
	docs     map[string]map[string]any
	tarballs map[string][]byte
}

// Hold makes requests for name's metadata wait (until release, or until
// the request ends), as a slow registry would: a resolution asking for it
// stays in flight.
func (r *NPMRegistry) Hold(name string) (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.holds[name] = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.holds, name)
			r.mu.Unlock()
			close(ch)
		})
	}
}

// Requests is how many times path was asked for.
func (r *NPMRegistry) Requests(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[path]
}

// Tag sets a dist-tag of name (the highest version is "latest" unless set).
func (r *NPMRegistry) Tag(name, tag, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tags[name] == nil {
		r.tags[name] = map[string]string{}
	}
	r.tags[name][tag] = version
}

// NPMTarball builds a package's tarball: package/ and each file.
func NPMTarball(t testing.TB, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Integrity is the sha512 Subresource Integrity digest of b.
func Integrity(b []byte) string {
	sum := sha512.Sum512(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// StartNPMRegistry serves pkgs until the test ends.
func StartNPMRegistry(t testing.TB, pkgs ...NPMPackage) *NPMRegistry {
	t.Helper()
	r := &NPMRegistry{requests: map[string]int{}, tags: map[string]map[string]string{}, holds: map[string]chan struct{}{},
		docs: map[string]map[string]any{}, tarballs: map[string][]byte{}}
	latest := map[string]string{}
	for _, p := range pkgs {
		tgz := p.Raw
		if tgz == nil {
			files := map[string]string{}
			for k, v := range p.Files {
				files[k] = v
			}
			if _, ok := files["package.json"]; !ok {
				pj := map[string]any{"name": p.Name, "version": p.Version}
				for k, v := range map[string]any{"dependencies": p.Dependencies, "peerDependencies": p.PeerDependencies,
					"optionalDependencies": p.OptionalDependencies, "scripts": p.Scripts} {
					if m, _ := v.(map[string]string); len(m) > 0 {
						pj[k] = m
					}
				}
				if meta := peerMeta(p.OptionalPeers); meta != nil {
					pj["peerDependenciesMeta"] = meta
				}
				if p.Main != "" {
					pj["main"] = p.Main
				}
				if p.Type != "" {
					pj["type"] = p.Type
				}
				if len(p.OS) > 0 {
					pj["os"] = p.OS
				}
				if len(p.CPU) > 0 {
					pj["cpu"] = p.CPU
				}
				b, err := json.Marshal(pj)
				if err != nil {
					t.Fatal(err)
				}
				files["package.json"] = string(b)
			}
			tgz = NPMTarball(t, files)
		}
		integrity := Integrity(tgz)
		if p.WrongIntegrity {
			integrity = Integrity(append([]byte("not "), tgz...))
		}
		base := p.Name
		if i := strings.IndexByte(base, '/'); i >= 0 {
			base = base[i+1:]
		}
		r.tarballs["/"+p.Name+"/-/"+base+"-"+p.Version+".tgz"] = tgz
		v := map[string]any{"name": p.Name, "version": p.Version,
			"dist": map[string]string{"integrity": integrity, "tarball": "http://registry.invalid/" + p.Name + "/-/" + base + "-" + p.Version + ".tgz"}}
		for k, m := range map[string]map[string]string{"dependencies": p.Dependencies, "peerDependencies": p.PeerDependencies, "optionalDependencies": p.OptionalDependencies} {
			if len(m) > 0 {
				v[k] = m
			}
		}
		if meta := peerMeta(p.OptionalPeers); meta != nil {
			v["peerDependenciesMeta"] = meta
		}
		if len(p.Scripts) > 0 {
			v["hasInstallScript"] = true
		}
		if len(p.OS) > 0 {
			v["os"] = p.OS
		}
		if len(p.CPU) > 0 {
			v["cpu"] = p.CPU
		}
		if p.Deprecated != "" {
			v["deprecated"] = p.Deprecated
		}
		if r.docs[p.Name] == nil {
			r.docs[p.Name] = map[string]any{}
		}
		r.docs[p.Name][p.Version] = v
		latest[p.Name] = p.Version // the last one listed
	}
	for name, v := range latest {
		r.Tag(name, "latest", v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		path := req.URL.EscapedPath()
		r.mu.Lock()
		r.requests[path]++
		r.mu.Unlock()
		if tgz, ok := r.tarballs[path]; ok {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(tgz)
			return
		}
		name := strings.Replace(strings.TrimPrefix(path, "/"), "%2f", "/", 1)
		name = strings.Replace(name, "%2F", "/", 1)
		versions, ok := r.docs[name]
		if !ok {
			http.Error(w, `{"error":"Not found"}`, http.StatusNotFound)
			return
		}
		r.mu.Lock()
		tags, hold := r.tags[name], r.holds[name]
		r.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
		json.NewEncoder(w).Encode(map[string]any{"name": name, "dist-tags": tags, "versions": versions})
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL + "/"
	return r
}

func peerMeta(optional []string) map[string]any {
	if len(optional) == 0 {
		return nil
	}
	m := map[string]any{}
	for _, n := range optional {
		m[n] = map[string]bool{"optional": true}
	}
	return m
}

// NPMFixtures are a small npm world for tests: a CommonJS package using a Node
// builtin and an ES module dependency (and optional dependencies and an
// optional peer that are not installed), a scoped ES module with a subpath,
// and a package whose install scripts would leave files behind
// (/tmp/execgate-preinstall-ran, /tmp/execgate-postinstall-ran) if anything
// ran them.
func NPMFixtures() []NPMPackage {
	return []NPMPackage{
		{Name: "shout", Version: "1.2.0", Main: "index.js", Dependencies: map[string]string{"upper": "^2.0.0"},
			// Left out (another os; not on the registry), as npm would:
			// the package must still import.
			OptionalDependencies: map[string]string{"shout-darwin": "1.2.0", "shout-missing": "1.0.0"},
			PeerDependencies:     map[string]string{"shout-plugin": "^1.0.0"}, OptionalPeers: []string{"shout-plugin"},
			Files: map[string]string{"index.js": `
const util = require("util");
const upper = require("upper");
module.exports = function shout(s) { return util.format("%s!", upper.default(s)); };
module.exports.env = () => Object.keys(process.env).length + ":" + String(process.env.NODE_ENV);
module.exports.say = (s) => { process.stdout.write("said " + s + "\n"); return s; };
`}},
		{Name: "shout-darwin", Version: "1.2.0", OS: []string{"darwin"}, Files: map[string]string{"index.js": "module.exports = 'darwin'"}},
		{Name: "upper", Version: "2.1.0", Type: "module", Files: map[string]string{"index.js": `export default (s) => s.toUpperCase();`}},
		{Name: "@tools/math", Version: "0.3.0", Type: "module", Main: "index.js",
			Files: map[string]string{"index.js": `export const add = (a, b) => a + b;`, "lib/mul.js": `export const mul = (a, b) => a * b;`}},
		{Name: "scripted", Version: "1.0.0", Main: "index.js", Scripts: map[string]string{"postinstall": "node -e \"require('fs').writeFileSync('/tmp/execgate-postinstall-ran', 'x')\"", "preinstall": "touch /tmp/execgate-preinstall-ran"},
			Files: map[string]string{"index.js": "module.exports = 'no script ran';"}},
	}
}
