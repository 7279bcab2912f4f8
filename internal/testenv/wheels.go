package testenv

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// Wheel is a pure-Python distribution for a local wheel directory: tests
// resolve against it with uv (--no-index --find-links DIR), never a public
// index.
type Wheel struct {
	Name, Version string
	Requires      []string // Requires-Dist entries, e.g. "beta==1.0"
	// Module is the body of <name>/__init__.py; empty: VERSION = "<version>".
	Module string
	// Pad adds a file of this many bytes (for size caps).
	Pad int
	// RequiresPython is its Requires-Python ("" : none).
	RequiresPython string
	// Tag is its wheel tag; "": py3-none-any. A tag naming an interpreter
	// and platform (cp313-cp313-manylinux_2_39_x86_64) installs only
	// where both fit; the wheel's content stays pure Python.
	Tag string
}

// WriteWheels writes ws as wheels (py3-none-any unless Tag says; a zip with the package,
// METADATA, WHEEL and RECORD) into dir and returns dir.
func WriteWheels(t testing.TB, dir string, ws ...Wheel) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		mod := strings.ReplaceAll(w.Name, "-", "_")
		dist := mod + "-" + w.Version
		body := w.Module
		if body == "" {
			body = fmt.Sprintf("VERSION = %q\n", w.Version)
		}
		meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", w.Name, w.Version)
		if w.RequiresPython != "" {
			meta += "Requires-Python: " + w.RequiresPython + "\n"
		}
		tag := w.Tag
		if tag == "" {
			tag = "py3-none-any"
		}
		for _, r := range w.Requires {
			meta += "Requires-Dist: " + r + "\n"
		}
		files := []struct{ name, data string }{
			{mod + "/__init__.py", body},
			{dist + ".dist-info/METADATA", meta},
			{dist + ".dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: execgate-tests\nRoot-Is-Purelib: true\nTag: " + tag + "\n"},
		}
		if w.Pad > 0 {
			files = append(files, struct{ name, data string }{mod + "/pad.bin", strings.Repeat("x", w.Pad)})
		}
		var record strings.Builder
		for _, f := range files {
			sum := sha256.Sum256([]byte(f.data))
			fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.data))
		}
		fmt.Fprintf(&record, "%s.dist-info/RECORD,,\n", dist)
		files = append(files, struct{ name, data string }{dist + ".dist-info/RECORD", record.String()})

		f, err := os.Create(filepath.Join(dir, dist+"-"+tag+".whl"))
		if err != nil {
			t.Fatal(err)
		}
		z := zip.NewWriter(f)
		for _, file := range files {
			fw, err := z.Create(file.name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fw.Write([]byte(file.data)); err != nil {
				t.Fatal(err)
			}
		}
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// UV returns the project's uv (.tools/bin/uv), skipping (failing under
// CI=true) when it is missing.
func UV(t testing.TB) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), ".tools", "bin", "uv")
	if _, err := exec.LookPath(p); err != nil {
		SkipUnlessCI(t, "uv not found at %s: %v (scripts/setup.sh)", p, err)
	}
	return p
}

// EnvConfig is a sandbox config for package environments that resolve only
// from a local wheel directory (returned too) holding alpha 1.0 (→
// beta==1.0), beta 1.0 and 2.0, gamma 0.3 (→ alpha) and huge 1.0 (3 MiB,
// for size caps), with a deps dir of its own and the shared test rootfs.
func EnvConfig(t testing.TB) (sandbox.Config, string) {
	t.Helper()
	wheels := WriteWheels(t, filepath.Join(t.TempDir(), "wheels"),
		Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
		Wheel{Name: "beta", Version: "1.0"},
		Wheel{Name: "beta", Version: "2.0"},
		Wheel{Name: "gamma", Version: "0.3", Requires: []string{"alpha>=1"}},
		Wheel{Name: "huge", Version: "1.0", Pad: 3 << 20},
	)
	return sandbox.Config{
		RootfsDir: Rootfs(t), WorkDir: t.TempDir(), DepsDir: filepath.Join(JailDir(t), "deps"),
		UVPath:       UV(t),
		PackageIndex: sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true},
	}, wheels
}
