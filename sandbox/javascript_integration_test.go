package sandbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// newJSRunner is a runner over a rootfs with Deno. Under CI=true a host
// without root, nsjail or Deno fails these tests instead of skipping them.
func newJSRunner(t *testing.T, mod func(*sandbox.Config)) *sandbox.Runner {
	t.Helper()
	testenv.Nsjail(t)
	testenv.Deno(t)
	return newRunner(t, mod)
}

func runJS(t *testing.T, r *sandbox.Runner, lang, src string, mod func(*sandbox.Spec)) sandbox.Result {
	t.Helper()
	spec := sandbox.Spec{ExecutionID: "js-test", TenantID: "acme", Language: lang, Source: src}
	if mod != nil {
		mod(&spec)
	}
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, detail(err))
	}
	return res
}

func wantOK(t *testing.T, res sandbox.Result, result string) {
	t.Helper()
	if res.Status != sandbox.StatusOK {
		t.Fatalf("status %s, error %+v\nstdout: %q\nstderr: %q\nlog: %s", res.Status, res.Error, res.Stdout, res.Stderr, strings.Join(res.NsjailLog, "\n"))
	}
	if result != "" && !jsonEqual(t, res.Result, result) {
		t.Fatalf("result %s, want %s", res.Result, result)
	}
}

func wantErr(t *testing.T, res sandbox.Result, typ, msgPart string) {
	t.Helper()
	if res.ErrorType() != typ {
		t.Fatalf("error type %q (%+v), want %s\nresult %s\nstdout: %q\nstderr: %q\nlog: %s", res.ErrorType(), res.Error, typ, res.Result, res.Stdout, res.Stderr, strings.Join(res.NsjailLog, "\n"))
	}
	if msgPart != "" && !strings.Contains(res.Error.Message+"\n"+res.Error.Traceback, msgPart) {
		t.Fatalf("error %+v does not mention %q", res.Error, msgPart)
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("result %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatalf("want %q is not JSON: %v", want, err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// The DESIGN §4 probe, in JavaScript and in TypeScript.
func TestJavaScriptProbeReturnsOK(t *testing.T) {
	r := newJSRunner(t, nil)
	for _, tc := range []struct{ name, lang, src string }{
		{"javascript, async named export", sandbox.LanguageJavaScript, "export async function run(args, context) {\n  return {ok: true};\n}\n"},
		{"typescript, typed async export", sandbox.LanguageTypeScript, "export async function run(args: unknown, context: {tenantId: string}): Promise<{ok: boolean}> {\n  return {ok: true};\n}\n"},
		{"javascript, sync default export", sandbox.LanguageJavaScript, "export default function (args, context) { return {ok: true} }\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJS(t, r, tc.lang, tc.src, nil)
			wantOK(t, res, `{"ok": true}`)
		})
	}
}
