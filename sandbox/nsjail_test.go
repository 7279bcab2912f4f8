package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fakeBinary(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindNsjailOrder(t *testing.T) {
	root := t.TempDir()
	explicit := fakeBinary(t, filepath.Join(root, "explicit", "nsjail"))
	fromEnv := fakeBinary(t, filepath.Join(root, "env", "nsjail"))
	install := filepath.Join(root, "install")
	beside := fakeBinary(t, filepath.Join(install, ".tools", "bin", "nsjail"))
	exe := fakeBinary(t, filepath.Join(install, "bin", "execgate"))
	repo := filepath.Join(root, "repo")
	inParent := fakeBinary(t, filepath.Join(repo, ".tools", "bin", "nsjail"))
	wd := filepath.Join(repo, "sandbox", "deep")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := fakeBinary(t, filepath.Join(root, "path", "nsjail"))
	nowhere := filepath.Join(root, "nowhere", "execgate")

	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvNsjail {
				return v
			}
			return ""
		}
	}
	exeAt := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	wdAt := func(p string) func() (string, error) { return func() (string, error) { return p, nil } }
	path := func(found bool) func(string) (string, error) {
		return func(string) (string, error) {
			if found {
				return onPath, nil
			}
			return "", errors.New("not found")
		}
	}
	tests := []struct {
		name string
		cfg  Config
		env  string
		exe  string
		wd   string
		path bool
		want string
	}{
		{"the config wins", Config{NsjailPath: explicit}, fromEnv, exe, wd, true, explicit},
		{"then EXECGATE_NSJAIL", Config{}, fromEnv, exe, wd, true, fromEnv},
		{"then .tools beside the binary's parent", Config{}, "", exe, wd, true, beside},
		{"then .tools in a parent of the working dir", Config{}, "", nowhere, wd, true, inParent},
		{"then PATH", Config{}, "", nowhere, root, true, onPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findNsjail(tt.cfg, env(tt.env), exeAt(tt.exe), wdAt(tt.wd), path(tt.path))
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFindNsjailFailures(t *testing.T) {
	root := t.TempDir()
	notExec := filepath.Join(root, "nsjail")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	none := func(string) string { return "" }
	noExe := func() (string, error) { return filepath.Join(root, "bin", "execgate"), nil }
	wd := func() (string, error) { return root, nil }
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	tests := []struct {
		name   string
		cfg    Config
		getenv func(string) string
		reason string
	}{
		{"a configured path that does not exist is an error, not a fallback", Config{NsjailPath: filepath.Join(root, "missing")}, none, "sandbox.nsjail_path"},
		{"a configured file that is not executable is an error", Config{NsjailPath: notExec}, none, "sandbox.nsjail_path"},
		{"a bad EXECGATE_NSJAIL is an error", Config{}, func(string) string { return "/nonexistent/nsjail" }, EnvNsjail},
		{"nothing anywhere", Config{}, none, "nsjail not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := findNsjail(tt.cfg, tt.getenv, noExe, wd, noPath)
			var u *UnavailableError
			if !errors.As(err, &u) {
				t.Fatalf("want *UnavailableError, got %v", err)
			}
			if !strings.Contains(u.Reason, tt.reason) || !strings.Contains(u.Hint, "scripts/setup.sh") {
				t.Errorf("reason %q hint %q", u.Reason, u.Hint)
			}
		})
	}
}

func TestNsjailVersionFromTheWheel(t *testing.T) {
	pkg := filepath.Join(t.TempDir(), "nsjail")
	bin := fakeBinary(t, filepath.Join(pkg, "bin", "nsjail"))
	if got := nsjailVersion(bin); got != "unknown" {
		t.Errorf("without a version file: %q", got)
	}
	if err := os.WriteFile(filepath.Join(pkg, "_nsjail_version.py"), []byte("__nsjail_version__: str = \"3.6\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := nsjailVersion(bin); got != "3.6" {
		t.Errorf("version %q, want 3.6", got)
	}
}
