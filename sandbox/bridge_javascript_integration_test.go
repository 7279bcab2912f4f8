package sandbox_test

import (
	"strings"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// The tool bridge from a Deno jail: requests as kind-3 stdout frames,
// answers on stdin, served by the same loop as Python's fd 5.
func TestBridgeFromJavaScriptMapsEveryErrorAndOverlapsCalls(t *testing.T) {
	r := newJSRunner(t, nil)
	b := &recordingBridge{}
	src := `
export async function run(args, context) {
  const found = await context.tools.search("add");
  const schema = await context.tools.describe("math.add");
  const total = await context.tools.run("math.add", { a: 2, b: 3 });
  const word = await context.tools["text.upper"]({ s: "hi" });
  const errors = [];
  for (const name of ["shell.exec", "fail.server", "broken"]) {
    try {
      await context.tools.run(name, {});
    } catch (e) {
      if (!(e instanceof execgate.ToolFailure)) throw e;
      errors.push([e.constructor.name, e.type, e.message]);
    }
  }
  const refused = [];
  for (const a of [{ pad: "x".repeat(2 << 20) }, { n: 1n }]) {
    try { await context.tools.run("math.add", a); } catch (e) { refused.push(e.type); }
  }
  const t0 = Date.now();
  const waited = await Promise.all([1, 2, 3, 4].map(() => context.tools.run("slow.wait", {})));
  return { found, props: Object.keys(schema.input_schema.properties).sort(), sum: total.sum, word, errors, refused,
           waited, fast: Date.now() - t0 < 700, after: (await context.tools.run("math.add", { a: 1, b: 1 })).sum };
}
`
	res := runJS(t, r, sandbox.LanguageJavaScript, src, func(s *sandbox.Spec) { s.Bridge = b })
	wantOK(t, res, `{"found":[{"name":"math.add","description":"Add two numbers"}],"props":["a","b"],"sum":5,"word":"HI",`+
		`"errors":[["ToolDenied","ToolDenied","tool shell.exec is not granted"],["ToolFailed","ToolFailed","upstream said no"],["ToolUnavailable","ToolUnavailable","the tool bridge could not answer"]],`+
		`"refused":["ToolDenied","ToolFailed"],"waited":["waited","waited","waited","waited"],"fast":true,"after":2}`)
	if got := strings.Join(b.called(), ","); got != "math.add,text.upper,shell.exec,fail.server,broken,slow.wait,slow.wait,slow.wait,slow.wait,math.add" {
		t.Errorf("calls reaching the bridge: %s", got)
	}
	if b.maxSeen.Load() < 2 {
		t.Errorf("at most %d calls were in flight at once; Promise.all should overlap them", b.maxSeen.Load())
	}
}
