package npm_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/internal/testenv"
)

const baseMap = `{"imports": {"npm:": "blocked://import/npm/", "node:": "blocked://import/node/", "events": "blocked://import/node/events"}}`

func install(t *testing.T, reg *testenv.NPMRegistry, pkgs []npm.Package, opts npm.InstallOptions) (string, error) {
	t.Helper()
	dir := t.TempDir()
	if opts.BaseImportMap == nil {
		opts.BaseImportMap = []byte(baseMap)
	}
	if opts.DenoDir == "" {
		opts.DenoDir = "/opt/execgate/deps/deno"
	}
	return dir, npm.Install(context.Background(), &npm.Registry{URL: reg.URL}, pkgs, dir, opts)
}

func TestInstallLaysOutDenosCacheAndTheImportMap(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "app", Version: "1.0.0", Main: "index.js", Dependencies: map[string]string{"@scope/util": "^1.0.0"},
			Files: map[string]string{"index.js": "module.exports = 1", "lib/deep/x.js": "x"}, Scripts: map[string]string{"postinstall": "touch /tmp/pwned"}},
		testenv.NPMPackage{Name: "@scope/util", Version: "1.0.2", Type: "module", Files: map[string]string{"index.js": "export default 2"}},
		testenv.NPMPackage{Name: "events", Version: "3.3.0", Files: map[string]string{"events.js": "module.exports = 3"}},
	)
	pkgs, err := resolve(t, reg, "app@1.0.0", "events@3.3.0")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := install(t, reg, pkgs, npm.InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "deno", "npm", "registry.npmjs.org")
	for _, f := range []string{"app/1.0.0/index.js", "app/1.0.0/lib/deep/x.js", "app/1.0.0/package.json", "@scope/util/1.0.2/index.js", "events/3.3.0/events.js"} {
		if _, err := os.Stat(filepath.Join(cache, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	var doc struct {
		Name     string `json:"name"`
		Versions map[string]struct {
			Dependencies map[string]string `json:"dependencies"`
			Dist         struct {
				Integrity string `json:"integrity"`
			} `json:"dist"`
		} `json:"versions"`
	}
	b, err := os.ReadFile(filepath.Join(cache, "app", "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	v := doc.Versions["1.0.0"]
	if doc.Name != "app" || len(doc.Versions) != 1 || v.Dependencies["@scope/util"] != "^1.0.0" || v.Dist.Integrity != pkgs[1].Integrity {
		t.Errorf("app's registry.json: %s", b)
	}
	var m struct {
		Imports map[string]string `json:"imports"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "import_map.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"app":    "npm:app@1.0.0",
		"app/":   "npm:/app@1.0.0/",
		"events": "npm:events@3.3.0", // a requested package's name wins over the blocked builtin
		"npm:":   "blocked://import/npm/",
		"node:":  "blocked://import/node/",
		"file:///opt/execgate/deps/deno/npm/registry.npmjs.org/": "file:///opt/execgate/deps/deno/npm/registry.npmjs.org/",
	} {
		if m.Imports[k] != want {
			t.Errorf("import map %q → %q, want %q", k, m.Imports[k], want)
		}
	}
	if _, ok := m.Imports["@scope/util"]; ok {
		t.Errorf("a dependency that was not requested is importable: %v", m.Imports)
	}
	specs, err := npm.Specifiers(b)
	if err != nil || strings.Join(sorted(specs), " ") != "app events" {
		t.Errorf("Specifiers = %v, %v", specs, err)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Errorf("/tmp/pwned exists: an install script ran")
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

func TestInstallRefusesATarballThatIsNotTheLockedOne(t *testing.T) {
	reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "x", Version: "1.0.0", Files: map[string]string{"index.js": "1"}})
	pkgs, err := resolve(t, reg, "x@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	tampered := pkgs[0]
	tampered.Integrity = testenv.Integrity([]byte("another tarball"))
	dir, err := install(t, reg, []npm.Package{tampered}, npm.InstallOptions{})
	if err == nil || !strings.Contains(err.Error(), "not the locked") {
		t.Fatalf("got %v, want the integrity mismatch refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "deno", "npm", "registry.npmjs.org", "x", "1.0.0", "index.js")); err == nil {
		t.Errorf("the refused tarball was extracted")
	}
}

func TestInstallReusesVerifiedTarballsFromItsCache(t *testing.T) {
	reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "x", Version: "1.0.0", Files: map[string]string{"index.js": "1"}})
	pkgs, err := resolve(t, reg, "x@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	for range 2 {
		if _, err := install(t, reg, pkgs, npm.InstallOptions{TarballCache: cache}); err != nil {
			t.Fatal(err)
		}
	}
	if n := reg.Requests("/x/-/x-1.0.0.tgz"); n != 1 {
		t.Errorf("the tarball was downloaded %d times, want once", n)
	}
}

// A cached tarball removed while an install uses it (the cache cap trims
// the least recently used) does not fail that install: the bytes it
// verified are read through the file it opened.
func TestATarballRemovedFromTheCacheMidInstallStillExtracts(t *testing.T) {
	reg := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "x", Version: "1.0.0", Files: map[string]string{"index.js": "module.exports = 1"}})
	pkgs, err := resolve(t, reg, "x@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	removeAll := func() {
		entries, _ := os.ReadDir(cache)
		if len(entries) == 0 {
			t.Fatal("nothing was cached")
		}
		for _, e := range entries {
			if err := os.Remove(filepath.Join(cache, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Downloaded into the cache, then from it; each time the cached file
	// is removed between the check and the extraction.
	for i, what := range []string{"downloaded", "cached"} {
		if i == 1 {
			if _, err := install(t, reg, pkgs, npm.InstallOptions{TarballCache: cache}); err != nil {
				t.Fatal(err)
			}
		}
		dst := t.TempDir()
		if err := npm.FetchAndExtract(context.Background(), &npm.Registry{URL: reg.URL}, pkgs[0], cache, dst, removeAll); err != nil {
			t.Fatalf("%s tarball removed mid-install: %v", what, err)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "index.js")); err != nil || string(b) != "module.exports = 1" {
			t.Fatalf("%s tarball: index.js %q %v", what, b, err)
		}
	}
}

// A lock that pairs a package's name with another package's digest does
// not get the cached bytes of that other package: the cache is keyed by
// name@version too, and the registry's tarball for the name does not match.
func TestATarballCachedForOnePackageIsNeverInstalledAsAnother(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "denied", Version: "1.0.0", Files: map[string]string{"index.js": "evil"}},
		testenv.NPMPackage{Name: "allowed", Version: "1.0.0", Files: map[string]string{"index.js": "fine"}})
	denied, err := resolve(t, reg, "denied@1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	if _, err := install(t, reg, denied, npm.InstallOptions{TarballCache: cache}); err != nil {
		t.Fatal(err)
	}
	forged := []npm.Package{{Name: "allowed", Version: "1.0.0", Integrity: denied[0].Integrity, Requested: true}}
	dir, err := install(t, reg, forged, npm.InstallOptions{TarballCache: cache})
	if err == nil || !strings.Contains(err.Error(), "not the locked") {
		t.Fatalf("got %v, want the forged lock refused", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "deno", "npm", "registry.npmjs.org", "allowed", "1.0.0", "index.js")); err == nil {
		t.Fatalf("installed %q as allowed@1.0.0", b)
	}
}

// tarball builds a gzipped tar of raw entries.
func tarball(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range entries {
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// A hostile tarball cannot write outside its package, plant links, or
// outgrow the caps; links are skipped, the others refuse the package.
func TestInstallExtractsSafely(t *testing.T) {
	reg := func(t *testing.T, raw []byte) (*testenv.NPMRegistry, []npm.Package) {
		r := testenv.StartNPMRegistry(t, testenv.NPMPackage{Name: "evil", Version: "1.0.0", Raw: raw})
		pkgs, err := resolve(t, r, "evil@1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		return r, pkgs
	}
	pj := tar.Header{Name: "package/package.json", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		limits  npm.Limits
		want    string // "" when the install succeeds
	}{
		{"a .. path", []tar.Header{pj, {Name: "package/../../escaped", Typeflag: tar.TypeReg, Size: 1}}, npm.Limits{}, `".." component`},
		{"an absolute path", []tar.Header{{Name: "/etc/evil", Typeflag: tar.TypeReg, Size: 1}}, npm.Limits{}, "absolute"},
		{"a backslash", []tar.Header{{Name: `package\..\x`, Typeflag: tar.TypeReg, Size: 1}}, npm.Limits{}, "backslash"},
		{"over the size cap", []tar.Header{pj, {Name: "package/big", Typeflag: tar.TypeReg, Size: 4096}}, npm.Limits{MaxBytes: 1000}, "size cap"},
		{"over the file cap", []tar.Header{pj, {Name: "package/a", Typeflag: tar.TypeReg, Size: 1}, {Name: "package/b", Typeflag: tar.TypeReg, Size: 1}}, npm.Limits{MaxFiles: 2}, "too many files"},
		{"too deep", []tar.Header{{Name: "package/" + strings.Repeat("d/", 70) + "f", Typeflag: tar.TypeReg, Size: 1}}, npm.Limits{}, "nested deeper"},
		{"links are skipped", []tar.Header{pj,
			{Name: "package/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
			{Name: "package/hard", Typeflag: tar.TypeLink, Linkname: "package/package.json"},
			{Name: "package/fifo", Typeflag: tar.TypeFifo}}, npm.Limits{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, pkgs := reg(t, tarball(t, tc.entries...))
			dir, err := install(t, r, pkgs, npm.InstallOptions{Limits: tc.limits})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				root := filepath.Join(dir, "deno", "npm", "registry.npmjs.org", "evil", "1.0.0")
				for _, n := range []string{"link", "hard", "fifo"} {
					if _, err := os.Lstat(filepath.Join(root, n)); err == nil {
						t.Errorf("%s was extracted", n)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped")); err == nil {
				t.Errorf("a file landed outside the environment")
			}
		})
	}
}

func TestLocksRoundTripAndRefuseWhatTheyCannotHold(t *testing.T) {
	i1, i2 := testenv.Integrity([]byte("1")), testenv.Integrity([]byte("2"))
	pkgs := []npm.Package{
		{Name: "ms", Version: "2.1.2", Integrity: i2, Parent: "debug@4.3.4"},
		{Name: "debug", Version: "4.3.4", Integrity: i1, Requested: true},
	}
	text := npm.RenderLock(pkgs)
	want := "# execgate npm lock 1\ndebug@4.3.4 " + i1 + "\nms@2.1.2 " + i2 + " # via debug@4.3.4\n"
	if text != want {
		t.Fatalf("lock:\n%s\nwant:\n%s", text, want)
	}
	back, err := npm.ParseLock(text)
	if err != nil || len(back) != 2 || back[0] != pkgs[1] || back[1] != pkgs[0] {
		t.Fatalf("ParseLock = %+v, %v", back, err)
	}
	for name, bad := range map[string]string{
		"no header":         "debug@4.3.4 " + i1 + "\n",
		"a range":           "# execgate npm lock 1\ndebug@^4.3.4 " + i1 + "\n",
		"sha1 only":         "# execgate npm lock 1\ndebug@4.3.4 sha1-AAAA\n",
		"no integrity":      "# execgate npm lock 1\ndebug@4.3.4\n",
		"an unknown parent": "# execgate npm lock 1\ndebug@4.3.4 " + i1 + "\nms@2.1.2 " + i2 + " # via other@1.0.0\n",
		"nothing requested": "# execgate npm lock 1\nms@2.1.2 " + i2 + " # via ms@2.1.2\n",
		"twice":             "# execgate npm lock 1\ndebug@4.3.4 " + i1 + "\ndebug@4.3.4 " + i1 + "\n",
		"a URL":             "# execgate npm lock 1\nhttps://evil/x.tgz " + i1 + "\n",
	} {
		if _, err := npm.ParseLock(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A chain of MaxDepth packages is allowed, one more is not.
	chain := func(n int) []npm.Package {
		out := []npm.Package{{Name: "c01", Version: "1.0.0", Integrity: i1, Requested: true}}
		for i := 2; i <= n; i++ {
			out = append(out, npm.Package{Name: fmt.Sprintf("c%02d", i), Version: "1.0.0", Integrity: i1, Parent: out[i-2].Key()})
		}
		return out
	}
	if _, err := npm.ParseLock(npm.RenderLock(chain(npm.MaxDepth))); err != nil {
		t.Errorf("a chain of %d: %v", npm.MaxDepth, err)
	}
	_, err = npm.ParseLock(npm.RenderLock(chain(npm.MaxDepth + 1)))
	if !errors.Is(err, npm.ErrInvalidLock) || !strings.Contains(err.Error(), fmt.Sprintf("c%02d@1.0.0 is more than %d packages below a requested one", npm.MaxDepth+1, npm.MaxDepth-1)) {
		t.Errorf("a chain of %d: %v", npm.MaxDepth+1, err)
	}
}

// Optional dependencies (and optional peers) the lock does not hold are
// left out of their dependent's registry.json, so Deno does not look for
// them; a dependency that is locked stays.
func TestRegistryFilesLeaveOutOptionalsThatAreNotLocked(t *testing.T) {
	reg := testenv.StartNPMRegistry(t, testenv.NPMFixtures()...)
	pkgs, err := resolve(t, reg, "shout@1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(pkgs); got != "shout@1.2.0 upper@2.1.0<-shout@1.2.0" {
		t.Fatalf("resolved %s: the optionals should be left out", got)
	}
	dir, err := install(t, reg, pkgs, npm.InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "deno", "npm", "registry.npmjs.org", "shout", "registry.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"shout-darwin", "shout-missing", "shout-plugin"} {
		if strings.Contains(string(b), name) {
			t.Errorf("registry.json names %s: %s", name, b)
		}
	}
	if !strings.Contains(string(b), `"upper":"^2.0.0"`) {
		t.Errorf("registry.json lost the locked dependency: %s", b)
	}
}
