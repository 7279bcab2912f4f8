package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
	m := &Manifest{DenoStamp: stamp(a)}
	if why := denoStale(Options{Dir: tree, DenoPath: b}, m); why != "" {
		t.Errorf("checkout B would rebuild checkout A's rootfs: %s", why)
	}
	if why := denoStale(Options{Dir: tree, DenoPath: other}, m); why == "" {
		t.Error("another Deno binary does not make the rootfs stale")
	}
}
