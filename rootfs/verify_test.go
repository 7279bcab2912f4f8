package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/jaillayout"
)

// failedCheck returns the named check if it failed.
func failedCheck(r *Report, name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name && !c.OK {
			return c, true
		}
	}
	return Check{}, false
}

func TestVerifyHostChecksCatchTampering(t *testing.T) {
	if _, err := os.Stat(DefaultPython); err != nil {
		t.Skipf("host interpreter %s missing: %v", DefaultPython, err)
	}
	parent := t.TempDir()
	for _, p := range []string{filepath.Dir(parent), parent} { // t.TempDir's are 0700
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(parent, "rootfs")
	m, err := Build(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	clean := &Report{Dir: dir}
	verifyHost(clean, m)
	if !clean.OK() {
		t.Fatalf("fresh tree fails host checks: %+v", clean.Failed())
	}
	osPy := filepath.Join(dir, m.Stdlib, "os.py")
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T) (undo func())
		checks []string // checks that must fail
		detail string   // text the first failing check must show
	}{
		{
			name: "a changed stdlib file",
			tamper: func(t *testing.T) func() {
				orig, err := os.ReadFile(osPy)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(osPy, append(append([]byte{}, orig...), "\nimport evil\n"...), 0o644); err != nil {
					t.Fatal(err)
				}
				return func() { os.WriteFile(osPy, orig, 0o644) }
			},
			checks: []string{"content"},
			detail: "tree changed",
		},
		{
			name: "a setuid file",
			tamper: func(t *testing.T) func() {
				p := filepath.Join(dir, jaillayout.PythonPath)
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, fi.Mode().Perm()|os.ModeSetuid); err != nil {
					t.Fatal(err)
				}
				return func() { os.Chmod(p, fi.Mode().Perm()) }
			},
			checks: []string{"setuid/setgid files", "content"},
			detail: jaillayout.PythonPath,
		},
		{
			name: "a world-writable directory",
			tamper: func(t *testing.T) func() {
				p := filepath.Join(dir, "etc")
				if err := os.Chmod(p, 0o777); err != nil {
					t.Fatal(err)
				}
				return func() { os.Chmod(p, 0o755) }
			},
			checks: []string{"writable by group/others", "content"},
			detail: "/etc",
		},
		{
			name: "a symlink to a host file",
			tamper: func(t *testing.T) func() {
				p := filepath.Join(dir, "etc", "shadow")
				if err := os.Symlink("/etc/shadow", p); err != nil {
					t.Fatal(err)
				}
				return func() { os.Remove(p) }
			},
			checks: []string{"symlinks leaving the tree", "content"},
			detail: "/etc/shadow -> /etc/shadow",
		},
		{
			name: "a rootfs directory the jail cannot traverse",
			tamper: func(t *testing.T) func() {
				p := dir
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o700); err != nil {
					t.Fatal(err)
				}
				return func() { os.Chmod(p, fi.Mode().Perm()) }
			},
			checks: []string{"reachable by the jail"},
			detail: "not searchable by others",
		},
		{
			name: "an emptied CA bundle",
			tamper: func(t *testing.T) func() {
				p := filepath.Join(dir, jaillayout.CABundlePath)
				orig, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				return func() { os.WriteFile(p, orig, 0o644) }
			},
			checks: []string{"CA bundle", "content"},
			detail: "0 certificates",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			undo := tc.tamper(t)
			defer undo()
			r := &Report{Dir: dir}
			verifyHost(r, m)
			for i, name := range tc.checks {
				c, failed := failedCheck(r, name)
				if !failed {
					t.Errorf("check %q passed on a tree with %s; report: %+v", name, tc.name, r.Checks)
					continue
				}
				if i == 0 && !strings.Contains(c.Detail, tc.detail) {
					t.Errorf("check %q detail %q does not show %q", name, c.Detail, tc.detail)
				}
			}
			if err := r.err(nil); err == nil || !strings.Contains(err.Error(), tc.checks[0]) {
				t.Errorf("report error = %v, want ErrVerify naming %q", err, tc.checks[0])
			}
		})
	}
}

func TestVerifyWithoutManifestFailsWithAHint(t *testing.T) {
	dir := t.TempDir()
	noJail := func(string) (Jail, error) {
		t.Fatal("Verify opened a jail on a tree without a manifest")
		return nil, nil
	}
	r, err := Verify(context.Background(), dir, noJail)
	if err == nil {
		t.Fatal("Verify of an empty dir succeeded")
	}
	c, failed := failedCheck(r, "manifest")
	if !failed || !strings.Contains(c.Hint, "execgate rootfs build") {
		t.Errorf("manifest check = %+v, want a failure with a build hint", c)
	}
	if len(r.Checks) != 1 {
		t.Errorf("Verify went on without a manifest: %+v", r.Checks)
	}
}
