// Package sourcecheck refuses a JavaScript or TypeScript tool's source
// before anything runs it: every import (of any kind) and every syntax
// error, located by line and column, with esbuild's parser (pure Go). The
// runner (package sandbox) checks a source before a jail starts, so the
// import map inside the jail is the second wall.
package sourcecheck

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/evanw/esbuild/pkg/api"
)

// The import check: a JavaScript or TypeScript tool may not import
// anything but the npm packages of its run's environment, by bare name. Deno 2.9.8 lets every module import data: URLs whatever its
// permissions (no permission gates them, and an import map cannot
// prefix-match data:), so with eval and new Function disabled a data:
// import would be code generation from strings by another name. Every
// other import (blob:, relative, file:, node:, npm:, jsr:, remote, import
// attributes) is refused by the import map inside the jail; this check
// refuses them all before any jail starts, so the import map is the
// second wall.
//
// It uses esbuild's parser (github.com/evanw/esbuild, pure Go) through its
// public API, in two passes over the source:
//
//  1. api.Transform, which never touches the file system: esbuild reports
//     every import() and require() whose argument is not a string literal
//     (message ids unsupported-dynamic-import and unsupported-require-call,
//     raised to errors here), and every syntax error.
//  2. api.Build with Bundle and a plugin whose OnResolve refuses every path:
//     each static import, side-effect import, export … from and import()
//     of a literal (a template without substitutions included) becomes an
//     error at the specifier. Bundling resolves glob patterns (import(`./${x}`))
//     by walking the file system, outside plugins; pass 1 has refused every
//     non-literal argument, so pass 2 never sees one.
//
// For TypeScript, verbatimModuleSyntax keeps imports whose bindings are
// unused (esbuild would drop them; Deno would load them); import type and
// export type are erased by both. An import in a branch esbuild proves dead
// (if (false) …) is not reported: it never runs.
//
// esbuild stops before printing when a pass has errors, and printing is
// what costs more than linear time on deep nesting (its renamer), so a
// sentinel import(0) appended on a line of its own makes every pass end in
// an error; the sentinel's own error is dropped. The sentinel also makes
// the source a module (importSentinel). The parser recurses once
// per nesting level (about 8 KiB of stack each), which is why the check
// reads at most maxImportCheckBytes.

// maxImportCheckBytes is the largest JavaScript or TypeScript source the
// import check reads (larger ones are refused): the parser's stack grows
// with nesting, so this bounds the memory a hostile source can make one
// check use (measured in imports_test.go, BenchmarkImportCheck).
const maxImportCheckBytes = 64 << 10

// maxImportProblems caps the problems reported for one source.
const maxImportProblems = 10

// maxSyntaxErrorText is how much of esbuild's syntax error a message
// quotes.
const maxSyntaxErrorText = 500

// maxSpecifierText is how much of a refused specifier a message quotes.
const maxSpecifierText = 80

// Problem is one reason a source is refused, at a 1-based line and column
// (UTF-16 units, as V8 and the TypeScript checker count them; 0: unknown).
type Problem struct {
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

// importSentinel ends every source the check parses (see above). Its
// export {} makes esbuild parse the source as a module whatever it holds,
// as Deno loads it: parsed as a script, "-->" at the start of a line would
// be an HTML-like comment to esbuild and an operator to V8, and an import
// after it unseen.
const importSentinel = "\n;import(0);\nexport {};\n"

const (
	msgIDDynamicImport = "unsupported-dynamic-import"
	msgIDRequireCall   = "unsupported-require-call"
	importPluginName   = "execgate-imports"
)

var importLogOverride = map[string]api.LogLevel{
	msgIDDynamicImport: api.LogLevelError,
	msgIDRequireCall:   api.LogLevelError,
}

// verbatimModuleSyntax keeps TypeScript imports esbuild would elide as
// unused.
const importTsconfig = `{"compilerOptions": {"verbatimModuleSyntax": true}}`

// refuseImports is the esbuild plugin of pass 2: every path is refused, at
// its specifier, except the bare specifiers of packages (a package's name,
// or its name and a subpath, without import attributes), which are left
// to the import map.
func refuseImports(packages []string) api.Plugin {
	return api.Plugin{Name: importPluginName, Setup: func(b api.PluginBuild) {
		b.OnResolve(api.OnResolveOptions{Filter: ".*"}, func(a api.OnResolveArgs) (api.OnResolveResult, error) {
			if len(a.With) == 0 && PackageSpecifier(a.Path, packages) {
				return api.OnResolveResult{Path: a.Path, External: true}, nil
			}
			msg := fmt.Sprintf("imports are not available to tools: %q", clipRunes(a.Path, maxSpecifierText))
			if len(packages) > 0 {
				msg = fmt.Sprintf("%q is not an import this run may make (its packages: %s, and their subpaths)", clipRunes(a.Path, maxSpecifierText), clipRunes(strings.Join(packages, ", "), 200))
			}
			return api.OnResolveResult{Errors: []api.Message{{Text: msg}}}, nil
		})
	}}
}

// subpathRE is a package subpath: segments of URL-safe characters.
var subpathRE = regexp.MustCompile(`^[A-Za-z0-9._~@+-]+(?:/[A-Za-z0-9._~@+-]+)*$`)

// PackageSpecifier reports whether spec imports one of packages by its
// bare name: the name itself, or the name, "/" and a subpath without "."
// or ".." segments ("lodash/fp", not "lodash/../x").
func PackageSpecifier(spec string, packages []string) bool {
	for _, p := range packages {
		if spec == p {
			return true
		}
		sub, ok := strings.CutPrefix(spec, p+"/")
		if !ok || !subpathRE.MatchString(sub) {
			continue
		}
		for _, seg := range strings.Split(sub, "/") {
			if seg == "." || seg == ".." {
				return false
			}
		}
		return true
	}
	return false
}

// The import check's parse costs about 12 µs and 8 KB of stack per byte
// of a hostile source (deeply nested prefix operators or arrows; measured
// 240 ms and ~150 MB at 16 KiB), a few microseconds per byte of a typical
// one. Two lanes bound what the checks in flight hold without letting a
// tenant's large sources delay everybody's small ones: sources up to
// smallImportCheckBytes share four slots (at most ~60 MB and ~50 ms each),
// larger ones one slot (up to ~500 MB and ~0.6 s at maxImportCheckBytes).
// A run waits for its lane at most as long as its context allows.
const smallImportCheckBytes = 4 << 10

var (
	importCheckSmall = make(chan struct{}, 4)
	importCheckLarge = make(chan struct{}, 1)
)

// Check returns why src, a tool in language "javascript" or "typescript",
// may not run: its imports (but those of packages, the bare names of the
// run's npm packages and their subpaths; PackageSpecifier) and syntax
// errors, in source order, at most maxImportProblems; nil when it has
// none. The parse runs in a goroutine
// of its own, whose stack (grown by deep nesting) is freed when it ends,
// in the lane of the source's size. A panic in the parser refuses the
// source; a context that ends while the check waits for its lane is
// returned as its error.
func Check(ctx context.Context, language, src string, packages []string) ([]Problem, error) {
	lane := importCheckSmall
	if len(src) > smallImportCheckBytes {
		lane = importCheckLarge
	}
	select {
	case lane <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-lane }()
	done := make(chan []Problem, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- []Problem{{Message: fmt.Sprintf("the import check failed: %v", v)}}
			}
		}()
		done <- checkImports(language, src, packages)
	}()
	return <-done, nil
}

// checkImports returns why src (a tool in language javascript or
// typescript) may not run: its imports and syntax errors, in source order;
// nil when it has none.
func checkImports(language, src string, packages []string) []Problem {
	if len(src) > maxImportCheckBytes {
		return []Problem{{Message: fmt.Sprintf("the source is %d bytes; a %s tool is checked for imports up to %d bytes", len(src), language, maxImportCheckBytes)}}
	}
	loader, file := api.LoaderJS, "tool.js"
	if language == "typescript" {
		loader, file = api.LoaderTS, "tool.ts"
	}
	contents := src + importSentinel
	sentinelLine := strings.Count(src, "\n") + 2
	t := api.Transform(contents, api.TransformOptions{
		Loader:      loader,
		Sourcefile:  file,
		Format:      api.FormatESModule,
		Target:      api.ESNext,
		LogLevel:    api.LogLevelSilent,
		LogOverride: importLogOverride,
		TsconfigRaw: importTsconfig,
	})
	if problems := importProblems(t.Errors, src, sentinelLine); problems != nil {
		return problems
	}
	b := api.Build(api.BuildOptions{
		Stdin:       &api.StdinOptions{Contents: contents, Loader: loader, Sourcefile: file},
		Bundle:      true,
		Write:       false,
		Format:      api.FormatESModule,
		Target:      api.ESNext,
		Platform:    api.PlatformNeutral,
		LogLevel:    api.LogLevelSilent,
		LogOverride: importLogOverride,
		TsconfigRaw: importTsconfig,
		Plugins:     []api.Plugin{refuseImports(packages)},
	})
	return importProblems(b.Errors, src, sentinelLine)
}

// importProblems turns one pass's errors into problems. The pass must have
// reported the sentinel (or a syntax error): a pass that did not reach it
// read the source differently than expected, and the source is refused.
func importProblems(errs []api.Message, src string, sentinelLine int) []Problem {
	var problems []Problem
	sawSentinel := false
	for _, m := range errs {
		if m.ID == msgIDDynamicImport && m.Location != nil && m.Location.Line == sentinelLine {
			sawSentinel = true
			continue
		}
		problems = append(problems, importProblem(m, src, sentinelLine-1))
	}
	if problems == nil && !sawSentinel {
		return []Problem{{Message: "the import check could not read the source to its end"}}
	}
	slices.SortStableFunc(problems, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	problems = slices.Compact(problems)
	if len(problems) > maxImportProblems {
		problems = problems[:maxImportProblems]
	}
	return problems
}

// importProblem locates m in src (lastLine lines long): an error past the
// end of src (in the sentinel, for an unterminated comment or template) is
// reported at its end.
func importProblem(m api.Message, src string, lastLine int) Problem {
	var p Problem
	switch {
	case m.PluginName == importPluginName:
		p.Message = m.Text
	case m.ID == msgIDDynamicImport:
		p.Message = "imports are not available to tools: an import() whose specifier or options are computed at run time"
	case m.ID == msgIDRequireCall:
		p.Message = "imports are not available to tools: require()"
	default:
		p.Message = "syntax error: " + clipRunes(m.Text, maxSyntaxErrorText)
	}
	if l := m.Location; l != nil {
		line, col := l.Line, min(max(l.Column, 0), len(l.LineText))
		text := l.LineText[:col]
		if line > lastLine {
			line, text = lastLine, src[strings.LastIndexByte(src, '\n')+1:]
		}
		p.Line, p.Col = line, utf16Len(text)+1
		p.Message += fmt.Sprintf(" at line %d, column %d", p.Line, p.Col)
	}
	return p
}

// utf16Len is the length of s in UTF-16 code units.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// clipRunes cuts s to at most n bytes on a rune boundary, marking the cut.
func clipRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
