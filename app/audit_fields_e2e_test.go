package app_test

import (
	"net/http"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// The audit record says what was run: the request's language and the
// package environment (its lock's id), as written by the real gateway and
// checked against the schema by the audit log.
func TestAuditRecordsTheLanguageAndTheEnvironment(t *testing.T) {
	testenv.Deno(t)
	s := depsServer(t)
	demo := s.token("demo")
	p := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"requirements": []string{"alpha"}})
	if p.status != http.StatusOK {
		t.Fatalf("prepare: %d %s", p.status, p.body)
	}
	envID := p.json(t)["environment_id"].(string)

	runs := []struct {
		id   string
		body any
		lang string
		env  string
	}{
		{"python-plain", map[string]any{"source": "def run(args, context):\n    return 1\n"}, "python", ""},
		{"python-packages", map[string]any{"source": "import alpha\n\ndef run(args, context):\n    return alpha.VERSION\n", "requirements": []string{"alpha"}}, "python", envID},
		{"python-by-id", map[string]any{"source": "import alpha\n\ndef run(args, context):\n    return alpha.VERSION\n", "environment_id": envID}, "python", envID},
		{"javascript", map[string]any{"language": "javascript", "source": "export function run() { return 1 }\n"}, "javascript", ""},
		{"typescript", map[string]any{"language": "typescript", "source": "export function run(): number { return 1 }\n"}, "typescript", ""},
	}
	for _, r := range runs {
		body := r.body.(map[string]any)
		body["execution_id"] = r.id
		if resp := s.execute(demo, body); resp.status != http.StatusOK || resp.json(t)["status"] != "ok" {
			t.Fatalf("%s: %d %s", r.id, resp.status, resp.body)
		}
	}
	if resp := s.execute(demo, `{"execution_id": "broken", "source": `); resp.status != http.StatusBadRequest {
		t.Fatalf("a broken body: %d %s", resp.status, resp.body)
	}

	records := map[string]map[string]any{}
	for _, l := range s.auditLines() {
		records[l["execution_id"].(string)] = l
	}
	for _, r := range runs {
		rec := records[r.id]
		if rec == nil {
			t.Fatalf("no audit record of %s", r.id)
		}
		if rec["language"] != r.lang {
			t.Errorf("%s: language %v, want %s", r.id, rec["language"], r.lang)
		}
		if got, _ := rec["environment_id"].(string); got != r.env {
			t.Errorf("%s: environment_id %q, want %q", r.id, got, r.env)
		}
	}
	var broken map[string]any
	for _, l := range s.auditLines() {
		if e, _ := l["outcome"].(map[string]any); e["error_type"] == "BadRequest" {
			broken = l
		}
	}
	if broken == nil {
		t.Fatal("no audit record of the broken body")
	}
	if _, ok := broken["language"]; ok {
		t.Errorf("a body that was not decoded has a language: %v", broken)
	}
}
