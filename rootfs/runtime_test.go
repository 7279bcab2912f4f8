package rootfs_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/rootfs/debian"
)

// The runtime names are written three times: the lock (what can be built),
// platform.rego (what a run may name; policy tests compare it with
// limits.Runtimes) and limits.Runtimes. This keeps the lock in step.
func TestTheLockBuildsEveryRuntimeARunMayName(t *testing.T) {
	l := rootfs.DefaultLock()
	got := append(l.Names(), rootfs.HostRuntime)
	slices.Sort(got)
	want := slices.Clone(limits.Runtimes)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("lock runtimes + host = %v, limits.Runtimes = %v", got, want)
	}
	arch := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
	for _, r := range l.Runtimes {
		if len(r.Packages[arch]) == 0 {
			t.Errorf("runtime %s has no packages pinned for %s", r.Name, arch)
		}
	}
	// Encoding round-trips (the lock command rewrites the file with it).
	data, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("runtimes.lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != string(file) {
		t.Error("runtimes.lock.json is not as `execgate rootfs lock` writes it (re-run the lock command, or revert a hand edit)")
	}
}

// TestARuntimeManifestListsItsPinnedPackages: a runtime built from the
// lock records every pinned package (name, version, sha256) and where it
// came from, and its interpreter is the pinned one. Its tree holds the
// system libraries a manylinux wheel may link without bundling them
// (libstdc++, libgcc_s, libm, …: the builder's extraLibs), from the
// packages its lock pulls in, in a directory of its library path, so
// numpy, matplotlib and pillow load on every runtime as on the host's.
func TestARuntimeManifestListsItsPinnedPackages(t *testing.T) {
	for _, name := range rootfs.DefaultLock().Names() {
		t.Run(name, func(t *testing.T) {
			dir := testenv.Runtime(t, name)
			m, err := rootfs.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := rootfs.DefaultLock().Runtime(name)
			if err != nil {
				t.Fatal(err)
			}
			arch := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
			var want []jaillayout.Package
			pyVersion := ""
			for _, p := range rl.Packages[arch] {
				want = append(want, jaillayout.Package{Name: p.Name, Version: p.Version, SHA256: p.SHA256})
				if p.Name == "python"+rl.Python+"-minimal" {
					pyVersion = strings.SplitN(p.Version, "-", 2)[0]
				}
			}
			if !slices.Equal(m.Packages, want) {
				t.Errorf("manifest packages = %v\nwant the lock's %v", m.Packages, want)
			}
			if m.Runtime != name || m.Distribution != rl.Distribution || m.PythonVersion != pyVersion || m.PythonPath != "" {
				t.Errorf("manifest: runtime %q distribution %q python %q (host python %q); want %s, %s, %s and no host interpreter",
					m.Runtime, m.Distribution, m.PythonVersion, m.PythonPath, name, rl.Distribution, pyVersion)
			}
			if m.Loader == "" || len(m.LibraryPath) == 0 || !strings.Contains(m.Platform, "manylinux_2_") || m.Glibc == "" || m.CACerts == 0 {
				t.Errorf("manifest: loader %q library path %v platform %q glibc %q CA %d", m.Loader, m.LibraryPath, m.Platform, m.Glibc, m.CACerts)
			}
			for _, lib := range rootfs.ExtraLibs {
				if !slices.ContainsFunc(m.LibraryPath, func(d string) bool {
					fi, err := os.Stat(filepath.Join(dir, d, lib))
					return err == nil && fi.Mode().IsRegular()
				}) {
					t.Errorf("%s is in none of %v", lib, m.LibraryPath)
				}
			}
		})
	}
}

// TestBothRuntimesVerifyInARealJail: each runtime's tree passes Verify:
// its own interpreter (with its own C library) starts in the jail as the
// tool's user, loads a CA store and imports every extension module.
func TestBothRuntimesVerifyInARealJail(t *testing.T) {
	for _, name := range rootfs.DefaultLock().Names() {
		t.Run(name, func(t *testing.T) {
			cfg := testenv.SandboxConfig(t)
			cfg.RootfsDir = testenv.Runtime(t, name)
			r := verifyInJail(t, cfg)
			if r.Jail == nil || !strings.HasPrefix(r.Jail.PythonVersion, strings.TrimPrefix(name, "python")) || r.Jail.CACerts == 0 {
				t.Fatalf("jail facts %+v", r.Jail)
			}
		})
	}
}

// TestABuildRefusesATamperedPackage: a .deb whose bytes are not the ones
// the lock pins is refused with an error naming the package and both
// sums; nothing is built or cached.
func TestABuildRefusesATamperedPackage(t *testing.T) {
	good := []byte("the .deb the lock pins")
	sum := sha256.Sum256(good)
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.Write([]byte("the .deb the lock pinz")) // the same length as the pinned one, other bytes
	}))
	defer srv.Close()
	lock, err := rootfs.ParseLock([]byte(`{"format": 1, "runtimes": [{
		"name": "python3.99", "python": "3.99", "distribution": "debian test",
		"sources": [{"url": "http://deb.debian.org/debian", "suite": "test", "keyrings": []}],
		"roots": ["libfoo"], "exclude": [], "resolved_at": "",
		"packages": {"` + map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH] + `": [
			{"name": "libfoo", "version": "1.0-1", "suite": "test", "filename": "pool/main/libf/libfoo_1.0-1_all.deb", "size": 22, "sha256": "` + hex.EncodeToString(sum[:]) + `"}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir := filepath.Join(base, "python3.99")
	_, err = rootfs.Build(context.Background(), rootfs.Options{Dir: dir, Runtime: "python3.99", Lock: lock, DebianMirror: srv.URL, DebCache: filepath.Join(base, "debs")})
	if !errors.Is(err, debian.ErrChecksum) {
		t.Fatalf("Build = %v, want a checksum error", err)
	}
	for _, want := range []string{"libfoo", hex.EncodeToString(sum[:]), "python3.99"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if served != 1 {
		t.Errorf("the mirror served %d times, want 1 (a wrong file is not fetched again elsewhere)", served)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a tree was left at %s: %v", dir, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(base, "debs")); len(entries) != 0 {
		t.Errorf("the tampered .deb was cached: %v", entries)
	}
}
