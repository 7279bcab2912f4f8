package environments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// fakeUV writes a stand-in for uv that records each call in a file, finds
// --target, and then runs body (sh). It tests the installer's own logic
// (dedup, atomic placement, error reporting); the real uv is exercised by
// the integration tests.
func fakeUV(t *testing.T, body string) (path, calls string) {
	t.Helper()
	dir := t.TempDir()
	calls = filepath.Join(dir, "calls")
	path = filepath.Join(dir, "uv")
	script := fmt.Sprintf(`#!/bin/sh
echo "$*" >> %q
target=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--target" ]; then target="$2"; shift; fi
  shift
done
%s
`, calls, body)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, calls
}

func countCalls(t *testing.T, calls string) int {
	t.Helper()
	data, err := os.ReadFile(calls)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

func newTestInstaller(t *testing.T, uv string, timeout time.Duration) *depsInstaller {
	t.Helper()
	base := t.TempDir()
	// The jail's uid must be able to reach the sets: t.TempDir's parent
	// is 0700.
	for _, p := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "deps")
	return &depsInstaller{
		dir: dir, python: "/usr/bin/python3", pyVersion: "3.11.2", timeout: timeout,
		check:    func() error { return nil },
		findUV:   func() (string, error) { return uv, nil },
		getenv:   func(string) string { return "" },
		inflight: map[string]*depsCall{},
	}
}

func TestDepsInstallerInstallsEachSetOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		// The deps dir must be searchable by the jail's uid; as another user
		// t.TempDir's parent is not.
		t.Skip("needs root, like the jail it prepares for")
	}
	uv, calls := fakeUV(t, `sleep 0.3; mkdir -p "$target/pkg"; echo 'x = 1' > "$target/pkg/__init__.py"; touch "$target/.lock"`)
	d := newTestInstaller(t, uv, 10*time.Second)
	pins := []string{"pkg==1.0"}
	var wg sync.WaitGroup
	dirs := make([]string, 5)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, failure, err := d.ensure(context.Background(), pins)
			if err != nil || failure != nil {
				t.Errorf("ensure: %v %+v", err, failure)
			}
			dirs[i] = dir
		}()
	}
	wg.Wait()
	if n := countCalls(t, calls); n != 1 {
		t.Errorf("uv ran %d times for one set, want once", n)
	}
	want := filepath.Join(d.dir, depsKey("3.11.2", pins))
	for _, got := range dirs {
		if got != want {
			t.Errorf("dir %q, want %q", got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(want, "pkg", "__init__.py")); err != nil {
		t.Errorf("the install is not in place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(want, ".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uv's lock file was left in the set: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(want, "pkg", "__init__.py")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("installed file: %v %v, want mode 0644", fi, err)
	}
	// A later run finds it without calling uv.
	if dir, _, err := d.ensure(context.Background(), pins); err != nil || dir != want || countCalls(t, calls) != 1 {
		t.Errorf("second ensure: %q %v, %d calls", dir, err, countCalls(t, calls))
	}
}

func TestDepsInstallerReportsFailures(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, like the jail it prepares for")
	}
	tests := []struct {
		name    string
		body    string
		timeout time.Duration
		msg     string // substring of the message
		tb      string // substring of the traceback (installer output)
	}{
		{"uv's failure carries its output", `echo "error: nothing named pkg" >&2; mkdir -p "$target/half"; exit 1`, 10 * time.Second, "uv exited with status 1", "nothing named pkg"},
		{"a hung install times out", `echo "fetching"; sleep 30`, 300 * time.Millisecond, "timed out", "fetching"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uv, _ := fakeUV(t, tt.body)
			d := newTestInstaller(t, uv, tt.timeout)
			start := time.Now()
			dir, failure, err := d.ensure(context.Background(), []string{"pkg==1.0"})
			if err != nil || dir != "" || failure == nil {
				t.Fatalf("got %q %+v %v, want a DependencyError", dir, failure, err)
			}
			if failure.Type != sandbox.ErrDependencyError || !strings.Contains(failure.Message, tt.msg) || !strings.Contains(failure.Traceback, tt.tb) {
				t.Errorf("failure %+v", failure)
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			entries, _ := os.ReadDir(d.dir)
			for _, e := range entries {
				if e.IsDir() && e.Name() != ".cache" {
					t.Errorf("a failed install left %s behind", e.Name())
				}
			}
		})
	}
}

func TestDepsInstallerWithoutUVIsUnavailable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, like the jail it prepares for")
	}
	d := newTestInstaller(t, "", time.Second)
	d.findUV = func() (string, error) { return sandbox.FindUV(sandbox.Config{UVPath: "/nonexistent/uv"}) }
	_, _, err := d.ensure(context.Background(), []string{"pkg==1.0"})
	var u *sandbox.UnavailableError
	if !errors.As(err, &u) || !strings.Contains(u.Hint, "uv") {
		t.Fatalf("got %v, want an *UnavailableError pointing at uv", err)
	}
}
