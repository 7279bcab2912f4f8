package sandbox_test

import (
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// runJSProc runs a JavaScript or TypeScript tool at level process for
// tenant "acme".
func runJSProc(t *testing.T, r *sandbox.Runner, lang, src string, mod func(*sandbox.Spec)) sandbox.Result {
	t.Helper()
	return runJS(t, r, lang, src, func(s *sandbox.Spec) {
		s.Isolation = sandbox.IsolationProcess
		if mod != nil {
			mod(s)
		}
	})
}

func TestJavaScriptProcessSmoke(t *testing.T) {
	r := newJSRunner(t, nil)
	res := runJSProc(t, r, sandbox.LanguageJavaScript, "export function run() { return {pid: Deno.pid, ppid: Deno.ppid} }\n", nil)
	wantOK(t, res, "")
	t.Logf("%s %+v", res.Result, res.Usage)
}
