package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// A JavaScript profile config as sandbox renders it (the parts the bench reads).
const jsProfile = `name: "execgate"
envar: "PATH=/usr/local/bin:/usr/bin:/bin"
envar: "DENO_DIR=/opt/execgate/deno-cache"
envar: "NO_COLOR=1"
exec_bin {
  path: "/usr/bin/deno"
  arg: "run"
  arg: "--allow-read=/workspace,/run/execgate/secrets"
  arg: "--no-remote"
  arg: "--import-map=/opt/execgate/harness/import_map.json"
  arg: "--v8-flags=--max-old-space-size=208,--disallow-code-generation-from-strings"
  arg: "/opt/execgate/harness/execgate_harness.js"
}
`

func writeProfile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "js.cfg")
	if err := os.WriteFile(p, []byte(jsProfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDenoExecReadsTheProfilesArgsAndEnvironment(t *testing.T) {
	args, env := denoExec(jsProfile)
	want := []string{"run", "--allow-read=/workspace,/run/execgate/secrets", "--no-remote", "--import-map=/opt/execgate/harness/import_map.json",
		"--v8-flags=--max-old-space-size=208,--disallow-code-generation-from-strings", "/opt/execgate/harness/execgate_harness.js"}
	if !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}
	if !slices.Equal(env, []string{"PATH=/usr/local/bin:/usr/bin:/bin", "DENO_DIR=/opt/execgate/deno-cache", "NO_COLOR=1"}) {
		t.Errorf("env %q", env)
	}
}

func TestTheEmptyModuleRowRunsTheJailsDenoWithoutTheHarness(t *testing.T) {
	cfg := writeProfile(t)
	argv, err := withConfig([]string{"nsjail", "--config", cfg, "--user", "1"}, denoEmptyConfig)
	if err != nil {
		t.Fatal(err)
	}
	if argv[2] == cfg || argv[0] != "nsjail" || argv[4] != "1" {
		t.Fatalf("argv %q: only the config may change", argv)
	}
	b, err := os.ReadFile(argv[2])
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if strings.Contains(got, "execgate_harness.js") || !strings.Contains(got, `arg: "data:text/javascript,"`) {
		t.Errorf("the copied profile still runs the harness:\n%s", got)
	}
	if strings.Replace(got, `arg: "data:text/javascript,"`, `arg: "/opt/execgate/harness/execgate_harness.js"`, 1) != jsProfile {
		t.Errorf("the copied profile differs in more than the module:\n%s", got)
	}
	if _, err := denoEmptyConfig(filepath.Join(t.TempDir(), "missing.cfg")); err == nil {
		t.Error("a missing profile was copied")
	}
	py := filepath.Join(t.TempDir(), "py.cfg")
	if err := os.WriteFile(py, []byte(`exec_bin { path: "/usr/bin/python3" }`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := denoEmptyConfig(py); err == nil || !strings.Contains(err.Error(), "execgate_harness.js") {
		t.Errorf("a profile without the harness: %v, want an error naming it", err)
	}
}

func TestBareDenoRunsAnEmptyModuleWithTheJailsFlags(t *testing.T) {
	run, err := bareDeno("", []string{"nsjail", "--config", writeProfile(t)})
	if err != nil {
		testenv.SkipUnlessCI(t, "no host deno: %v", err)
	}
	defer os.RemoveAll(run.dir)
	argv := run.spec.argv
	module := filepath.Join(run.dir, "empty.js")
	if argv[len(argv)-1] != module || !slices.Contains(argv, "--no-remote") || !slices.Contains(argv, "--v8-flags=--max-old-space-size=208,--disallow-code-generation-from-strings") {
		t.Errorf("argv %q: want the jail's flags on %s", argv, module)
	}
	for _, a := range argv {
		if strings.HasPrefix(a, "--import-map=") || strings.Contains(a, "execgate_harness.js") {
			t.Errorf("argv %q keeps %s", argv, a)
		}
	}
	if !slices.Contains(run.spec.env, "DENO_DIR="+filepath.Join(run.dir, "deno-dir")) || !slices.Contains(run.spec.env, "NO_COLOR=1") {
		t.Errorf("env %q: want the jail's, DENO_DIR in %s", run.spec.env, run.dir)
	}
}
