package app_test

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/execgate/execgate/gateway"
)

// specChecker validates real responses against gateway/openapi.yaml: the
// route and status must be documented, required headers present, the
// content type listed, and a JSON body valid against its schema.
type specChecker struct {
	doc      map[string]any
	compiler *jsonschema.Compiler

	mu      sync.Mutex // guards schemas
	schemas map[string]*jsonschema.Schema
}

var (
	specOnce sync.Once
	specVal  *specChecker
	specErr  error
)

const specURL = "https://execgate.invalid/openapi.json"

func loadSpec(t *testing.T) *specChecker {
	t.Helper()
	specOnce.Do(func() {
		raw, err := gateway.OpenAPI()
		if err != nil {
			specErr = err
			return
		}
		var doc map[string]any
		if specErr = json.Unmarshal(raw, &doc); specErr != nil {
			return
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			specErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		c.DefaultDraft(jsonschema.Draft2020)
		if specErr = c.AddResource(specURL, inst); specErr != nil {
			return
		}
		specVal = &specChecker{doc: doc, compiler: c, schemas: map[string]*jsonschema.Schema{}}
	})
	if specErr != nil {
		t.Fatalf("loading the OpenAPI document: %v", specErr)
	}
	return specVal
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var paramRe = regexp.MustCompile(`\{[^}]+\}`)

// operation finds the documented path template for a concrete path.
func (s *specChecker) operation(method, path string) (tmpl string, op map[string]any) {
	paths, _ := s.doc["paths"].(map[string]any)
	for p, item := range paths {
		var re strings.Builder
		re.WriteString("^")
		for i, lit := range paramRe.Split(p, -1) {
			if i > 0 {
				re.WriteString(`[^/]+`)
			}
			re.WriteString(regexp.QuoteMeta(lit))
		}
		re.WriteString("$")
		if regexp.MustCompile(re.String()).MatchString(path) {
			o, _ := item.(map[string]any)[strings.ToLower(method)].(map[string]any)
			return p, o
		}
	}
	return "", nil
}

func (s *specChecker) schema(t *testing.T, pointer string) *jsonschema.Schema {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if sch, ok := s.schemas[pointer]; ok {
		return sch
	}
	sch, err := s.compiler.Compile(specURL + "#" + pointer)
	if err != nil {
		t.Fatalf("compiling schema %s: %v", pointer, err)
	}
	s.schemas[pointer] = sch
	return sch
}

func (s *specChecker) check(t *testing.T, method, path string, r response) {
	t.Helper()
	path, _, _ = strings.Cut(path, "?")
	tmpl, op := s.operation(method, path)
	if op == nil {
		if r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed {
			return // an undocumented route, answered as such
		}
		t.Fatalf("%s %s answered %d but is not in the OpenAPI document", method, path, r.status)
	}
	responses, _ := op["responses"].(map[string]any)
	code := strconv.Itoa(r.status)
	resp, ok := responses[code].(map[string]any)
	if !ok {
		t.Fatalf("%s %s: status %d is not documented (documented: %v)\n%s", method, tmpl, r.status, keys(responses), r.body)
	}
	base := "/paths/" + escapePointer(tmpl) + "/" + strings.ToLower(method) + "/responses/" + code
	if ref, ok := resp["$ref"].(string); ok {
		base = strings.TrimPrefix(ref, "#")
		resp = s.resolve(ref)
	}
	if hdrs, ok := resp["headers"].(map[string]any); ok {
		for name, h := range hdrs {
			hm, _ := h.(map[string]any)
			if ref, ok := hm["$ref"].(string); ok {
				hm = s.resolve(ref)
			}
			if req, _ := hm["required"].(bool); req && r.header.Get(name) == "" {
				t.Errorf("%s %s %d: required header %s missing", method, tmpl, r.status, name)
			}
		}
	}
	content, _ := resp["content"].(map[string]any)
	if len(content) == 0 {
		return
	}
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("%s %s %d: bad Content-Type %q", method, tmpl, r.status, r.header.Get("Content-Type"))
	}
	if _, ok := content[mt]; !ok {
		if _, any := content["*/*"]; any {
			return // any media type (an artifact, served as its own)
		}
		t.Fatalf("%s %s %d: Content-Type %s not documented (%v)", method, tmpl, r.status, mt, keys(content))
	}
	if mt != "application/json" {
		return
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("%s %s %d: body is not JSON: %v\n%s", method, tmpl, r.status, err, r.body)
	}
	sch := s.schema(t, base+"/content/"+escapePointer(mt)+"/schema")
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("%s %s %d: body does not match the OpenAPI schema: %v\n%s", method, tmpl, r.status, err, r.body)
	}
}

func (s *specChecker) resolve(ref string) map[string]any {
	var cur any = s.doc
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		cur = cur.(map[string]any)[part]
	}
	m, _ := cur.(map[string]any)
	return m
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
