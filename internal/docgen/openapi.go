package docgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// HTTPReference renders docs/reference/http-api.md from the OpenAPI
// document: every route grouped by tag, with its parameters, request body
// and responses, then every schema with its fields.
func HTTPReference(spec []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		return "", fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	if len(doc.Content) == 0 {
		return "", fmt.Errorf("the OpenAPI document is empty")
	}
	r := &apiRenderer{root: doc.Content[0]}
	return r.render()
}

type apiRenderer struct {
	root *yaml.Node
	b    strings.Builder
}

// get returns the value of key in mapping n (nil when absent).
func get(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// keys returns the keys of mapping n in document order.
func keys(n *yaml.Node) []string {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	out := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, n.Content[i].Value)
	}
	return out
}

func str(n *yaml.Node) string {
	if n == nil {
		return ""
	}
	return n.Value
}

// refName is the last element of a $ref ("#/components/schemas/Envelope" → Envelope).
func refName(n *yaml.Node) string {
	ref := str(get(n, "$ref"))
	if ref == "" {
		return ""
	}
	return ref[strings.LastIndex(ref, "/")+1:]
}

func schemaAnchor(name string) string { return "schema-" + strings.ToLower(name) }

// resolve follows a $ref to components/<kind>.
func (r *apiRenderer) resolve(n *yaml.Node, kind string) *yaml.Node {
	if name := refName(n); name != "" {
		return get(r.root, "components", kind, name)
	}
	return n
}

var methods = []string{"get", "post", "put", "patch", "delete"}

type operation struct {
	method, path string
	item, op     *yaml.Node
}

func (r *apiRenderer) render() (string, error) {
	b := &r.b
	fmt.Fprintf(b, generatedNote, OpenAPI)
	b.WriteString("# HTTP API reference\n\n")
	b.WriteString(prose(str(get(r.root, "info", "description"))) + "\n\n")
	fmt.Fprintf(b, "The running gateway serves this document as `GET /openapi.json` (OpenAPI %s). ", str(get(r.root, "openapi")))
	b.WriteString("Every route needs a bearer token unless it says otherwise. ")
	b.WriteString("**Tokens:** " + prose(str(get(r.root, "components", "securitySchemes", "bearer", "description"))) + "\n\n")

	// Operations by tag, in the document's tag order.
	var tags []string
	for _, t := range get(r.root, "tags").Content {
		tags = append(tags, str(get(t, "name")))
	}
	byTag := map[string][]operation{}
	paths := get(r.root, "paths")
	for _, p := range keys(paths) {
		item := get(paths, p)
		for _, m := range methods {
			op := get(item, m)
			if op == nil {
				continue
			}
			tag := "other"
			if t := get(op, "tags"); t != nil && len(t.Content) > 0 {
				tag = t.Content[0].Value
			}
			if _, ok := byTag[tag]; !ok && !contains(tags, tag) {
				tags = append(tags, tag)
			}
			byTag[tag] = append(byTag[tag], operation{method: m, path: p, item: item, op: op})
		}
	}

	b.WriteString("## Routes\n\n| route | what it does |\n|---|---|\n")
	for _, tag := range tags {
		for _, o := range byTag[tag] {
			fmt.Fprintf(b, "| [`%s %s`](#%s) | %s |\n", strings.ToUpper(o.method), o.path, opAnchor(o), cell(str(get(o.op, "summary"))))
		}
	}
	b.WriteString("\n")
	for _, tag := range tags {
		if len(byTag[tag]) == 0 {
			continue
		}
		fmt.Fprintf(b, "## %s {#tag-%s}\n\n", strings.ToUpper(tag[:1])+tag[1:], tag)
		for _, o := range byTag[tag] {
			if err := r.operation(o); err != nil {
				return "", err
			}
		}
	}
	b.WriteString("## Schemas {#schemas}\n\n")
	schemas := get(r.root, "components", "schemas")
	for _, name := range keys(schemas) {
		r.schema(name, get(schemas, name))
	}
	return b.String(), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func opAnchor(o operation) string {
	if id := str(get(o.op, "operationId")); id != "" {
		return "op-" + strings.ToLower(id)
	}
	return "op-" + o.method + strings.NewReplacer("/", "-", "{", "", "}", "").Replace(o.path)
}

func (r *apiRenderer) operation(o operation) error {
	b := &r.b
	fmt.Fprintf(b, "### `%s %s` {#%s}\n\n", strings.ToUpper(o.method), o.path, opAnchor(o))
	if s := str(get(o.op, "summary")); s != "" {
		b.WriteString(prose(s) + "\n\n")
	}
	if d := str(get(o.op, "description")); d != "" {
		b.WriteString(prose(d) + "\n\n")
	}
	if sec := get(o.op, "security"); sec != nil && len(sec.Content) == 0 {
		b.WriteString("No token needed.\n\n")
	}

	// Parameters: the path item's, then the operation's.
	var params []*yaml.Node
	for _, src := range []*yaml.Node{get(o.item, "parameters"), get(o.op, "parameters")} {
		if src == nil {
			continue
		}
		for _, p := range src.Content {
			params = append(params, r.resolve(p, "parameters"))
		}
	}
	if len(params) > 0 {
		b.WriteString("| parameter | in | type | required | description |\n|---|---|---|---|---|\n")
		for _, p := range params {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", str(get(p, "name")), str(get(p, "in")),
				r.typeOf(get(p, "schema")), yesNo(str(get(p, "required")) == "true"), cell(str(get(p, "description"))+constraints(get(p, "schema"))))
		}
		b.WriteString("\n")
	}

	if body := get(o.op, "requestBody"); body != nil {
		content := get(body, "content")
		for _, ct := range keys(content) {
			media := get(content, ct)
			fmt.Fprintf(b, "**Request body** (`%s`): %s", ct, r.typeOf(get(media, "schema")))
			if d := str(get(get(media, "schema"), "description")); d != "" && refName(get(media, "schema")) == "" {
				b.WriteString(" — " + cell(d))
			}
			b.WriteString("\n\n")
			if ex := get(media, "example"); ex != nil {
				js, err := exampleJSON(ex)
				if err != nil {
					return fmt.Errorf("%s %s: example: %w", o.method, o.path, err)
				}
				b.WriteString("```json\n" + js + "\n```\n\n")
			}
		}
	}

	responses := get(o.op, "responses")
	codes := keys(responses)
	sort.Strings(codes)
	b.WriteString("| status | meaning | body |\n|---|---|---|\n")
	for _, code := range codes {
		resp := r.resolve(get(responses, code), "responses")
		var bodies []string
		content := get(resp, "content")
		for _, ct := range keys(content) {
			bodies = append(bodies, fmt.Sprintf("`%s` %s", ct, r.typeOf(get(get(content, ct), "schema"))))
		}
		desc := str(get(resp, "description"))
		if hs := keys(get(resp, "headers")); len(hs) > 0 {
			desc += " Headers: " + strings.Join(quoteAll(hs), ", ") + "."
		}
		body := strings.Join(bodies, "<br>")
		if body == "" {
			body = "—"
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", code, cell(desc), body)
	}
	b.WriteString("\n")
	return nil
}

func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = "`" + s + "`"
	}
	return out
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// typeOf describes a schema in a few words, linking $refs.
func (r *apiRenderer) typeOf(s *yaml.Node) string {
	if s == nil {
		return "any JSON"
	}
	if name := refName(s); name != "" {
		return fmt.Sprintf("[%s](#%s)", name, schemaAnchor(name))
	}
	if c := get(s, "const"); c != nil {
		return "`" + jsonScalar(c) + "`"
	}
	t := str(get(s, "type"))
	if t == "" {
		if get(s, "type") != nil && get(s, "type").Kind == yaml.SequenceNode {
			var ts []string
			for _, x := range get(s, "type").Content {
				ts = append(ts, x.Value)
			}
			t = strings.Join(ts, " or ")
		} else if get(s, "properties") != nil {
			t = "object"
		} else if alt := firstOf(s, "oneOf", "anyOf"); alt != nil {
			var ts []string
			for _, x := range alt.Content {
				ts = append(ts, r.typeOf(x))
			}
			return strings.Join(ts, " or ")
		} else {
			return "any JSON"
		}
	}
	if t == "array" {
		return "array of " + r.typeOf(get(s, "items"))
	}
	if e := get(s, "enum"); e != nil {
		var vs []string
		for _, x := range e.Content {
			vs = append(vs, "`"+x.Value+"`")
		}
		return t + ": " + strings.Join(vs, ", ")
	}
	return t
}

func firstOf(s *yaml.Node, names ...string) *yaml.Node {
	for _, n := range names {
		if v := get(s, n); v != nil {
			return v
		}
	}
	return nil
}

// constraints lists a schema's default and bounds as a sentence.
func constraints(s *yaml.Node) string {
	if s == nil {
		return ""
	}
	var parts []string
	if d := get(s, "default"); d != nil {
		parts = append(parts, "default `"+jsonScalar(d)+"`")
	}
	for _, c := range []struct{ key, say string }{
		{"minimum", "at least %s"}, {"maximum", "at most %s"},
		{"minLength", "at least %s characters"}, {"maxLength", "at most %s characters"},
		{"minItems", "at least %s items"}, {"maxItems", "at most %s items"},
		{"maxProperties", "at most %s properties"},
	} {
		if v := get(s, c.key); v != nil {
			parts = append(parts, fmt.Sprintf(c.say, v.Value))
		}
	}
	if p := str(get(s, "pattern")); p != "" && len(p) <= 48 {
		parts = append(parts, "pattern `"+p+"`")
	}
	if f := str(get(s, "format")); f != "" {
		parts = append(parts, "format "+f)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func jsonScalar(n *yaml.Node) string {
	var v any
	if err := n.Decode(&v); err != nil {
		return n.Value
	}
	b, err := json.Marshal(v)
	if err != nil {
		return n.Value
	}
	return string(b)
}

func exampleJSON(n *yaml.Node) (string, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSpace(buf.String()), nil
}

// schema renders one component schema: its description, its conditions,
// and a row per property (nested objects' properties as dotted names).
func (r *apiRenderer) schema(name string, s *yaml.Node) {
	b := &r.b
	fmt.Fprintf(b, "### %s {#%s}\n\n", name, schemaAnchor(name))
	if d := str(get(s, "description")); d != "" {
		b.WriteString(prose(d) + "\n\n")
	}
	if all := get(s, "allOf"); all != nil {
		for _, c := range all.Content {
			if d := str(get(c, "description")); d != "" {
				b.WriteString("- " + prose(d) + "\n")
			} else if n := refName(c); n != "" {
				fmt.Fprintf(b, "- All of [%s](#%s).\n", n, schemaAnchor(n))
			}
		}
		b.WriteString("\n")
	}
	if get(s, "properties") == nil {
		fmt.Fprintf(b, "Type: %s%s.\n\n", r.typeOf(s), escapeText(constraints(s)))
		return
	}
	b.WriteString("| field | type | required | description |\n|---|---|---|---|\n")
	r.properties(s, "", 0)
	if ap := get(s, "additionalProperties"); ap != nil && ap.Value == "false" {
		b.WriteString("\nNo other fields are accepted.\n")
	}
	b.WriteString("\n")
}

func (r *apiRenderer) properties(s *yaml.Node, prefix string, depth int) {
	required := map[string]bool{}
	if req := get(s, "required"); req != nil {
		for _, x := range req.Content {
			required[x.Value] = true
		}
	}
	props := get(s, "properties")
	for _, p := range keys(props) {
		ps := get(props, p)
		desc := str(get(ps, "description"))
		if refName(ps) == "" {
			desc += constraints(ps)
		}
		fmt.Fprintf(&r.b, "| `%s%s` | %s | %s | %s |\n", prefix, p, r.typeOf(ps), yesNo(required[p]), cell(desc))
		if depth < 3 && refName(ps) == "" && get(ps, "properties") != nil {
			r.properties(ps, prefix+p+".", depth+1)
		}
		if items := get(ps, "items"); depth < 3 && items != nil && refName(items) == "" && get(items, "properties") != nil {
			r.properties(items, prefix+p+"[].", depth+1)
		}
	}
}
