package rootfs_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/rootfs/jailverify"
	"github.com/execgate/execgate/sandbox"
)

// verifyInJail verifies cfg's rootfs in a real jail, failing the test
// with the report when it does not pass.
func verifyInJail(t *testing.T, cfg sandbox.Config) *rootfs.Report {
	t.Helper()
	r, err := rootfs.Verify(context.Background(), cfg.RootfsDir, jailverify.Opener(cfg))
	if err != nil {
		var b strings.Builder
		if r != nil {
			r.Print(&b)
		}
		t.Fatalf("Verify: %v\n%s", err, b.String())
	}
	return r
}

func TestVerifyPassesInARealJail(t *testing.T) {
	r := verifyInJail(t, testenv.SandboxConfig(t))
	if r.Jail == nil {
		t.Fatal("Verify passed without a jailed run")
	}
	if r.Jail.CACerts == 0 || r.Jail.CACerts != r.Manifest.CACerts {
		t.Errorf("CA certificates in the jail = %d, manifest %d", r.Jail.CACerts, r.Manifest.CACerts)
	}
	if r.Jail.UID != jaillayout.ToolUID || r.Jail.PythonVersion != r.Manifest.PythonVersion {
		t.Errorf("jail facts = %+v", r.Jail)
	}
	if len(r.Jail.ImportErrors) > 0 || len(r.Jail.NotPrecompiled) > 0 || len(r.Jail.Setid) > 0 {
		t.Errorf("jail facts = %+v", r.Jail)
	}
}

// A rootfs missing a shared library builds a jail whose imports fail: the
// jail checks can fail, and say which module broke.
func TestVerifyInAJailNamesTheModuleAMissingLibraryBreaks(t *testing.T) {
	cfg := testenv.SandboxConfig(t)
	dir := filepath.Join(testenv.JailDir(t), "rootfs")
	if out, err := exec.Command("cp", "-a", cfg.RootfsDir, dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the rootfs: %v: %s", err, out)
	}
	libs, _ := filepath.Glob(filepath.Join(dir, "usr/lib/*/libffi.so.*"))
	if len(libs) == 0 {
		t.Skip("this host's interpreter does not link libffi")
	}
	for _, l := range libs {
		if err := os.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	cfg.RootfsDir = dir
	r, err := rootfs.Verify(context.Background(), dir, jailverify.Opener(cfg))
	if !errors.Is(err, rootfs.ErrVerify) {
		t.Fatalf("Verify = %v, want ErrVerify", err)
	}
	var imports *rootfs.Check
	for i, c := range r.Checks {
		if c.Name == "imports in jail" {
			imports = &r.Checks[i]
		}
	}
	if imports == nil || imports.OK || !strings.Contains(imports.Detail, "_ctypes") {
		t.Errorf("imports check = %+v, want a failure naming _ctypes; report: %+v", imports, r.Checks)
	}
	if r.Jail == nil || r.Jail.CACerts == 0 {
		t.Errorf("the rest of the jail run should still report: %+v", r.Jail)
	}
}
