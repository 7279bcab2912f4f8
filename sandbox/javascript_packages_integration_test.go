package sandbox_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// npmEnvironment resolves reqs against a loopback registry serving
// testenv.NPMFixtures and installs them into a deps dir the jail can reach; it
// returns the runner config's deps dir and the environment's directory.
func npmEnvironment(t *testing.T, reqs ...string) (depsDir, dir string) {
	t.Helper()
	reg := testenv.StartNPMRegistry(t, testenv.NPMFixtures()...)
	cfg := sandbox.Config{RootfsDir: rootfsDir(t), DepsDir: filepath.Join(testenv.JailDir(t), "deps"), NPMRegistry: sandbox.NPMRegistry{URL: reg.URL}}
	envs := environments.NewNPM(cfg, nil)
	env, failure, err := envs.ResolveNPM(context.Background(), reqs)
	if err != nil || failure != nil {
		t.Fatalf("ResolveNPM: %v %+v", err, failure)
	}
	dir, _, failure, err = envs.Prepare(context.Background(), env)
	if err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	return cfg.DepsDir, dir
}

// A JavaScript or TypeScript tool imports its run's npm packages by bare
// name (CommonJS or ES modules, scoped, subpaths), with their own
// dependencies and Node builtins inside them; what a package writes with
// process.stdout is the tool's stdout; process.env is empty.
func TestJavaScriptImportsItsNPMPackages(t *testing.T) {
	depsDir, dir := npmEnvironment(t, "shout@1.2.0", "@tools/math@0.3.0", "scripted@1.0.0")
	r := newJSRunner(t, func(c *sandbox.Config) { c.DepsDir = depsDir })
	for _, tc := range []struct{ name, lang, src string }{
		{"javascript", sandbox.LanguageJavaScript, `
import shout from "shout";
import { add } from "@tools/math";
import { mul } from "@tools/math/lib/mul.js";
import scripted from "scripted";
export function run(args) {
  return {shout: shout(args.word), sum: add(2, 3), product: mul(4, 5), env: shout.env(), said: shout.say("hi"), scripted};
}
`},
		{"typescript", sandbox.LanguageTypeScript, `
import shout from "shout";
import { add } from "@tools/math";
export async function run(args: {word: string}): Promise<Record<string, unknown>> {
  const { mul } = await import("@tools/math/lib/mul.js");
  const scripted = (await import("scripted")).default;
  return {shout: shout(args.word), sum: add(2, 3), product: mul(4, 5), env: shout.env(), said: shout.say("hi"), scripted};
}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, tc.lang, tc.src, func(s *sandbox.Spec) {
				s.Deps = dir
				s.Args = json.RawMessage(`{"word": "hey"}`)
			})
			wantOK(t, res, `{"shout": "HEY!", "sum": 5, "product": 20, "env": "0:undefined", "said": "hi", "scripted": "no script ran"}`)
			if res.Stdout != "said hi\n" {
				t.Errorf("stdout %q, want the package's process.stdout write", res.Stdout)
			}
		})
	}
	for _, f := range []string{"/tmp/execgate-postinstall-ran", "/tmp/execgate-preinstall-ran"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s exists: an install script ran", f)
		}
	}
}

// Only the requested packages are importable: a dependency of one (upper),
// a package of no environment, node: and npm: specifiers are refused
// before the jail. Inside it, the import map refuses bare names it does
// not map and node:; an npm: specifier (which an import map cannot block:
// "npm:" is no prefix key) finds only the environment's own locked
// packages, as Deno's cache holds nothing else and --cached-only keeps it
// off the registry; the package files are not readable as files.
func TestJavaScriptPackagesOpenNothingElse(t *testing.T) {
	depsDir, dir := npmEnvironment(t, "shout@1.2.0")
	r := newJSRunner(t, func(c *sandbox.Config) { c.DepsDir = depsDir })
	withDeps := func(s *sandbox.Spec) { s.Deps = dir }
	for _, tc := range []struct{ name, src, want string }{
		{"a dependency that was not requested", `import u from "upper"; export function run() { return u("x") }`, `"upper" is not an import this run may make (its packages: shout`},
		{"another package", `import x from "left-pad"; export function run() { return x }`, `"left-pad" is not an import`},
		{"npm: directly", `import x from "npm:shout@1.2.0"; export function run() { return x }`, `"npm:shout@1.2.0" is not an import`},
		{"a file of the environment", `import x from "file:///opt/execgate/deps/deno/npm/registry.npmjs.org/upper/2.1.0/index.js"; export function run() { return x }`, "is not an import"},
	} {
		t.Run("before the jail: "+tc.name, func(t *testing.T) {
			wantErr(t, runJS(t, r, sandbox.LanguageJavaScript, tc.src, withDeps), sandbox.ErrInvalidSource, tc.want)
		})
	}
	unchecked := newJSRunner(t, func(c *sandbox.Config) { c.DepsDir = depsDir }, sandbox.WithoutImportCheck())
	tries := map[string]string{
		"a dependency that was not requested":       `return (await import("upper")).default("x")`,
		"npm: of a package outside the environment": `return (await import("npm:left-pad@1.3.0")).default("x", 3)`,
		"a file of the environment":                 `return (await import("file:///opt/execgate/deps/deno/npm/registry.npmjs.org/upper/2.1.0/index.js")).default("x")`,
		"node:fs":                                   `return (await import("node:fs")).readFileSync("/etc/passwd", "utf8")`,
		"read a package file":                       `return Deno.readTextFileSync("/opt/execgate/deps/import_map.json")`,
		"read /etc/passwd":                          `return Deno.readTextFileSync("/etc/passwd")`,
		"Deno.env":                                  `return Deno.env.get("PATH")`,
	}
	var b strings.Builder
	for name, body := range tries {
		b.WriteString("    " + jsonString(name) + ": async () => { " + body + " },\n")
	}
	src := "export async function run() {\n  const out = {};\n  const tries = {\n" + b.String() + "  };\n" +
		"  for (const [k, f] of Object.entries(tries)) { try { out[k] = \"ok:\" + String(await f()).slice(0, 100) } catch (e) { out[k] = e.name + \": \" + e.message.split(\"\\n\")[0] } }\n  return out;\n}\n"
	res := runJS(t, unchecked, sandbox.LanguageJavaScript, src, withDeps)
	wantOK(t, res, "")
	var got map[string]string
	if err := json.Unmarshal(res.Result, &got); err != nil {
		t.Fatal(err)
	}
	for name, saw := range got {
		t.Logf("%s → %s", name, saw)
		if strings.HasPrefix(saw, "ok:") {
			t.Errorf("%s: the tool succeeded (%s)", name, saw)
		}
	}
	if len(got) != len(tries) {
		t.Errorf("%d attempts reported, want %d", len(got), len(tries))
	}
}

// A run with packages keeps the run's files, stdin and artifacts: Node's
// process.stdin, which packages use and which a run with packages keeps,
// reads the request's stdin (sharing its position with Deno.stdin), never
// fd 0, which carries the harness's frames (reading that would wait for
// bridge answers until the deadline); the packages' files stay unreadable.
func TestJavaScriptPackagesKeepFilesStdinAndArtifacts(t *testing.T) {
	depsDir, dir := npmEnvironment(t, "shout@1.2.0")
	r := newJSRunner(t, func(c *sandbox.Config) { c.DepsDir = depsDir })
	src := `import shout from "shout";
export async function run(args, context) {
  const buf = new Uint8Array(5);
  const n = Deno.stdin.readSync(buf);
  let rest = "";
  for await (const c of process.stdin) rest += new TextDecoder().decode(c);
  context.artifacts.save("loud.txt", shout(Deno.readTextFileSync("in.txt")));
  let pkg;
  try { Deno.readTextFileSync("/opt/execgate/deps/import_map.json"); pkg = "allowed" } catch (e) { pkg = e.name }
  return {head: new TextDecoder().decode(buf.subarray(0, n ?? 0)), rest, pkg};
}
`
	res := runJS(t, r, sandbox.LanguageJavaScript, src, func(s *sandbox.Spec) {
		s.Deps = dir
		s.Stdin = "from stdin"
		s.Files = []sandbox.File{{Path: "in.txt", Content: []byte("quiet")}}
	})
	wantOK(t, res, `{"head": "from ", "rest": "stdin", "pkg": "NotCapable"}`)
	checkArtifacts(t, res, []sandbox.Artifact{{Name: "loud.txt", MIME: "text/plain", Data: []byte("QUIET!")}})
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Mode validate type-checks against the environment's packages; a warm
// jail of the environment serves a run; an environment of the other
// language is refused.
func TestJavaScriptPackagesValidateWarmAndMismatch(t *testing.T) {
	depsDir, dir := npmEnvironment(t, "@tools/math@0.3.0")
	r := newJSRunner(t, func(c *sandbox.Config) { c.DepsDir = depsDir; c.WarmPool = 1 })
	src := "import { add } from \"@tools/math\";\nexport function run(args: {a: number}): number { return add(args.a, 1) }\n"
	t.Run("validate", func(t *testing.T) {
		// deno check costs about 2.3 s of CPU with or without packages
		// (measured in a jail on this VM): the limits of the other
		// validate tests.
		res := runJS(t, r, sandbox.LanguageTypeScript, src, func(s *sandbox.Spec) {
			s.Deps = dir
			s.Mode = sandbox.ModeValidate
			s.Limits = sandbox.Limits{TimeoutMS: 20000, CPUMS: 20000}.Or(limits.Default)
		})
		wantOK(t, res, `{"valid": true, "errors": []}`)
	})
	t.Run("warm", func(t *testing.T) {
		spec := sandbox.Spec{ExecutionID: "js-warm-deps", TenantID: "acme", Language: sandbox.LanguageTypeScript, Source: src,
			Args: json.RawMessage(`{"a": 41}`), Deps: dir, Limits: limits.Default}
		if n, err := r.Warm(context.Background(), spec, 1); err != nil || n != 1 {
			t.Fatalf("Warm = %d, %v", n, err)
		}
		waitWarmEnv(t, r, spec, filepath.Base(dir), 1)
		hits := sandbox.WarmHits(r)
		wantOK(t, run(t, r, spec), "42")
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatal("the run with packages was not served warm")
		}
	})
	t.Run("a Python run with a JavaScript environment", func(t *testing.T) {
		res := run(t, r, sandbox.Spec{Source: "def run(a, c):\n    return 1\n", Deps: dir, Limits: limits.Default})
		wantErr(t, res, sandbox.ErrInvalidInput, "is a JavaScript package environment, not a Python one")
	})
	t.Run("a JavaScript run with a Python environment", func(t *testing.T) {
		py := filepath.Join(depsDir, "0123456789abcdef")
		if err := os.MkdirAll(py, 0o755); err != nil {
			t.Fatal(err)
		}
		res := runJS(t, r, sandbox.LanguageJavaScript, "export function run() { return 1 }", func(s *sandbox.Spec) { s.Deps = py })
		wantErr(t, res, sandbox.ErrInvalidInput, "is not a JavaScript package environment")
	})
}
