package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// DecisionQuery is the entry point every decision evaluates.
const DecisionQuery = "data.execgate.main.decision"

// ToolCallQuery is the entry point every tool call of a run evaluates.
const ToolCallQuery = "data.execgate.main.tool_call"

// CallbackQuery is the entry point the callback_url of an async execution
// evaluates.
const CallbackQuery = "data.execgate.main.callback"

// mainPackage is the one default package extension modules may add to.
const mainPackage = "data.execgate.main"

// forbiddenBuiltins are removed from the capabilities policies compile
// against: they reach the network, the host or the OPA runtime. A module
// calling one is refused at compile time.
//
//   - http.send, net.* (net.lookup_ip_addr and the CIDR helpers): network.
//   - opa.runtime: exposes the process environment and config.
//   - json.match_schema, json.verify_schema: a schema's $ref can read local
//     files (file://) and fetch URLs.
var forbiddenBuiltins = []string{"http.send", "opa.runtime", "json.match_schema", "json.verify_schema"}

func forbidden(name string) bool {
	return strings.HasPrefix(name, "net.") || slices.Contains(forbiddenBuiltins, name)
}

// Capabilities returns the restricted OPA capabilities every policy module
// (defaults, directories, bundles and `policy test`) compiles against: this
// OPA version's builtins minus the forbidden ones, and no network hosts.
func Capabilities() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	c.Builtins = slices.DeleteFunc(c.Builtins, func(b *ast.Builtin) bool { return forbidden(b.Name) })
	c.AllowNet = []string{}
	return c
}

// source is one parsed policy module.
type source struct {
	name   string
	raw    []byte
	module *ast.Module
}

func parseModule(name string, raw []byte) (source, error) {
	m, err := ast.ParseModuleWithOpts(name, string(raw), ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return source{}, &ModuleError{File: name, Reason: err.Error()}
	}
	return source{name: name, raw: raw, module: m}, nil
}

func isRegoModule(name string) bool {
	base := filepath.Base(name)
	return strings.HasSuffix(base, ".rego") && !strings.HasPrefix(base, ".")
}

func isTestModule(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// readFS parses the .rego files of fsys, named prefix+path. Tests are
// included only when withTests is set.
func readFS(fsys fs.FS, prefix string, withTests bool) ([]source, error) {
	var out []source
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if !isRegoModule(path) || (!withTests && isTestModule(path)) {
			return nil
		}
		raw, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		src, err := parseModule(prefix+path, raw)
		if err != nil {
			return err
		}
		out = append(out, src)
		return nil
	})
	return out, err
}

// readDirs parses the .rego files under each directory (recursively, hidden
// files and directories skipped).
func readDirs(dirs []string, withTests bool) ([]source, error) {
	var out []source
	for _, dir := range dirs {
		info, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("reading policy dir: %w", err)
		}
		if !info.IsDir() {
			return nil, fmt.Errorf("reading policy dir: %s is not a directory", dir)
		}
		srcs, err := readFS(os.DirFS(dir), filepath.Clean(dir)+string(filepath.Separator), withTests)
		if err != nil {
			return nil, fmt.Errorf("reading policy dir %s: %w", dir, err)
		}
		out = append(out, srcs...)
	}
	return out, nil
}

// withExtras returns the defaults followed by the extension modules, less
// any extension module byte-identical to an embedded default: pointing
// `policy test` or `policy.dirs` at the repository's own policies/ directory
// layers the defaults on themselves, which is no extension at all.
func withExtras(defaults, extras []source) []source {
	known := make(map[string]bool, len(defaults))
	for _, s := range defaults {
		known[string(s.raw)] = true
	}
	all := slices.Clone(defaults)
	for _, s := range extras {
		if !known[string(s.raw)] {
			all = append(all, s)
		}
	}
	return all
}

// errLoadedTwice names a module whose file name is already taken.
func errLoadedTwice(name string) error {
	return &ModuleError{File: name, Reason: "loaded twice (an embedded default policy or an earlier directory has a file of this name; give extension modules their own names)"}
}

// guard holds what the default policies own, to refuse extension modules
// (directories, bundles) that reach into them.
type guard struct {
	reserved []ast.Ref // default packages other than execgate.main
}

func newGuard(defaults []source) guard {
	var g guard
	seen := map[string]bool{}
	for _, s := range defaults {
		p := s.module.Package.Path
		if p.String() == mainPackage || seen[p.String()] {
			continue
		}
		seen[p.String()] = true
		g.reserved = append(g.reserved, p)
	}
	return g
}

// check refuses an extension module that could weaken the defaults:
//
//  1. Its package may not be a default package, inside one or above one
//     (other than execgate.main itself), nor inside execgate.main.
//  2. In package execgate.main it may only add `deny contains …` (runs),
//     `deny_tool_call contains …` (tool calls) and `deny_callback contains …`
//     (callback URLs) rules.
//     Any other rule there could replace a name main.rego relies on
//     (decision, an import, even a builtin such as count), so helpers go in
//     the module's own package.
func (g guard) check(s source) error {
	path := s.module.Package.Path
	main := ast.MustParseRef(mainPackage)
	refuse := func(format string, args ...any) error {
		return &ModuleError{File: s.name, Reason: fmt.Sprintf(format, args...)}
	}
	if path.Equal(main) {
		for _, r := range s.module.Rules {
			ref := r.Head.Ref()
			if len(ref) != 1 || (ref[0].String() != "deny" && ref[0].String() != "deny_tool_call" && ref[0].String() != "deny_callback") {
				return refuse("line %d: package execgate.main takes only `deny contains reason if { … }`, `deny_tool_call contains reason if { … }` and `deny_callback contains reason if { … }` rules; put helper rule %s in your own package", r.Location.Row, ref)
			}
			if r.Default || len(r.Head.Args) > 0 || r.Head.RuleKind() != ast.MultiValue {
				return refuse("line %d: %s must be a partial set rule (`%s contains reason if { … }`)", r.Location.Row, ref, ref)
			}
		}
		return nil
	}
	if path.HasPrefix(main) {
		return refuse("package %s is inside the default package execgate.main", strings.TrimPrefix(path.String(), "data."))
	}
	for _, rp := range append(g.reserved, main) {
		if path.HasPrefix(rp) || rp.HasPrefix(path) {
			return refuse("package %s overlaps the default package %s; extend package execgate.main with deny rules instead",
				strings.TrimPrefix(path.String(), "data."), strings.TrimPrefix(rp.String(), "data."))
		}
	}
	return nil
}

// checkBuiltins refuses a module that calls a forbidden builtin, with a
// clearer message than the compiler's "undefined function".
func checkBuiltins(s source) error {
	var bad []string
	note := func(name string) {
		if forbidden(name) && !slices.Contains(bad, name) {
			bad = append(bad, name)
		}
	}
	ast.WalkExprs(s.module, func(e *ast.Expr) bool {
		if e.IsCall() {
			note(e.Operator().String())
		}
		return false
	})
	ast.WalkTerms(s.module, func(t *ast.Term) bool {
		if call, ok := t.Value.(ast.Call); ok && len(call) > 0 {
			note(call[0].String())
		}
		return false
	})
	if len(bad) > 0 {
		return &ModuleError{File: s.name, Reason: fmt.Sprintf("calls %s; network, runtime and schema-loading builtins are disabled for policies", strings.Join(bad, ", "))}
	}
	return nil
}

// compiled is one prepared policy set.
type compiled struct {
	query    rego.PreparedEvalQuery
	callQ    rego.PreparedEvalQuery // ToolCallQuery
	cbQ      rego.PreparedEvalQuery // CallbackQuery
	revision string
	modules  []string
	seedQ    *seedQuery    // nil when no rule depends on the tenant alone
	seeds    seeds         // per-tenant values of seedQ, for this policy set only
	memo     *decisionMemo // nil when decisions are not remembered
	memoPlan memoPlan
}

// compile checks the extension modules against the defaults, compiles
// everything with the restricted capabilities and prepares the decision
// query. data is the base document (bundle data; nil for none).
//
// memoSize is the most decisions remembered (see memo.go); <= 0 disables.
func compile(ctx context.Context, defaults, extras []source, data map[string]any, revisionTag string, memoSize int) (*compiled, error) {
	all := withExtras(defaults, extras)
	extras = all[len(defaults):]
	g := newGuard(defaults)
	var errs []error
	for _, s := range extras {
		if err := g.check(s); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range all {
		if err := checkBuiltins(s); err != nil {
			errs = append(errs, err)
		}
	}
	if _, ok := data["execgate"]; ok {
		errs = append(errs, errors.New("bundle data: the data.execgate tree belongs to the default policies"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	modules := make(map[string]*ast.Module, len(all))
	names := make([]string, 0, len(all))
	h := sha256.New()
	for _, s := range all {
		if _, dup := modules[s.name]; dup {
			return nil, errLoadedTwice(s.name)
		}
		modules[s.name] = s.module
		names = append(names, s.name)
	}
	sort.Strings(names)
	byName := make(map[string]source, len(all))
	for _, s := range all {
		byName[s.name] = s
	}
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(byName[n].raw))
		h.Write(byName[n].raw)
	}

	c := newCompiler()
	if c.Compile(modules); c.Failed() {
		return nil, fmt.Errorf("compiling policies: %w", c.Errors)
	}
	var store storage.Store
	if data != nil {
		store = inmem.NewFromObject(data)
	} else {
		store = inmem.New()
	}
	pq, err := rego.New(
		rego.Query(DecisionQuery),
		rego.Compiler(c),
		rego.Store(store),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing policies: %w", err)
	}
	callQ, err := rego.New(
		rego.Query(ToolCallQuery),
		rego.Compiler(c),
		rego.Store(store),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing the tool call policy: %w", err)
	}
	cbQ, err := rego.New(
		rego.Query(CallbackQuery),
		rego.Compiler(c),
		rego.Store(store),
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, fmt.Errorf("preparing the callback policy: %w", err)
	}
	seedQ, err := newSeedQuery(ctx, c, store, tenantOnlyRefs(c))
	if err != nil {
		return nil, err
	}
	rev := "sha256:" + hex.EncodeToString(h.Sum(nil))[:16]
	if revisionTag != "" {
		rev = revisionTag + "+" + rev
	}
	plan := analyzeMemo(c)
	return &compiled{query: pq, callQ: callQ, cbQ: cbQ, revision: rev, modules: names, seedQ: seedQ, memoPlan: plan, memo: newDecisionMemo(plan, memoSize)}, nil
}

func newCompiler() *ast.Compiler {
	return ast.NewCompiler().
		WithCapabilities(Capabilities()).
		WithDefaultRegoVersion(ast.RegoV1)
}
