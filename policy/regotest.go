package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/cover"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestOptions select the Rego tests RunTests runs.
type TestOptions struct {
	// Defaults holds the default policies and their tests (policies.FS).
	Defaults fs.FS
	// Dirs are extra policy directories (modules and _test.rego files),
	// checked like the engine checks them.
	Dirs []string
	// Filter, when set, is a regular expression selecting test names.
	Filter string
	// Timeout bounds each test. Default 5 s.
	Timeout time.Duration
}

// TestResult is one Rego test (a rule named test_…).
type TestResult struct {
	Package  string        `json:"package"`
	Name     string        `json:"name"`
	File     string        `json:"file"`
	Line     int           `json:"line"`
	Pass     bool          `json:"pass"`
	Error    string        `json:"error,omitempty"` // evaluation error, if any
	Duration time.Duration `json:"duration_ns"`
	Output   string        `json:"output,omitempty"` // print() output
}

// TestReport is the outcome of RunTests.
type TestReport struct {
	Results []TestResult `json:"results"`
	Passed  int          `json:"passed"`
	Failed  int          `json:"failed"`
	// Coverage is the percentage of policy lines (test files excluded)
	// the tests evaluated, over all modules.
	Coverage float64 `json:"coverage"`
	// Files maps each policy module to its coverage percentage.
	Files map[string]float64 `json:"files"`
	// NotCovered lists uncovered lines as file:line.
	NotCovered []string `json:"not_covered,omitempty"`
}

// OK reports whether every test passed (and there was at least one).
func (r *TestReport) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// RunTests runs the Rego tests of the defaults and the directories with
// OPA's tester, compiled with the same restricted capabilities and strict
// builtin errors as the engine, and measures coverage of the policy modules.
// It runs two passes: the shipped tests against the shipped policy alone
// (a rule in a directory must not fail a built-in test: the shipped policy
// is tested as shipped), then the directories' tests against the shipped
// policy with the directories' modules layered on it, as the gateway serves
// them. Each file's coverage comes from the pass that tests it. An error
// means the tests could not run (a module does not parse or compile);
// failing tests are in the report.
func RunTests(ctx context.Context, opts TestOptions) (*TestReport, error) {
	if opts.Defaults == nil {
		return nil, errors.New("policy tests: TestOptions.Defaults is nil (pass policies.FS)")
	}
	defaults, err := readFS(opts.Defaults, "policies/", true)
	if err != nil {
		return nil, fmt.Errorf("reading default policies: %w", err)
	}
	extras, err := readDirs(opts.Dirs, true)
	if err != nil {
		return nil, err
	}
	g := newGuard(slices.DeleteFunc(slices.Clone(defaults), func(s source) bool { return isTestModule(s.name) }))
	var errs []error
	shipped := map[string]*ast.Module{} // the defaults and their tests
	layered := map[string]*ast.Module{} // the default policy modules and the directories' modules and tests
	extraPolicy := map[string]*ast.Module{}
	seen := map[string]bool{}
	for i, s := range withExtras(defaults, extras) { // the defaults first, then the extras
		if seen[s.name] {
			return nil, errLoadedTwice(s.name)
		}
		seen[s.name] = true
		if err := checkBuiltins(s); err != nil {
			errs = append(errs, err)
		}
		switch {
		case i < len(defaults):
			shipped[s.name] = s.module
			if !isTestModule(s.name) {
				layered[s.name] = s.module
			}
		default:
			layered[s.name] = s.module
			if !isTestModule(s.name) {
				extraPolicy[s.name] = s.module
				if err := g.check(s); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	shippedPolicy := maps.Clone(shipped)
	maps.DeleteFunc(shippedPolicy, func(name string, _ *ast.Module) bool { return isTestModule(name) })

	rep := &TestReport{Files: map[string]float64{}}
	var lines coverLines
	if err := runTestPass(ctx, opts, shipped, shippedPolicy, rep, &lines); err != nil {
		return nil, err
	}
	if len(layered) > len(shippedPolicy) {
		if err := runTestPass(ctx, opts, layered, extraPolicy, rep, &lines); err != nil {
			return nil, err
		}
	}
	sort.SliceStable(rep.Results, func(i, j int) bool {
		a, b := rep.Results[i], rep.Results[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})
	if lines.covered+lines.notCovered > 0 {
		rep.Coverage = 100 * float64(lines.covered) / float64(lines.covered+lines.notCovered)
	}
	sort.Strings(rep.NotCovered)
	return rep, nil
}

// coverLines counts policy lines over the passes of RunTests.
type coverLines struct{ covered, notCovered int }

// runTestPass runs the tests in modules and adds their results, and the
// coverage of the policy modules in covered, to rep and lines.
func runTestPass(ctx context.Context, opts TestOptions, modules, covered map[string]*ast.Module, rep *TestReport, lines *coverLines) error {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cov := cover.New()
	store := inmem.New()
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return fmt.Errorf("policy tests: %w", err)
	}
	defer store.Abort(ctx, txn)
	runner := tester.NewRunner().
		SetCompiler(newCompiler()).
		SetStore(store).
		SetModules(modules).
		SetCoverageQueryTracer(cov).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true).
		SetTimeout(timeout).
		Filter(opts.Filter)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		return fmt.Errorf("compiling policy tests: %w", err)
	}
	for r := range ch {
		tr := TestResult{
			Package:  strings.TrimPrefix(r.Package, "data."),
			Name:     r.Name,
			Pass:     r.Pass(),
			Duration: r.Duration,
			Output:   string(r.Output),
		}
		if r.Location != nil {
			tr.File, tr.Line = r.Location.File, r.Location.Row
		}
		if r.Error != nil {
			tr.Error = r.Error.Error()
		}
		if tr.Pass {
			rep.Passed++
		} else if !r.Skip {
			rep.Failed++
		}
		rep.Results = append(rep.Results, tr)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("policy tests: %w", err)
	}

	cr := cov.Report(covered)
	for name := range covered {
		fr := cr.Files[name]
		if fr == nil {
			continue
		}
		lines.covered += fr.CoveredLines
		lines.notCovered += fr.NotCoveredLines
		rep.Files[name] = fr.Coverage
		for _, rg := range fr.NotCovered {
			for l := rg.Start.Row; l <= rg.End.Row; l++ {
				rep.NotCovered = append(rep.NotCovered, fmt.Sprintf("%s:%d", name, l))
			}
		}
	}
	return nil
}
