package sourcecheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Every way a tool could import is refused at the import, with its line and
// column; what only looks like an import is not.
func TestCheckImportsRefusesEveryImport(t *testing.T) {
	for _, tc := range []struct {
		name, lang, src string
		line, col       int    // of the first problem; 0: the source passes
		msgPart         string // a part of its message
	}{
		{"a static data: import", "javascript",
			"// a tool\n\nimport x from \"data:text/javascript,export default 1\";\nexport function run() { return x }\n",
			3, 15, `imports are not available to tools: "data:text/javascript,export default 1" at line 3, column 15`},
		{"a dynamic data: import of a literal", "javascript",
			"export async function run() {\n  return (await import(\"data:text/javascript,export default 1\")).default;\n}\n",
			2, 24, `"data:text/javascript,export default 1"`},
		{"an import() of a specifier built at run time", "javascript",
			"export async function run(args) {\n  const p = [\"data:text/javascript\", args.code].join(\",\");\n  return import(p);\n}\n",
			3, 10, "an import() whose specifier or options are computed at run time at line 3"},
		{"an import() of a template without substitutions", "javascript",
			"export async function run() { return import(`data:text/javascript,export default 1`) }\n",
			1, 45, `"data:text/javascript,export default 1"`},
		{"an import() of a template with a substitution", "javascript",
			"export async function run(args) { return import(`data:text/javascript,${args.code}`) }\n",
			1, 42, "computed at run time"},
		{"a relative glob import (esbuild would walk the disk for it)", "javascript",
			"export async function run(args) { return import(`../../../../${args.x}`) }\n",
			1, 42, "computed at run time"},
		{"export * from a data: URL", "javascript",
			"export * from \"data:text/javascript,export const a = 1\";\nexport function run() { return 1 }\n",
			1, 15, `"data:text/javascript,export const a = 1"`},
		{"a side-effect import", "javascript",
			"import \"data:text/javascript,globalThis.x = 1\";\nexport function run() { return 1 }\n",
			1, 8, `"data:text/javascript,globalThis.x = 1"`},
		{"a TypeScript import whose binding is unused", "typescript",
			"import {x} from \"data:text/javascript,export const x = 1\";\nexport function run(): number { return 1 }\n",
			1, 17, `"data:text/javascript,export const x = 1"`},
		{"a blob: import", "javascript",
			"export async function run() { return import(\"blob:null/4b1c1b5e-0000-4000-8000-000000000000\") }\n",
			1, 45, `"blob:null/4b1c1b5e`},
		{"node:, npm:, relative and remote imports", "javascript",
			"import fs from \"node:fs\";\nimport lp from \"npm:left-pad\";\nimport {h} from \"./helpers.js\";\nimport r from \"https://deno.land/x/mod.ts\";\nexport function run() { return 1 }\n",
			1, 16, `"node:fs"`},
		{"an import with attributes", "javascript",
			"import j from \"file:///etc/passwd\" with {type: \"text\"};\nexport function run() { return j }\n",
			1, 15, `"file:///etc/passwd"`},
		{"an import() inside try/catch", "javascript",
			"export async function run() {\n  try { return await import(\"node:fs\") } catch { return null }\n}\n",
			2, 29, `"node:fs"`},
		{"an import() with computed options", "javascript",
			"export async function run(args) { return import(\"data:text/javascript,1\", args.o) }\n",
			1, 75, "computed at run time"},
		{"an import() in a function declared after a return", "javascript",
			"export async function run() {\n  return f();\n  async function f() { return import(\"node:fs\") }\n}\n",
			3, 38, `"node:fs"`},
		{"an import() in a switch case reached by falling through", "javascript",
			"export async function run() {\n  switch (1) {\n    case 1: globalThis.a = 1;\n    case 2: return import(\"data:text/javascript,1\");\n  }\n}\n",
			4, 27, `"data:text/javascript,1"`},
		{"an import() after a constant short-circuit that does not skip it", "javascript",
			"export async function run() { return (false || import(\"data:text/javascript,1\")) && (true && import(\"data:text/javascript,2\")) }\n",
			1, 55, `"data:text/javascript,1"`},
		{"an escaped import keyword fails closed", "javascript",
			"export async function run() { return im\\u0070ort(\"data:text/javascript,1\") }\n",
			1, 38, "syntax error"},
		{"a source-phase import", "javascript",
			"export async function run() { return import.source(\"data:text/javascript,1\") }\n",
			1, 52, `"data:text/javascript,1"`},
		{"require()", "javascript",
			"export function run() { return require(\"fs\") }\n",
			1, 32, "require()"},
		{"TypeScript import = require()", "typescript",
			"import fs = require(\"fs\");\nexport function run(): number { return 1 }\n",
			1, 13, "require()"},
		{"a syntax error fails closed", "javascript",
			"export function run() {\n  return 1 +* 2;\n}\n",
			2, 13, `syntax error: Unexpected "*" at line 2, column 13`},
		{"an unterminated comment swallowing the rest fails closed", "javascript",
			"export function run() { return 1 }\n/* import(\"x\")",
			2, 15, `syntax error: Expected "*/" to terminate multi-line comment at line 2, column 15`},
		{"an HTML-like comment in a source without exports fails closed (Deno runs it as a module)", "javascript",
			"globalThis.x = 1\n-->import(\"data:text/javascript,1\")\n",
			2, 1, "syntax error: Legacy HTML single-line comments are not allowed in ECMAScript modules"},
		{"an opening HTML-like comment fails closed", "typescript",
			"let x = 1\n<!--import(\"data:text/javascript,1\")\n",
			2, 1, "syntax error: Legacy HTML single-line comments"},
		{"columns count UTF-16 units", "javascript",
			"const s = \"€😀\"; import(\"data:text/javascript,1\");\nexport function run() { return s }\n",
			1, 25, `"data:text/javascript,1"`},

		{"the word import in strings and comments", "javascript",
			"// import x from \"data:text/javascript,1\"\n/* import(\"node:fs\") */\nexport function run() { return \"import('data:x')\" + `import ${1}` }\n",
			0, 0, ""},
		{"import.meta", "javascript",
			"export function run() { return typeof import.meta.url }\n",
			0, 0, ""},
		{"import type in TypeScript", "typescript",
			"import type {X} from \"data:text/javascript,export const x = 1\";\nexport type {Y} from \"./y.ts\";\nexport function run(args: X): number { return 1 }\n",
			0, 0, ""},
		{"top-level await", "javascript",
			"const x = await Promise.resolve(1);\nexport function run() { return x }\n",
			0, 0, ""},
		{"a function of its own named require", "javascript",
			"function require(x) { return x }\nexport function run() { return require(\"fs\") }\n",
			0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := checkImports(tc.lang, tc.src, nil)
			t.Logf("%+v", problems)
			if tc.line == 0 {
				if problems != nil {
					t.Fatalf("refused: %+v", problems)
				}
				return
			}
			if len(problems) == 0 {
				t.Fatal("not refused")
			}
			p := problems[0]
			if p.Line != tc.line || p.Col != tc.col || !strings.Contains(p.Message, tc.msgPart) {
				t.Fatalf("first problem %+v, want %d:%d mentioning %q", p, tc.line, tc.col, tc.msgPart)
			}
		})
	}
}

// Every import of a source is reported, in order, each once, at most
// maxImportProblems.
func TestCheckImportsReportsEachImportInOrder(t *testing.T) {
	var b strings.Builder
	for i := range 3 {
		b.WriteString("import \"data:text/javascript," + strings.Repeat("x", i) + "\";\n")
	}
	b.WriteString("import \"data:text/javascript,\";\nexport function run() { return 1 }\n")
	problems := checkImports("javascript", b.String(), nil)
	if len(problems) != 3 || problems[0].Line != 1 || problems[1].Line != 2 || problems[2].Line != 3 {
		t.Fatalf("each specifier once, in order: %+v", problems)
	}
	// A computed import() is pass 1's; the literal ones are pass 2's, which
	// does not run after a refusal.
	problems = checkImports("javascript", b.String()+"export async function f(a) { return import(a.x) }\n", nil)
	if len(problems) != 1 || problems[0].Line != 6 || !strings.Contains(problems[0].Message, "computed") {
		t.Fatalf("problems %+v", problems)
	}
	b.Reset()
	for i := range 30 {
		b.WriteString("import \"data:text/javascript," + strings.Repeat("x", i) + "\";\n")
	}
	if problems := checkImports("javascript", b.String(), nil); len(problems) != maxImportProblems || problems[0].Line != 1 || problems[9].Line != 10 {
		t.Fatalf("problems %+v", problems)
	}
	long := strings.Repeat("y", 500)
	problems = checkImports("javascript", "import \"data:"+long+"\";\n", nil)
	if len(problems) != 1 || len(problems[0].Message) > 200 || !strings.Contains(problems[0].Message, "…") {
		t.Fatalf("a long specifier is not clipped: %+v", problems)
	}
}

// The check's work is bounded: a source over maxImportCheckBytes is refused
// unread, and the most deeply nested sources under it (the parser recurses
// per level; printing, which is superlinear on nesting, never happens)
// finish promptly.
func TestCheckImportsIsBounded(t *testing.T) {
	big := "export function run() { return 1 }\n" + strings.Repeat(" ", maxImportCheckBytes)
	if problems := checkImports("javascript", big, nil); len(problems) != 1 || !strings.Contains(problems[0].Message, "checked for imports up to 65536 bytes") {
		t.Fatalf("problems %+v", problems)
	}
	fill := func(unit string, tail string) string {
		n := (maxImportCheckBytes - 64 - len(tail)) / len(unit)
		return "export const x = " + strings.Repeat(unit, n) + tail
	}
	for _, tc := range []struct{ name, src string }{
		{"nested arrows", fill("a=>", "1;")},
		{"nested blocks with lets", strings.Repeat("{let a;", (maxImportCheckBytes-64)/8) + strings.Repeat("}", (maxImportCheckBytes-64)/8)},
		{"nested brackets", fill("[", "")},
		{"prefix operators", fill("!", "1;")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			problems := checkImports("javascript", tc.src, nil)
			took := time.Since(start)
			t.Logf("%d bytes in %v: %d problems", len(tc.src), took, len(problems))
			if took > 10*time.Second {
				t.Fatalf("the check took %v", took)
			}
		})
	}
}

// BenchmarkImportCheck is the check's cost for a typical 50-line tool.
func BenchmarkImportCheck(b *testing.B) {
	src := typicalTool()
	b.ReportAllocs()
	for b.Loop() {
		if p := checkImports("typescript", src, nil); p != nil {
			b.Fatal(p)
		}
	}
}

// typicalTool is a 50-line TypeScript tool of the kind models write for
// code mode.
func typicalTool() string {
	src := `type Row = {id: number; name: string; score: number; tags: string[]};

interface Args {
  query: string;
  limit?: number;
  minScore?: number;
}

function normalize(s: string): string {
  return s.trim().toLowerCase();
}

function rank(rows: Row[], min: number): Row[] {
  return rows
    .filter((r) => r.score >= min)
    .sort((a, b) => b.score - a.score || a.id - b.id);
}

function summarize(rows: Row[]) {
  const byTag = new Map<string, number>();
  for (const r of rows) {
    for (const t of r.tags) {
      byTag.set(t, (byTag.get(t) ?? 0) + 1);
    }
  }
  return [...byTag.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5);
}

export async function run(args: Args, context: any) {
  const query = normalize(args.query ?? "");
  if (!query) {
    throw new context.InvalidInput("query is required");
  }
  context.log(` + "`searching for ${query}`" + `, "info");
  const found = await context.tools.search_docs({q: query, limit: 50});
  const rows: Row[] = (found.items ?? []).map((it: any, i: number) => ({
    id: i,
    name: String(it.title ?? ""),
    score: Number(it.score ?? 0),
    tags: Array.isArray(it.tags) ? it.tags.map(String) : [],
  }));
  const ranked = rank(rows, args.minScore ?? 0.5);
  const top = ranked.slice(0, args.limit ?? 10);
  context.log(` + "`${ranked.length} of ${rows.length} rows kept`" + `, "debug");
  return {
    query,
    top: top.map((r) => ({id: r.id, name: r.name, score: r.score})),
    tags: summarize(ranked),
    remainingMs: context.remaining(),
  };
}
`
	return src
}

// A run waits for its import-check lane only as long as its context
// allows, and a large source's lane does not hold up small sources.
func TestImportCheckLanes(t *testing.T) {
	importCheckLarge <- struct{}{} // a large check in flight
	defer func() { <-importCheckLarge }()
	small := "export function run() { return 1 }\n"
	if problems, err := Check(context.Background(), "javascript", small, nil); err != nil || problems != nil {
		t.Fatalf("a small source behind a large check: %v %v", problems, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	large := small + strings.Repeat(" ", smallImportCheckBytes)
	if _, err := Check(ctx, "javascript", large, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a large source waiting on a busy lane past its context: err %v", err)
	}
}

// With packages, exactly their bare names and clean subpaths pass (static,
// side-effect, re-export and literal dynamic imports); every other import
// is still refused, naming what the run may import.
func TestCheckImportsAllowsExactlyThePackages(t *testing.T) {
	pkgs := []string{"left-pad", "@scope/util"}
	for _, tc := range []struct {
		name, lang, src string
		ok              bool
	}{
		{"a package by name", "javascript", "import lp from \"left-pad\";\nexport function run() { return lp('x', 3) }\n", true},
		{"a scoped package and a subpath", "typescript", "import u from \"@scope/util\";\nimport * as f from \"@scope/util/lib/fp.js\";\nexport { f };\nexport function run(): number { return u }\n", true},
		{"a re-export and a literal dynamic import", "javascript", "export * from \"left-pad/sub\";\nexport async function run() { return (await import(\"left-pad\")).default }\n", true},
		{"a side-effect import of a package", "javascript", "import \"left-pad\";\nexport function run() { return 1 }\n", true},
		{"another package", "javascript", "import x from \"right-pad\";\nexport function run() { return x }\n", false},
		{"a name sharing a prefix", "javascript", "import x from \"left-padding\";\nexport function run() { return x }\n", false},
		{"a subpath climbing out", "javascript", "import x from \"left-pad/../../etc/passwd\";\nexport function run() { return x }\n", false},
		{"a subpath with a dot segment", "javascript", "import x from \"left-pad/./x\";\nexport function run() { return x }\n", false},
		{"an empty subpath segment", "javascript", "import x from \"left-pad//x\";\nexport function run() { return x }\n", false},
		{"the npm: form", "javascript", "import x from \"npm:left-pad@1.3.0\";\nexport function run() { return x }\n", false},
		{"a relative import", "javascript", "import x from \"./left-pad\";\nexport function run() { return x }\n", false},
		{"a URL", "javascript", "import x from \"https://esm.sh/left-pad\";\nexport function run() { return x }\n", false},
		{"jsr:", "javascript", "import x from \"jsr:@std/path\";\nexport function run() { return x }\n", false},
		{"node:", "javascript", "import fs from \"node:fs\";\nexport function run() { return fs }\n", false},
		{"a package with import attributes", "javascript", "import x from \"left-pad\" with {type: \"json\"};\nexport function run() { return x }\n", false},
		{"a computed import()", "javascript", "export async function run(a) { return import(a.name) }\n", false},
		{"require()", "javascript", "export function run() { return require(\"left-pad\") }\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := checkImports(tc.lang, tc.src, pkgs)
			if tc.ok && problems != nil {
				t.Fatalf("refused: %+v", problems)
			}
			if !tc.ok && problems == nil {
				t.Fatal("passed")
			}
			if !tc.ok && strings.Contains(problems[0].Message, "is not an import") && !strings.Contains(problems[0].Message, "left-pad, @scope/util") {
				t.Errorf("the refusal does not name the run's packages: %s", problems[0].Message)
			}
		})
	}
	if p := checkImports("javascript", "import lp from \"left-pad\";\nexport function run() { return 1 }\n", nil); p == nil {
		t.Error("without packages a bare import passed")
	}
}
