package debian

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
)

func TestCompareVersionsOrdersAsDpkg(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.0", "1.0", 0},
		{"1.0", "1.1", -1},
		{"1.10", "1.9", 1},
		{"1:1.0", "2.0", 1},
		{"1.0~rc1", "1.0", -1},
		{"1.0", "1.0+deb12u1", -1},
		{"3.11.2-6+deb12u9", "3.11.2-6+deb12u10", -1},
		{"3.11.2-6+deb12u9", "3.11.2-6", 1},
		{"2.36-9+deb12u14", "2.36-9+deb12u9", 1},
		{"1.0-1", "1.0-1~bpo1", 1},
		{"1.0a", "1.0+", -1},
		{"20250419~deb12u2", "20230311", 1},
		{"1:1.2.13.dfsg-1+deb12u1", "1:1.2.13.dfsg-1", 1},
		{"001", "1", 0},
	} {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := CompareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

const packagesFixture = `Package: python3.13-minimal
Version: 3.13.5-2
Architecture: amd64
Pre-Depends: libc6 (>= 2.38), libexpat1 (>= 2.6.0),
 zlib1g (>= 1:1.2.0)
Depends: libpython3.13-minimal (= 3.13.5-2)
Description: a minimal Python
 with a long description
Filename: pool/main/p/python3.13/python3.13-minimal_3.13.5-2_amd64.deb
Size: 2224552
SHA256: AAAA000000000000000000000000000000000000000000000000000000000000

Package: libc6
Version: 2.41-12
Architecture: amd64
Depends: libgcc-s1
Filename: pool/main/g/glibc/libc6_2.41-12_amd64.deb
Size: 10
SHA256: 1111000000000000000000000000000000000000000000000000000000000000
`

func TestReadPackagesKeepsTheResolverFields(t *testing.T) {
	pkgs, err := ReadPackages(strings.NewReader(packagesFixture))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 {
		t.Fatalf("read %d packages, want 2", len(pkgs))
	}
	p := pkgs[0]
	if p.Name != "python3.13-minimal" || p.Version != "3.13.5-2" || p.Size != 2224552 || !strings.HasPrefix(p.SHA256, "aaaa") {
		t.Errorf("first package = %+v", p)
	}
	var names []string
	for _, alts := range ParseRelations(p.PreDepends) {
		names = append(names, alts[0].Name)
	}
	if want := []string{"libc6", "libexpat1", "zlib1g"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Pre-Depends across a continuation line = %v, want %v", names, want)
	}
	if _, err := ReadPackages(strings.NewReader("Package: x\nVersion: 1\n\n")); err == nil {
		t.Error("a stanza without Filename and SHA256 was accepted")
	}
}

func TestParseRelationsSplitsAlternativesAndDropsQualifiers(t *testing.T) {
	got := ParseRelations("libc6 (>= 2.34), debconf (>= 0.5) | debconf-2.0, python3:any, foo [amd64]")
	want := [][]Relation{{{"libc6"}}, {{"debconf"}, {"debconf-2.0"}}, {{"python3"}}, {{"foo"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseRelations = %v, want %v", got, want)
	}
}

func pkg(name, version, suite, depends string, provides ...string) Package {
	return Package{Name: name, Version: version, Architecture: "amd64", Suite: suite, Depends: depends, Provides: provides,
		Filename: "pool/" + name + ".deb", Size: 1, SHA256: strings.Repeat("0", 64)}
}

func TestClosureTakesTheNewestVersionAndDropsExcludedDependencies(t *testing.T) {
	main := &Index{Packages: []Package{
		pkg("python3", "3.13.5-2", "trixie", "libc6, libssl3t64, tzdata"),
		pkg("libc6", "2.41-12", "trixie", "libgcc-s1"),
		pkg("libgcc-s1", "14.2.0", "trixie", ""),
		pkg("libssl3t64", "3.5.1-1", "trixie", "openssl-provider-legacy | libfoo"),
		pkg("openssl-provider-legacy", "3.5.1-1", "trixie", ""),
		pkg("tzdata", "2025a", "trixie", "debconf (>= 0.5) | debconf-2.0"),
		pkg("debconf", "1.5", "trixie", "perl-base"),
		pkg("cdebconf", "0.1", "trixie", "", "debconf-2.0"),
		{Name: "libc6", Version: "9.9", Architecture: "i386", Filename: "pool/x", Size: 1, SHA256: strings.Repeat("0", 64)},
	}}
	security := &Index{Packages: []Package{pkg("libssl3t64", "3.5.1-1+deb13u1", "trixie-security", "openssl-provider-legacy")}}
	u := NewUniverse("amd64", main, security)
	got, err := u.Closure([]string{"python3"}, []string{"debconf", "cdebconf", "perl-base"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name+"="+p.Version+"@"+p.Suite)
	}
	want := []string{"libc6=2.41-12@trixie", "libgcc-s1=14.2.0@trixie", "libssl3t64=3.5.1-1+deb13u1@trixie-security",
		"openssl-provider-legacy=3.5.1-1@trixie", "python3=3.13.5-2@trixie", "tzdata=2025a@trixie"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("closure = %v\nwant %v", names, want)
	}
	// A virtual package satisfied by a provider.
	if got, err := u.Closure([]string{"tzdata"}, []string{"debconf"}); err != nil || len(got) != 2 || got[0].Name != "cdebconf" {
		t.Errorf("tzdata with debconf excluded = %v, %v; want cdebconf providing debconf-2.0", got, err)
	}
	// A dependency nothing satisfies names the chain.
	broken := NewUniverse("amd64", &Index{Packages: []Package{pkg("a", "1", "s", "b"), pkg("b", "1", "s", "missing")}})
	if _, err := broken.Closure([]string{"a"}, nil); err == nil || !strings.Contains(err.Error(), "a → b") || !strings.Contains(err.Error(), "missing") {
		t.Errorf("unsatisfiable dependency: err = %v, want one naming a → b and missing", err)
	}
	if _, err := u.Closure([]string{"nosuch"}, nil); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("unknown root: err = %v", err)
	}
}

func keyrings(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, filepath.Join("testdata", n))
	}
	return out
}

// testdata/trixie-updates.InRelease is the archive's own file, signed by
// Debian; the keyrings are debian-archive-keyring's.
func TestVerifyInReleaseChecksDebiansSignature(t *testing.T) {
	data, err := os.ReadFile("testdata/trixie-updates.InRelease")
	if err != nil {
		t.Fatal(err)
	}
	trixie, err := ReadKeyrings(keyrings("debian-archive-trixie-automatic.gpg", "debian-archive-trixie-stable.gpg"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := VerifyInRelease(data, trixie, "trixie-updates")
	if err != nil {
		t.Fatalf("the archive's InRelease does not verify: %v", err)
	}
	if rel.Codename != "trixie-updates" || !strings.Contains(rel.Signer, "trixie") || len(rel.Files) == 0 {
		t.Errorf("release = codename %q signer %q, %d files", rel.Codename, rel.Signer, len(rel.Files))
	}
	sum, ok := rel.Files["main/binary-amd64/Packages.xz"]
	if !ok || len(sum.SHA256) != 64 {
		t.Errorf("the release lists no main/binary-amd64/Packages.xz sha256: %+v", sum)
	}

	t.Run("a changed line fails", func(t *testing.T) {
		tampered := bytes.Replace(data, []byte(sum.SHA256), []byte(strings.Repeat("0", 64)), 1)
		if _, err := VerifyInRelease(tampered, trixie, "trixie-updates"); !errors.Is(err, ErrSignature) {
			t.Errorf("tampered InRelease: err = %v, want ErrSignature", err)
		}
	})
	t.Run("text outside the signature is ignored", func(t *testing.T) {
		extra := append(append([]byte(nil), data...), []byte("\nSHA256:\n "+strings.Repeat("1", 64)+" 1 main/evil\n")...)
		rel, err := VerifyInRelease(extra, trixie, "trixie-updates")
		if err != nil || rel.Files["main/evil"] != (FileSum{}) {
			t.Errorf("trailing text: err %v, evil %v", err, rel.Files["main/evil"])
		}
	})
	t.Run("other keys fail", func(t *testing.T) {
		e, err := openpgp.NewEntity("not debian", "", "nobody@example.invalid", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyInRelease(data, openpgp.EntityList{e}, "trixie-updates"); !errors.Is(err, ErrSignature) {
			t.Errorf("a stranger's key: err = %v, want ErrSignature", err)
		}
	})
	t.Run("another suite's name fails", func(t *testing.T) {
		if _, err := VerifyInRelease(data, trixie, "trixie-security"); err == nil || !strings.Contains(err.Error(), "trixie-updates") {
			t.Errorf("suite mix-up: err = %v", err)
		}
	})
	t.Run("an unsigned file fails", func(t *testing.T) {
		if _, err := VerifyInRelease([]byte("Suite: x\nSHA256:\n"), trixie, ""); !errors.Is(err, ErrSignature) {
			t.Errorf("unsigned: err = %v", err)
		}
	})
}

func TestFetchChecksTheSHA256AndCaches(t *testing.T) {
	good := []byte("a .deb's bytes")
	sum := sha256.Sum256(good)
	sha := hex.EncodeToString(sum[:])
	served := good
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		w.Write(served)
	}))
	defer srv.Close()
	c := &Client{}
	cache := Cache{Dir: t.TempDir()}
	ctx := context.Background()

	p, err := c.Fetch(ctx, cache, "libfoo", sha, int64(len(good)), []string{srv.URL + "/a.deb"})
	if err != nil {
		t.Fatal(err)
	}
	if p != cache.Path(sha) {
		t.Errorf("stored at %s, want %s", p, cache.Path(sha))
	}
	if _, err := c.Fetch(ctx, cache, "libfoo", sha, int64(len(good)), []string{srv.URL + "/a.deb"}); err != nil || hits != 1 {
		t.Errorf("second fetch: err %v, %d downloads (want 1: cached)", err, hits)
	}

	// A damaged cache entry is not handed out: it is fetched again.
	if err := os.WriteFile(p, []byte("a .deb's bytez"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, cache, "libfoo", sha, int64(len(good)), []string{srv.URL + "/a.deb"}); err != nil || hits != 2 {
		t.Errorf("damaged cache: err %v, %d downloads (want 2)", err, hits)
	}

	// A tampered download is refused and not cached; the next URL is not tried.
	served = []byte("a tampered deb")
	other := strings.Repeat("ab", 32)
	_, err = c.Fetch(ctx, cache, "libbar", other, int64(len(served)), []string{srv.URL + "/b.deb", srv.URL + "/c.deb"})
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "libbar") || !strings.Contains(err.Error(), other) {
		t.Errorf("tampered download: err = %v, want ErrChecksum naming the package and the pinned sha256", err)
	}
	if _, err := os.Stat(cache.Path(other)); err == nil {
		t.Error("the tampered download was cached")
	}
	if hits != 3 {
		t.Errorf("%d downloads, want 3 (no retry of a wrong file elsewhere)", hits)
	}
}

func TestExtractUnpacksIntoAMergedUsrTreeWithoutSetidBits(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb on this host")
	}
	pkg := t.TempDir()
	for p, mode := range map[string]os.FileMode{"lib/x86_64-linux-gnu/libfoo.so.1.2": 0o644, "usr/bin/tool": 0o4755} {
		full := filepath.Join(pkg, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("libfoo.so.1.2", filepath.Join(pkg, "lib/x86_64-linux-gnu/libfoo.so.1")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: libfoo\nVersion: 1.0\nArchitecture: amd64\nMaintainer: t <t@example.invalid>\nDescription: test\n"
	if err := os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(t.TempDir(), "libfoo.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, out)
	}
	root := t.TempDir()
	if err := MergedUsr(root); err != nil {
		t.Fatal(err)
	}
	if err := Extract(context.Background(), deb, root); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "lib")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("/lib is not the merged-/usr link: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libfoo.so.1.2")); err != nil {
		t.Errorf("/lib/… did not land in /usr/lib/…: %v", err)
	}
	if t2, err := os.Readlink(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libfoo.so.1")); err != nil || t2 != "libfoo.so.1.2" {
		t.Errorf("symlink = %q, %v", t2, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/bin/tool")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("setuid bit kept: %v %v", fi.Mode(), err)
	}
}

func TestUntarRefusesEntriesLeavingTheTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  tar.Header
	}{
		{"dot-dot", tar.Header{Name: "./usr/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{"hard link out", tar.Header{Name: "./usr/x", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(&tc.hdr); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			root := t.TempDir()
			if err := untar(&buf, filepath.Join(root, "tree")); err == nil || !strings.Contains(err.Error(), "leaves the tree") {
				t.Errorf("err = %v, want one saying the entry leaves the tree", err)
			}
			if _, err := os.Stat(filepath.Join(root, "evil")); err == nil {
				t.Error("the entry was written outside the tree")
			}
		})
	}
}
