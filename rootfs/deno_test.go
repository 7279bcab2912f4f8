package rootfs

import (
	"context"
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execgate/execgate/jaillayout"
)

func TestDenoWheelVersionComesFromTheDistInfo(t *testing.T) {
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin", "deno")
	for _, d := range []string{filepath.Dir(bin), filepath.Join(venv, "lib", "python3.11", "site-packages", "deno-2.9.8.dist-info")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := denoWheelVersion(bin); got != "2.9.8" {
		t.Errorf("version %q, want 2.9.8", got)
	}
	if got := denoWheelVersion(filepath.Join(t.TempDir(), "bin", "deno")); got != "" {
		t.Errorf("version without a dist-info %q, want empty", got)
	}
}

func TestAConfiguredDenoThatDoesNotWorkFailsTheBuild(t *testing.T) {
	_, err := Build(context.Background(), Options{Dir: filepath.Join(t.TempDir(), "rootfs"), DenoPath: "/nonexistent/deno"})
	if err == nil || !strings.Contains(err.Error(), "deno") {
		t.Fatalf("Build with a missing deno: %v", err)
	}
}

// copyExecutable copies src to dir/name, executable.
func copyExecutable(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheDenoStampIsTheBinarysContentNotItsPath(t *testing.T) {
	stamp := func(p string) string {
		t.Helper()
		s, err := DenoStamp(p)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Two checkouts, each with its own copy of the same binary.
	a := copyExecutable(t, "/bin/true", filepath.Join(t.TempDir(), "checkout-a", ".tools", "bin"), "deno")
	b := copyExecutable(t, "/bin/true", filepath.Join(t.TempDir(), "checkout-b", ".tools", "bin"), "deno")
	other := copyExecutable(t, "/bin/false", t.TempDir(), "deno")
	if stamp(a) != stamp(b) {
		t.Errorf("identical binaries at two paths: %q and %q", stamp(a), stamp(b))
	}
	if !strings.Contains(stamp(a), "build-id=") || stamp(a) == stamp(other) {
		t.Errorf("another build must differ by its build id: %q and %q", stamp(a), stamp(other))
	}

	// A binary without a build id is hashed.
	script := []byte("#!/bin/sh\nexit 0\n")
	dir := t.TempDir()
	for name, content := range map[string][]byte{"x": script, "y": script, "z": append(script, '#')} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	x, y, z := stamp(filepath.Join(dir, "x")), stamp(filepath.Join(dir, "y")), stamp(filepath.Join(dir, "z"))
	if x != y || x == z || !strings.Contains(x, "sha256=") {
		t.Errorf("without a build id: %q, %q (same content), %q (another)", x, y, z)
	}

	// A rootfs built with checkout A's Deno is fresh for checkout B's copy,
	// stale for another binary.
	tree := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tree, filepath.Dir(jaillayout.DenoPath)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, jaillayout.DenoPath), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{DenoStamp: stamp(a), DenoCodeCache: denoCacheBuilt}
	if why := denoStale(Options{Dir: tree, DenoPath: b}, m); why != "" {
		t.Errorf("checkout B would rebuild checkout A's rootfs: %s", why)
	}
	if why := denoStale(Options{Dir: tree, DenoPath: other}, m); why == "" {
		t.Error("another Deno binary does not make the rootfs stale")
	}
}

// The build fills Deno's cache directory with V8's code cache of the
// harness, checked at build time to be used from a read-only directory,
// and leaves it root-owned and read-only like the rest of the tree.
func TestBuildFillsDenosCodeCacheReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		skipUnlessCI(t, "the code cache is built as root (Deno chrooted into the tree); running as uid %d", os.Geteuid())
	}
	dir, m := buildWithDeno(t)
	if m.DenoCodeCache != denoCacheBuilt {
		t.Fatalf("manifest deno_code_cache %q, want %q\n%s", m.DenoCodeCache, denoCacheBuilt, built.log)
	}
	cache := filepath.Join(dir, jaillayout.DenoDir)
	fi, err := os.Stat(filepath.Join(cache, "v8_code_cache_v2"))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no code cache in %s: %v", cache, err)
	}
	err = filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		want := fs.FileMode(0o644)
		if d.IsDir() {
			want = 0o755 | fs.ModeDir
		}
		if st.Uid != 0 || st.Gid != 0 || fi.Mode() != want {
			t.Errorf("%s: %v owned by %d:%d, want %v owned by root", p, fi.Mode(), st.Uid, st.Gid, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestARootfsBuiltWithoutDenosCodeCacheIsStale(t *testing.T) {
	dir, m := buildWithDeno(t)
	if reason := denoStale(Options{Dir: dir}, m); reason != "" {
		t.Fatalf("the fresh build is stale: %s", reason)
	}
	old := *m
	old.DenoCodeCache = ""
	if reason := denoStale(Options{Dir: dir}, &old); !strings.Contains(reason, "code cache") {
		t.Errorf("a build from before the code cache: stale reason %q, want one naming the code cache", reason)
	}
	none := *m
	none.DenoCodeCache = denoCacheNone + "the build did not run as root"
	if reason := denoStale(Options{Dir: dir}, &none); reason != "" {
		t.Errorf("a build that could not make the cache is stale (%q): every start would rebuild it", reason)
	}
}

func TestEnvelopeStatusReadsTheEnvelopeFrame(t *testing.T) {
	frame := func(kind byte, payload string) []byte {
		b := []byte{kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	out := append(frame(1, "execgate\n"), frame(2, `{"status":"ok","result":{"ok":true}}`)...)
	if got := envelopeStatus(out); got != "ok" {
		t.Errorf("status %q, want ok", got)
	}
	if got := envelopeStatus(frame(1, "no envelope")); got != "" {
		t.Errorf("status without an envelope %q", got)
	}
	if got := envelopeStatus(out[:len(out)-3]); got != "" {
		t.Errorf("status of a cut frame %q", got)
	}
}

// buildWithDeno is the shared build, which must carry Deno (package
// testenv, which says so for other packages, imports this one).
func buildWithDeno(t *testing.T) (string, *Manifest) {
	t.Helper()
	dir, m := buildOnce(t)
	if m.DenoStamp == "" {
		skipUnlessCI(t, "the host has no Deno, so the rootfs has none (run scripts/setup.sh)")
	}
	return dir, m
}

// skipUnlessCI skips, or under CI=true fails (testenv.SkipUnlessCI).
func skipUnlessCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}
