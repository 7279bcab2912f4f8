package app_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// The DESIGN §4 probe in JavaScript and TypeScript, through the whole
// gateway and a real jail; a tenant limited to python is refused the others
// by policy; /v1/validate reports TypeScript type errors with line and column.
func TestJavaScriptThroughTheGateway(t *testing.T) {
	testenv.Deno(t)
	s := start(t, setup{realSandbox: true, mutate: func(cfg *config.Config) {
		for i := range cfg.Tenants {
			if cfg.Tenants[i].ID == "acme" {
				cfg.Tenants[i].Policy["languages"] = []any{"python"}
			}
		}
	}})
	for _, tc := range []struct{ name, lang, source string }{
		{"javascript probe", "javascript", "export async function run(args, context) {\n  return {ok: true};\n}\n"},
		{"typescript probe", "typescript", "export async function run(args: unknown, context: unknown): Promise<{ok: boolean}> {\n  return {ok: true};\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"execution_id": "probe-" + tc.lang, "tenant_id": "demo", "language": tc.lang, "source": tc.source, "entrypoint": "run"}
			r := s.execute(s.token("demo"), body)
			if r.status != http.StatusOK {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			env := r.json(t)
			if res, _ := env["result"].(map[string]any); env["status"] != "ok" || len(res) != 1 || res["ok"] != true {
				t.Fatalf("envelope = %s", r.body)
			}
			if r.header.Get("X-Execution-Status") != "ok" {
				t.Fatalf("headers = %v", r.header)
			}
		})
	}
	t.Run("a tenant limited to python is refused javascript", func(t *testing.T) {
		r := s.execute(s.token("acme"), map[string]any{"tenant_id": "acme", "language": "javascript", "source": "export function run() { return 1 }"})
		if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" || !strings.Contains(string(r.body), `language \"javascript\" is not allowed for this tenant`) {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		ok := s.execute(s.token("acme"), probe("acme"))
		if ok.status != http.StatusOK || ok.json(t)["status"] != "ok" {
			t.Fatalf("python for acme: %d %s", ok.status, ok.body)
		}
	})
	t.Run("validate reports a type error with line and column", func(t *testing.T) {
		r := s.do(http.MethodPost, "/v1/validate", s.token("demo"), map[string]any{"language": "typescript", "source": "export function run(): number {\n  const s: string = 1;\n  return 2;\n}\n"})
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		v := r.json(t)
		errs, _ := v["errors"].([]any)
		if v["valid"] != false || len(errs) != 1 {
			t.Fatalf("verdict %s", r.body)
		}
		e, _ := errs[0].(map[string]any)
		if e["line"] != float64(2) || e["col"] != float64(9) || !strings.Contains(e["message"].(string), "TS2322") {
			t.Fatalf("error %v", e)
		}
	})
	// Imports are refused before any jail (package sourcecheck): execute
	// reports InvalidSource at the import, validate a problem there.
	const dataImport = "export async function run() {\n  return (await import(\"data:text/javascript,export default 1\")).default;\n}\n"
	t.Run("execute refuses a data: import as InvalidSource with line and column", func(t *testing.T) {
		r := s.execute(s.token("demo"), map[string]any{"tenant_id": "demo", "language": "javascript", "source": dataImport})
		if r.status != http.StatusOK || r.header.Get("X-Execution-Status") != "error:InvalidSource" {
			t.Fatalf("status %d %v: %s", r.status, r.header, r.body)
		}
		e, _ := r.json(t)["error"].(map[string]any)
		if e["type"] != "InvalidSource" || e["line"] != float64(2) || e["column"] != float64(24) || !strings.Contains(e["message"].(string), `imports are not available to tools: "data:text/javascript,export default 1"`) {
			t.Fatalf("error %v", e)
		}
	})
	t.Run("validate reports a data: import with line and column", func(t *testing.T) {
		r := s.do(http.MethodPost, "/v1/validate", s.token("demo"), map[string]any{"language": "javascript", "source": dataImport})
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		v := r.json(t)
		errs, _ := v["errors"].([]any)
		if v["valid"] != false || len(errs) != 1 {
			t.Fatalf("verdict %s", r.body)
		}
		e, _ := errs[0].(map[string]any)
		if e["line"] != float64(2) || e["col"] != float64(24) || !strings.Contains(e["message"].(string), "imports are not available to tools") {
			t.Fatalf("error %v", e)
		}
	})
}
