package bench

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// The floor scripts under scripts/ back numbers in BENCHMARKS.md (the fork
// floor of level process, a Worker against a fresh Deno); each must still
// run and print every figure it names, with Debian's python3 as documented.
func TestFloorScriptsRunAndReportTheirFigures(t *testing.T) {
	root := testenv.RepoRoot(t)
	// script runs scripts/<name> the way BENCHMARKS.md does.
	script := func(name string, args ...string) ([]byte, error) {
		argv := append([]string{"-I", "-S", "-B", filepath.Join(root, "scripts", name)}, args...)
		return exec.Command("/usr/bin/python3", argv...).CombinedOutput()
	}
	// figure is the number re's group matches; positive unless it is a
	// difference (a Worker's CPU is the Deno's with Workers less without,
	// which one short round on a loaded host can make negative).
	figure := func(t *testing.T, out []byte, re string, difference bool) {
		t.Helper()
		m := regexp.MustCompile(re).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no %q in the output:\n%s", re, out)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil || (v <= 0 && !difference) {
			t.Fatalf("%q: %q is not a positive number:\n%s", re, m[1], out)
		}
	}
	t.Run("fork-floor.py", func(t *testing.T) {
		out, err := script("fork-floor.py", "20")
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		figure(t, out, `(?m)^run +child CPU ([0-9.]+) ms, [0-9]+ minor faults`, false)
		figure(t, out, `(?m)^run .* minor faults; parent CPU (-?[0-9.]+) ms`, true)
	})
	t.Run("deno-floor.py", func(t *testing.T) {
		deno := testenv.Deno(t)
		out, err := script("deno-floor.py", "--deno", deno, "--runs", "2", "--workers", "3", "--rounds", "1")
		if err != nil {
			t.Fatalf("%v:\n%s", err, out)
		}
		figure(t, out, `(?m)^fresh process per run: CPU p50 ([0-9.]+) ms`, false)
		// A Worker that failed to load or answer throws in the parent,
		// which fails the script above.
		figure(t, out, `(?m)^Worker per run \(round means\): CPU p50 (-?[0-9.]+) ms`, true)
	})
	t.Run("deno-floor.py refuses bad counts before running anything", func(t *testing.T) {
		out, err := script("deno-floor.py", "--runs", "0")
		if err == nil || !regexp.MustCompile(`--runs, --workers and --rounds must be at least 1`).Match(out) {
			t.Fatalf("err %v, output:\n%s", err, out)
		}
	})
}
