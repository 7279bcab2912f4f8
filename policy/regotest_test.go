package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// minCoverage is the coverage the default policies' tests must reach.
const minCoverage = 90.0

func TestRegoTestsPassWithCoverage(t *testing.T) {
	rep, err := RunTests(context.Background(), TestOptions{Defaults: defaultsFS})
	require.NoError(t, err)
	for _, r := range rep.Results {
		require.True(t, r.Pass, "%s.%s (%s:%d) failed: %s", r.Package, r.Name, r.File, r.Line, r.Error)
	}
	require.True(t, rep.OK())
	require.Greater(t, rep.Passed, 60, "the default policies have their tests")
	require.GreaterOrEqual(t, rep.Coverage, minCoverage, "not covered: %v", rep.NotCovered)
	for _, f := range []string{"main", "access", "network", "limits", "egress", "packages", "tools", "platform"} {
		require.Contains(t, rep.Files, "policies/"+f+".rego")
	}
	require.NotContains(t, rep.Files, "policies/main_test.rego", "coverage counts policy modules only")
	t.Logf("default policies: %d tests passed, coverage %.1f%%", rep.Passed, rep.Coverage)
}

func TestRegoTestsOfTheExamplePolicy(t *testing.T) {
	rep, err := RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{"../deploy/examples/policies"}})
	require.NoError(t, err)
	require.True(t, rep.OK(), "failed: %+v", rep.Results)
	require.Contains(t, rep.Files, "../deploy/examples/policies/acme.rego")
	var acme int
	for _, r := range rep.Results {
		if r.Package == "execgate.ext.acme_test" {
			acme++
		}
	}
	require.Greater(t, acme, 5)
	require.GreaterOrEqual(t, rep.Coverage, minCoverage)
}

func TestRegoTestFailuresAreReported(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "team_test.rego", `package team_test

import data.execgate.main

test_passes if main.decision.allow == false with input as {}

test_fails if main.decision.allow with input as {}

test_errors if to_number("x") == 1
`)
	rep, err := RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{dir}, Filter: "team_test"})
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Equal(t, 1, rep.Passed)
	require.Equal(t, 2, rep.Failed)
	var errored bool
	for _, r := range rep.Results {
		if r.Name == "test_errors" {
			errored = true
			require.Contains(t, r.Error, "to_number", "builtin errors are raised, as when serving")
		}
	}
	require.True(t, errored)
}

func TestRegoTestsRefuseWhatTheEngineRefuses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "bad.rego", "package execgate.tools\n\ngranted := [\"shell\"]\n")
	_, err := RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{dir}})
	require.ErrorContains(t, err, "overlaps the default package execgate.tools")

	writeFile(t, dir, "bad.rego", "package ext.x\n\nv := http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1:1\"})\n")
	_, err = RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{dir}})
	require.ErrorContains(t, err, "http.send")
}

func TestTheRepositoryPoliciesDirIsTheDefaultsNotADuplicate(t *testing.T) {
	// `execgate policy test policies/` in the repository layers the
	// embedded defaults on their own files: identical modules are skipped.
	rep, err := RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{"../policies"}})
	require.NoError(t, err)
	require.True(t, rep.OK())
	require.Greater(t, rep.Passed, 60)

	_, err = New(context.Background(), Options{Defaults: defaultsFS, Dirs: []string{"../policies"}, Logger: quietLogger()})
	require.NoError(t, err, "serving with policy.dirs naming the defaults' own directory")

	// A different file under a default's name is still refused, by name.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "policies"), 0o755))
	writeFile(t, filepath.Join(dir, "policies"), "access.rego", "package ext.other\n\nx := 1\n")
	t.Chdir(dir)
	_, err = RunTests(context.Background(), TestOptions{Defaults: defaultsFS, Dirs: []string{"policies"}})
	require.ErrorContains(t, err, "policies/access.rego: loaded twice (an embedded default policy")
	_, err = New(context.Background(), Options{Defaults: defaultsFS, Dirs: []string{"policies"}, Logger: quietLogger()})
	require.ErrorContains(t, err, "loaded twice (an embedded default policy")
}
