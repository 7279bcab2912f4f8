// Package stubs renders what a model needs to write a code-mode program
// against a tenant's granted tools (GET /v1/tools): a typed Python stub of
// context.tools, TypeScript declarations of a JavaScript or TypeScript
// tool's context, and a system-prompt section listing the tools. It only
// renders text from the tools' names, descriptions and input schemas; it
// calls nothing.
package stubs

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/execgate/execgate/toolbridge"
)

// Python renders a typed stub of context.tools for tools: a TypedDict
// of arguments per tool (from its input schema) and run/run_async
// overloads naming each tool.
func Python(tools []toolbridge.Tool) string {
	var b strings.Builder
	b.WriteString("# Typed stub of context.tools (execgate code mode).\n")
	b.WriteString("from typing import Any, Literal, NotRequired, TypedDict, overload\n\n")
	b.WriteString("from execgate_runtime import ToolDenied, ToolFailed, ToolTimeout, ToolUnavailable\n\n")
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = argsClass(t.Name)
		fmt.Fprintf(&b, "\nclass %s(TypedDict):\n", names[i])
		fmt.Fprintf(&b, "    %s\n", pyDocstring(t.Description))
		props, required := schemaProps(t.InputSchema)
		if len(props) == 0 {
			b.WriteString("    pass\n")
		}
		for _, p := range props {
			typ := pyType(p.schema)
			if !required[p.name] {
				typ = "NotRequired[" + typ + "]"
			}
			if !isPyIdent(p.name) {
				continue // not expressible as a TypedDict field; the schema still applies
			}
			fmt.Fprintf(&b, "    %s: %s", p.name, typ)
			if d, _ := p.schema["description"].(string); d != "" {
				fmt.Fprintf(&b, "  # %s", oneLine(d, 100))
			}
			b.WriteByte('\n')
		}
	}
	b.WriteString("\n\nclass Tools:\n")
	b.WriteString("    \"\"\"context.tools: every call is checked by policy; errors are ToolDenied,\n")
	b.WriteString("    ToolUnavailable, ToolTimeout or ToolFailed (all ToolFailure).\"\"\"\n\n")
	b.WriteString("    def search(self, query: str = \"\", limit: int = 10) -> list[dict[str, str]]:\n")
	b.WriteString("        \"\"\"Granted tools matching query: [{\"name\", \"description\"}].\"\"\"\n\n")
	b.WriteString("    def describe(self, name: str) -> dict[str, Any]:\n")
	b.WriteString("        \"\"\"{\"name\", \"description\", \"input_schema\"} of a granted tool.\"\"\"\n\n")
	for _, async := range []bool{false, true} {
		def, fn := "def", "run"
		if async {
			def, fn = "async def", "run_async"
		}
		for i, t := range tools {
			fmt.Fprintf(&b, "    @overload\n    %s %s(self, name: Literal[%q], args: %s) -> Any: ...\n", def, fn, t.Name, names[i])
		}
		fmt.Fprintf(&b, "    %s %s(self, name: str, args: dict[str, Any]) -> Any:\n", def, fn)
		b.WriteString("        \"\"\"Call a tool; returns its structured result.\"\"\"\n\n")
	}
	return b.String()
}

// TypeScript renders TypeScript declarations of a JavaScript or
// TypeScript tool's context: an interface of arguments per tool (from its
// input schema), run overloads naming each tool, context.tools.<name>
// methods, and the bridge's error classes.
func TypeScript(tools []toolbridge.Tool) string {
	var b strings.Builder
	b.WriteString("// Typed declarations of context (execgate code mode, JavaScript/TypeScript).\n")
	b.WriteString("export interface ToolInfo {\n  name: string;\n  description: string;\n  input_schema?: Record<string, unknown>;\n}\n")
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = argsClass(t.Name)
		fmt.Fprintf(&b, "\n/** %s */\nexport interface %s {\n", tsComment(t.Description, "Arguments."), names[i])
		props, required := schemaProps(t.InputSchema)
		for _, p := range props {
			if d, _ := p.schema["description"].(string); d != "" {
				fmt.Fprintf(&b, "  /** %s */\n", tsComment(d, ""))
			}
			opt := "?"
			if required[p.name] {
				opt = ""
			}
			fmt.Fprintf(&b, "  %s%s: %s;\n", tsKey(p.name), opt, tsType(p.schema))
		}
		b.WriteString("}\n")
	}
	b.WriteString("\n/** context.tools: every call is checked by policy; calls reject with\n")
	b.WriteString(" * ToolDenied, ToolUnavailable, ToolTimeout or ToolFailed. */\n")
	b.WriteString("export interface Tools {\n")
	b.WriteString("  /** Granted tools matching query: [{name, description}]. */\n")
	b.WriteString("  search(query?: string, opts?: { limit?: number }): Promise<ToolInfo[]>;\n")
	b.WriteString("  /** {name, description, input_schema} of a granted tool. */\n")
	b.WriteString("  describe(name: string): Promise<ToolInfo>;\n")
	for i, t := range tools {
		fmt.Fprintf(&b, "  run(name: %s, args: %s): Promise<unknown>;\n", jsString(t.Name), names[i])
	}
	b.WriteString("  /** Call a tool; resolves to its structured result. */\n")
	b.WriteString("  run(name: string, args?: Record<string, unknown>): Promise<unknown>;\n")
	for i, t := range tools {
		fmt.Fprintf(&b, "  %s(args: %s): Promise<unknown>;\n", jsString(t.Name), names[i])
	}
	b.WriteString("}\n\n")
	b.WriteString("export declare class ToolFailure extends Error {\n  type: string;\n  constructor(type: \"ToolError\" | \"InvalidInput\", message?: string);\n}\n")
	b.WriteString("/** What context.tools rejects with: type names the class, message is the bridge's. */\n")
	b.WriteString("export declare class ToolBridgeError extends ToolFailure {\n  type: \"ToolDenied\" | \"ToolUnavailable\" | \"ToolTimeout\" | \"ToolFailed\";\n  reason: string;\n  tool?: string;\n}\n")
	for _, c := range []string{"ToolDenied", "ToolUnavailable", "ToolTimeout", "ToolFailed"} {
		fmt.Fprintf(&b, "export declare class %s extends ToolBridgeError {\n  type: %q;\n}\n", c, c)
	}
	b.WriteString("\nexport interface Context {\n")
	b.WriteString("  tenantId: string;\n  executionId: string;\n  variables: Record<string, unknown>;\n  mode: string;\n")
	b.WriteString("  /** The run's deadline (Unix ms); remaining() is the milliseconds left. */\n  deadline: number;\n  remaining(): number;\n")
	b.WriteString("  log(message: unknown, level?: \"debug\" | \"info\" | \"warning\" | \"error\"): void;\n")
	b.WriteString("  tools: Tools;\n")
	for _, c := range []string{"ToolFailure", "ToolDenied", "ToolUnavailable", "ToolTimeout", "ToolFailed"} {
		fmt.Fprintf(&b, "  %s: typeof %s;\n", c, c)
	}
	b.WriteString("}\n")
	return b.String()
}

func tsType(s map[string]any) string {
	t := s["type"]
	nullable := false
	if ts, ok := t.([]any); ok && len(ts) > 0 { // ["string", "null"]
		t = nil
		for _, x := range ts {
			if x == "null" {
				nullable = true
			} else if t == nil {
				t = x
			}
		}
	}
	var out string
	switch t {
	case "string":
		out = "string"
	case "integer", "number":
		out = "number"
	case "boolean":
		out = "boolean"
	case "array":
		out = "unknown[]"
		if items, ok := s["items"].(map[string]any); ok {
			out = "Array<" + tsType(items) + ">"
		}
	case "object":
		out = "Record<string, unknown>"
	default:
		out = "unknown"
	}
	if nullable {
		out += " | null"
	}
	return out
}

// tsKey is a property name as TypeScript takes it: bare if an identifier,
// else a string literal.
func tsKey(name string) string {
	if isPyIdent(name) {
		return name
	}
	return jsString(name)
}

// jsString is s as a JavaScript string literal (JSON's quoting is valid
// JavaScript).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// tsComment is the first line of s, fit for a /** */ comment.
func tsComment(s, def string) string {
	s = oneLine(s, 200)
	if s == "" {
		s = def
	}
	return strings.ReplaceAll(s, "*/", "* /")
}

// Prompt is a system-prompt section describing tools for code mode, with
// stub (the Python one) as the typed stub.
func Prompt(tools []toolbridge.Tool, stub string) string {
	var b strings.Builder
	b.WriteString("Write one Python program `def run(args, context)` (or `async def`) that calls tools through `context.tools` and returns a JSON-serialisable result. ")
	b.WriteString("The program runs once in a sandbox without network; `context.tools` is its only way to reach the tools below. ")
	b.WriteString("Call `context.tools.run(name, args)` (or `await context.tools.run_async(name, args)` to run several at once); ")
	b.WriteString("failures raise ToolDenied, ToolUnavailable, ToolTimeout or ToolFailed from execgate_runtime. ")
	b.WriteString("In JavaScript or TypeScript (request `language`), export `async function run(args, context)`; the same calls return promises ")
	b.WriteString("(`await context.tools.run(name, args)`, `Promise.all` to run several at once) and reject with `context.ToolDenied`, ")
	b.WriteString("`context.ToolUnavailable`, `context.ToolTimeout` or `context.ToolFailed`.\n\nTools:\n")
	if len(tools) == 0 {
		b.WriteString("(none granted)\n")
	}
	for _, t := range tools {
		schema, _ := json.Marshal(t.InputSchema)
		fmt.Fprintf(&b, "- %s: %s\n  input schema: %s\n", t.Name, oneLine(t.Description, 200), schema)
	}
	b.WriteString("\nTyped stub:\n```python\n")
	b.WriteString(stub)
	b.WriteString("```\n")
	return b.String()
}

type prop struct {
	name   string
	schema map[string]any
}

// schemaProps returns the object schema's properties (sorted) and which
// are required.
func schemaProps(schema any) ([]prop, map[string]bool) {
	m, _ := schema.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	var out []prop
	for name, v := range props {
		ps, _ := v.(map[string]any)
		out = append(out, prop{name, ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	required := map[string]bool{}
	if rs, ok := m["required"].([]any); ok {
		for _, r := range rs {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
	}
	return out, required
}

func pyType(s map[string]any) string {
	t := s["type"]
	if ts, ok := t.([]any); ok && len(ts) > 0 { // ["string", "null"]: the first non-null
		for _, x := range ts {
			if x != "null" {
				t = x
				break
			}
		}
	}
	switch t {
	case "string":
		return "str"
	case "integer":
		return "int"
	case "number":
		return "float"
	case "boolean":
		return "bool"
	case "array":
		if items, ok := s["items"].(map[string]any); ok {
			return "list[" + pyType(items) + "]"
		}
		return "list[Any]"
	case "object":
		return "dict[str, Any]"
	}
	return "Any"
}

// argsClass names a tool's TypedDict: "math.add" → "MathAddArgs".
func argsClass(name string) string {
	var b strings.Builder
	up := true
	for _, r := range name {
		switch {
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			if up {
				r = unicode.ToUpper(r)
			}
			b.WriteRune(r)
			up = false
		default:
			up = true
		}
	}
	s := b.String()
	if s == "" || unicode.IsDigit(rune(s[0])) {
		s = "T" + s
	}
	return s + "Args"
}

func isPyIdent(s string) bool {
	for i, r := range s {
		if r >= 128 || !(r == '_' || unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return s != ""
}

func pyDocstring(s string) string {
	s = oneLine(s, 200)
	if s == "" {
		s = "Arguments."
	}
	return `"""` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"""`, `\"\"\"`) + `"""`
}

// oneLine is the first line of s, at most n bytes, without control characters.
func oneLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}
