package stubs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/toolbridge"
)

// awkwardTools are two tools a stub must survive: a schema with a
// multi-line description, a nullable type, an array and a property that is
// no identifier; and a name that starts with a digit and has a dash. The
// descriptions carry what would end the language's comment or string.
func awkwardTools(addDescription, weirdDescription string) []toolbridge.Tool {
	return []toolbridge.Tool{
		{Name: "math.add", Description: addDescription, InputSchema: map[string]any{
			"type": "object", "required": []any{"a"},
			"properties": map[string]any{
				"a":                 map[string]any{"type": "number", "description": "first\naddend"},
				"b":                 map[string]any{"type": []any{"null", "integer"}},
				"tags":              map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
				"not-an-identifier": map[string]any{"type": "string"},
			},
		}},
		{Name: "9weird.tool-name", Description: weirdDescription, InputSchema: nil},
	}
}

func TestPythonStubIsValidPythonForAwkwardTools(t *testing.T) {
	tools := awkwardTools("Add two numbers.\nSecond line.", `quotes """ and \ backslashes`)
	stub := Python(tools)
	for _, want := range []string{
		"class MathAddArgs(TypedDict):",
		"    a: float  # first",
		"    b: NotRequired[int]",
		"    tags: NotRequired[list[str]]",
		"class T9weirdToolNameArgs(TypedDict):",
		`def run(self, name: Literal["math.add"], args: MathAddArgs) -> Any: ...`,
		`async def run_async(self, name: Literal["9weird.tool-name"], args: T9weirdToolNameArgs) -> Any: ...`,
	} {
		if !strings.Contains(stub, want) {
			t.Errorf("the stub lacks %q:\n%s", want, stub)
		}
	}
	if strings.Contains(stub, "not-an-identifier") {
		t.Errorf("a property that is not an identifier became a field:\n%s", stub)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		testenv.SkipUnlessCI(t, "no python3 to parse the stub: %v", err)
	}
	cmd := exec.Command(py, "-I", "-c", "import ast, sys; ast.parse(sys.stdin.read())")
	cmd.Stdin = strings.NewReader(stub)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the stub does not parse: %v\n%s\n%s", err, out, stub)
	}
}

func TestTypeScriptStubTypeChecksAndTypesTheCalls(t *testing.T) {
	tools := awkwardTools("Add two numbers. */ not a comment end", `quotes " and \ backslashes`)
	stub := TypeScript(tools)
	for _, want := range []string{
		"export interface MathAddArgs {",
		"  a: number;",
		"  b?: number | null;",
		"  tags?: Array<string>;",
		`  "not-an-identifier"?: string;`,
		`  run(name: "math.add", args: MathAddArgs): Promise<unknown>;`,
		`  "9weird.tool-name"(args: T9weirdToolNameArgs): Promise<unknown>;`,
		"export declare class ToolDenied extends ToolBridgeError {",
	} {
		if !strings.Contains(stub, want) {
			t.Errorf("the stub lacks %q:\n%s", want, stub)
		}
	}
	// deno check (on the host, offline, nothing run): a use that fits the
	// stub passes, a wrong argument type fails.
	deno := testenv.Deno(t)
	dir := t.TempDir()
	use := `import type { Context } from "./stub.ts";
export async function run(_args: unknown, context: Context) {
  const found = await context.tools.search("add", { limit: 3 });
  try {
    return [found[0].name, await context.tools.run("math.add", { a: 1, b: null }), await context.tools["math.add"]({ a: 2 })];
  } catch (e) {
    if (e instanceof context.ToolDenied) return e.type;
    throw e;
  }
}
`
	check := func(src string) ([]byte, error) {
		if err := os.WriteFile(filepath.Join(dir, "stub.ts"), []byte(stub), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "use.ts"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(deno, "check", "--no-config", "--no-remote", "--no-npm", "--no-lock", "use.ts")
		cmd.Dir = dir
		cmd.Env = []string{"DENO_DIR=" + filepath.Join(dir, ".deno"), "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1", "HOME=" + dir}
		return cmd.CombinedOutput()
	}
	if out, err := check(use); err != nil {
		t.Fatalf("a use that fits the stub does not type-check: %v\n%s\n%s", err, out, stub)
	}
	if out, err := check(strings.Replace(use, "{ a: 2 }", `{ a: "two" }`, 1)); err == nil || !strings.Contains(string(out), "TS2322") {
		t.Errorf("a wrong argument type passed the check: %v\n%s", err, out)
	}
}
