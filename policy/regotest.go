package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
// An error means the tests could not run (a module does not parse or
// compile); failing tests are in the report.
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
	modules := map[string]*ast.Module{}
	policyModules := map[string]*ast.Module{}
	for _, s := range withExtras(defaults, extras) {
		if _, dup := modules[s.name]; dup {
			return nil, errLoadedTwice(s.name)
		}
		modules[s.name] = s.module
		if err := checkBuiltins(s); err != nil {
			errs = append(errs, err)
		}
		if isTestModule(s.name) {
			continue
		}
		policyModules[s.name] = s.module
		if !strings.HasPrefix(s.name, "policies/") {
			if err := g.check(s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cov := cover.New()
	store := inmem.New()
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("policy tests: %w", err)
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
		return nil, fmt.Errorf("compiling policy tests: %w", err)
	}
	rep := &TestReport{Files: map[string]float64{}}
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
		return nil, fmt.Errorf("policy tests: %w", err)
	}
	sort.Slice(rep.Results, func(i, j int) bool {
		a, b := rep.Results[i], rep.Results[j]
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Line < b.Line
	})

	cr := cov.Report(policyModules)
	var covered, notCovered int
	for name := range policyModules {
		fr := cr.Files[name]
		if fr == nil {
			continue
		}
		covered += fr.CoveredLines
		notCovered += fr.NotCoveredLines
		rep.Files[name] = fr.Coverage
		for _, rg := range fr.NotCovered {
			for l := rg.Start.Row; l <= rg.End.Row; l++ {
				rep.NotCovered = append(rep.NotCovered, fmt.Sprintf("%s:%d", name, l))
			}
		}
	}
	if covered+notCovered > 0 {
		rep.Coverage = 100 * float64(covered) / float64(covered+notCovered)
	}
	sort.Strings(rep.NotCovered)
	return rep, nil
}
