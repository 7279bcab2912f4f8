package gateway

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/toolbridge"
)

func TestPythonStubIsValidPythonForAwkwardTools(t *testing.T) {
	tools := []toolbridge.Tool{
		{Name: "math.add", Description: "Add two numbers.\nSecond line.", InputSchema: map[string]any{
			"type": "object", "required": []any{"a"},
			"properties": map[string]any{
				"a":                 map[string]any{"type": "number", "description": "first\naddend"},
				"b":                 map[string]any{"type": []any{"null", "integer"}},
				"tags":              map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
				"not-an-identifier": map[string]any{"type": "string"},
			},
		}},
		{Name: "9weird.tool-name", Description: `quotes """ and \ backslashes`, InputSchema: nil},
	}
	stub := PythonStub(tools)
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
