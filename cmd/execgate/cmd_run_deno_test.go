package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

func TestToolLanguageFollowsTheExtension(t *testing.T) {
	for _, tc := range []struct{ file, flag, want, err string }{
		{"tool.py", "", "python", ""},
		{"tool.js", "", "javascript", ""},
		{"tool.MJS", "", "javascript", ""},
		{"tool.ts", "", "typescript", ""},
		{"tool.txt", "typescript", "typescript", ""},
		{"tool.ts", "ruby", "", `--language: "ruby" is not one of python, javascript, typescript`},
	} {
		got, err := toolLanguage(tc.file, tc.flag)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("toolLanguage(%q, %q) = %q, %v", tc.file, tc.flag, got, err)
		}
	}
}

func TestRunCommandRunsJavaScriptAndTypeScript(t *testing.T) {
	testenv.Nsjail(t)
	testenv.Deno(t)
	state := t.TempDir()
	for _, d := range []string{filepath.Dir(state), state} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("EXECGATE_SANDBOX_CGROUP_PARENT", "execgate-cmdtest-js")
	t.Cleanup(func() {
		for _, c := range []string{"memory", "pids", "cpu", "unified"} {
			os.Remove(filepath.Join("/sys/fs/cgroup", c, "execgate-cmdtest-js"))
		}
	})
	t.Run("a .js tool", func(t *testing.T) {
		js := write("ok.js", "export function run(args, context) {\n  console.log('hello');\n  return {got: args};\n}\n")
		env, result, out := runJSON(t, js, "--args", `{"x": 1}`, "--state-dir", state)
		if env.Status != sandbox.StatusOK || result != `{"got":{"x":1}}` || env.Stdout != "hello\n" {
			t.Errorf("%s", out)
		}
	})
	t.Run("a .ts tool", func(t *testing.T) {
		ts := write("ok.ts", "export async function run(args: {n: number}): Promise<number> {\n  return args.n * 2;\n}\n")
		env, result, out := runJSON(t, ts, "--args", `{"n": 21}`, "--state-dir", state)
		if env.Status != sandbox.StatusOK || result != `42` {
			t.Errorf("%s", out)
		}
	})
	t.Run("a failing .ts tool prints the user's stack and exits 1", func(t *testing.T) {
		bad := write("bad.ts", "export function run(): never {\n  throw new Error('nope');\n}\n")
		out, err := execute(t, "run", bad, "--state-dir", state)
		var ec exitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitRunError {
			t.Fatalf("want exit %d, got %v\n%s", exitRunError, err, out)
		}
		if !strings.Contains(out, "Error: nope") || !strings.Contains(out, "tool.ts:2:9") {
			t.Errorf("output:\n%s", out)
		}
	})
	t.Run("a .js tool with a data: import is refused at the import, exit 1", func(t *testing.T) {
		imp := write("imp.js", "import x from \"data:text/javascript,export default 1\";\nexport function run() { return x }\n")
		out, err := execute(t, "run", imp, "--state-dir", state)
		var ec exitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitRunError {
			t.Fatalf("want exit %d, got %v\n%s", exitRunError, err, out)
		}
		if !strings.Contains(out, "InvalidSource") || !strings.Contains(out, `imports are not available to tools: "data:text/javascript,export default 1" at line 1, column 15`) {
			t.Errorf("output:\n%s", out)
		}
	})
}
