package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPolicy runs `policy args…` and returns stdout and the error.
func runPolicy(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("EXECGATE_STATE_DIR", t.TempDir())
	cmd := newPolicyCmd()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func exitCode(err error) int {
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestPolicyTestCommand(t *testing.T) {
	out, err := runPolicy(t, "", "test")
	if err != nil {
		t.Fatalf("policy test: %v\n%s", err, out)
	}
	if !strings.Contains(out, "PASS: ") || !strings.Contains(out, "coverage: 100.0% of policy lines") || strings.Contains(out, "FAIL") {
		t.Fatalf("unexpected report:\n%s", out)
	}

	out, err = runPolicy(t, "", "test", "-v", "../../deploy/examples/policies")
	if err != nil {
		t.Fatalf("policy test with the example: %v\n%s", err, out)
	}
	if !strings.Contains(out, "PASS execgate.ext.acme_test.test_maintenance_window") || !strings.Contains(out, "deploy/examples/policies/acme.rego") {
		t.Fatalf("the example's tests and coverage are not listed:\n%s", out)
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team_test.rego"), []byte("package team_test\n\ntest_broken if 1 == 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runPolicy(t, "", "test", dir)
	if exitCode(err) != 1 || !strings.Contains(out, "FAIL team_test.test_broken") || !strings.Contains(out, "FAIL: 1/") {
		t.Fatalf("a failing test: exit %d (%v)\n%s", exitCode(err), err, out)
	}

	if _, err := runPolicy(t, "", "test", "--threshold", "100.1"); exitCode(err) != 1 {
		t.Fatalf("coverage under --threshold: exit %d", exitCode(err))
	}
}

func TestPolicyEvalCommand(t *testing.T) {
	probe := `{"execution_id":"probe","tenant_id":"demo","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}`
	file := filepath.Join(t.TempDir(), "probe.json")
	if err := os.WriteFile(file, []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	type result struct {
		Decision *struct {
			ID      string   `json:"id"`
			Allow   bool     `json:"allow"`
			Reasons []string `json:"reasons"`
		} `json:"decision"`
		Error string `json:"error"`
		Input struct {
			Tenant  struct{ ID string }
			Request map[string]any
		} `json:"input"`
	}
	parse := func(t *testing.T, out string) result {
		t.Helper()
		var r result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		return r
	}

	t.Run("an allowed request prints the decision and the input, exit 0", func(t *testing.T) {
		out, err := runPolicy(t, "", "eval", "--tenant", "demo", "--input", file)
		if err != nil {
			t.Fatalf("eval: %v\n%s", err, out)
		}
		r := parse(t, out)
		if r.Decision == nil || !r.Decision.Allow || r.Decision.ID == "" {
			t.Fatalf("decision %+v", r.Decision)
		}
		if r.Input.Tenant.ID != "demo" || r.Input.Request["source_sha256"] == "" || r.Input.Request["source"] != nil {
			t.Fatalf("input %+v", r.Input)
		}
		if strings.Contains(out, "async def") {
			t.Fatal("the source is printed in the input")
		}
	})

	t.Run("a denied request prints its reasons, exit 2", func(t *testing.T) {
		out, err := runPolicy(t, `{"source":"x","network_access":"proxy"}`, "eval", "--tenant", "demo", "--input", "-")
		if exitCode(err) != 2 {
			t.Fatalf("exit %d (%v)", exitCode(err), err)
		}
		r := parse(t, out)
		if r.Decision == nil || r.Decision.Allow || len(r.Decision.Reasons) != 1 || r.Decision.ID == "" {
			t.Fatalf("decision %+v", r.Decision)
		}
	})

	t.Run("the input is the gateway's: defaults filled, fixture tools asked for in test mode", func(t *testing.T) {
		body := `{"source": "x", "mode": "test", "tools": ["b.one"], "fixtures": {"tools": {"a.two": 1}}}`
		out, err := runPolicy(t, body, "eval", "--tenant", "demo", "--input", "-")
		if err != nil && exitCode(err) != 2 {
			t.Fatalf("eval: %v\n%s", err, out)
		}
		req := parse(t, out).Input.Request
		if got := fmt.Sprint(req["tools"]); got != "[a.two b.one]" {
			t.Errorf("input.request.tools = %s, want the narrowed and the fixture tools [a.two b.one]", got)
		}
		if req["language"] != "python" || req["entrypoint"] != "run" || req["network_access"] != "none" || req["mode"] != "test" {
			t.Errorf("defaults: %+v", req)
		}
	})

	t.Run("--role and --dir change the decision", func(t *testing.T) {
		out, err := runPolicy(t, "", "eval", "--tenant", "demo", "--input", file, "--role", "policy-author", "--dir", "../../deploy/examples/policies")
		if exitCode(err) != 2 || !strings.Contains(out, "subject lacks role executor") {
			t.Fatalf("exit %d (%v)\n%s", exitCode(err), err, out)
		}
	})

	bad := []struct {
		name, stdin, wantErr string
		args                 []string
	}{
		{"an unknown tenant", "", `unknown tenant "nope" (configured: demo; tenants come from the config file, --config FILE, or EXECGATE_TENANTS)`, []string{"--tenant", "nope", "--input", file}},
		{"a bad field", `{"source": "x", "limits": {"memory_mb": "x"}}`, "limits.memory_mb: must be an integer", []string{"--tenant", "demo", "--input", "-"}},
		{"an unknown field, as the gateway refuses it", `{"source": "x", "tool": ["a"]}`, "tool: unknown field", []string{"--tenant", "demo", "--input", "-"}},
		{"a body without source, as the gateway refuses it", `{"language": "python"}`, "source: is required", []string{"--tenant", "demo", "--input", "-"}},
		{"a tenant mismatch", `{"source": "x", "tenant_id": "acme"}`, `tenant_id "acme" does not match --tenant "demo"`, []string{"--tenant", "demo", "--input", "-"}},
		{"a missing file", "", "reading input", []string{"--tenant", "demo", "--input", "/nonexistent.json"}},
		{"no --tenant", "", `required flag(s) "tenant" not set`, []string{"--input", file}},
	}
	for _, tc := range bad {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, err := runPolicy(t, tc.stdin, append([]string{"eval"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// docFiles are the Markdown files whose examples the tests run: the
// README, the example policy's README and the documentation site's pages.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "examples", "policies", "README.md")}
	_ = filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	return files
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// docCommandLines returns every line of the docs that starts with prefix
// (a command as a user would paste it), with the file it is in.
func docCommandLines(t *testing.T, prefix string) map[string]string {
	t.Helper()
	lines := map[string]string{}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				lines[strings.TrimSpace(l)] = f
			}
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no line of the docs starts with %q", prefix)
	}
	return lines
}

// docRegoBlock returns the first ```rego block of the docs containing want.
func docRegoBlock(t *testing.T, want string) string {
	t.Helper()
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(string(b), "```rego\n")[1:] {
			block, _, _ = strings.Cut(block, "```")
			if strings.Contains(block, want) {
				return block
			}
		}
	}
	t.Fatalf("no rego block of the docs contains %q", want)
	return ""
}

// runRoot runs the whole command line (global flags included) from dir and
// returns stdout and the error.
func runRoot(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("EXECGATE_STATE_DIR", t.TempDir())
	t.Chdir(dir)
	saved := flags
	t.Cleanup(func() { flags = saved })
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	if err != nil {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

// TestThePolicyEvalExampleOfTheDocsWorksAsWritten runs the docs' policy
// eval lines against the committed example (deploy/examples/config.yaml,
// whose tenant acme the line names) through the root command. Lines that
// read files an earlier command of their block writes run, with their
// block, in internal/docexamples.
func TestThePolicyEvalExampleOfTheDocsWorksAsWritten(t *testing.T) {
	seen := 0
	for line, file := range docCommandLines(t, "execgate policy eval ") {
		if !strings.Contains(line, "--config deploy/examples/config.yaml ") {
			continue
		}
		seen++
		// The docs show the exit status with a shell suffix.
		line = strings.TrimSuffix(line, ` || echo "exit $?"`)
		t.Run(line, func(t *testing.T) {
			if strings.ContainsAny(line, `'"$\`) {
				t.Fatalf("%s: the example needs a shell; keep it plain words", file)
			}
			out, err := runRoot(t, repoRoot(t), strings.Fields(line)[1:]...)
			if exitCode(err) != 2 {
				t.Fatalf("%s: exit %d (%v), want 2 (denied by acme's rule)\n%s", file, exitCode(err), err, out)
			}
			var r struct {
				Decision struct {
					Allow   bool     `json:"allow"`
					Reasons []string `json:"reasons"`
				} `json:"decision"`
				Input struct {
					Tenant struct {
						ID   string `json:"id"`
						Plan string `json:"plan"`
					} `json:"tenant"`
				} `json:"input"`
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			want := `acme: requirement "six>=1.16" must pin an exact version with ==`
			if r.Input.Tenant.ID != "acme" || len(r.Decision.Reasons) != 1 || r.Decision.Reasons[0] != want {
				t.Fatalf("tenant %+v, reasons %q; want acme's one reason %q", r.Input.Tenant, r.Decision.Reasons, want)
			}
			if !strings.Contains(out, "six>=1.16") {
				t.Errorf("the reason's >= is escaped in the output (want it as the README quotes it):\n%s", out)
			}
		})
	}
	if seen == 0 {
		t.Fatal("no line of the docs runs execgate policy eval against deploy/examples/config.yaml")
	}
}

func TestAUserRuleDoesNotBreakTheShippedPolicyTests(t *testing.T) {
	rule := docRegoBlock(t, "deny_tool_call contains")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "shell.rego"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	// The user's own test of the rule: it sees the rule layered on the
	// defaults.
	userTest := `package team_test

import data.execgate.main

test_shell_is_denied_for_executors if {
	d := main.tool_call with input as {
		"version": 1,
		"tenant": {"id": "t1", "data": {}},
		"subject": {"sub": "ci", "roles": ["executor"]},
		"call": {"tool": "shell.exec", "server": "shell", "name": "exec", "args_bytes": 2, "index": 0, "elapsed_ms": 0, "counts": {}},
	}
	not d.allow
	"shell.* is denied for role executor" in d.reasons
}
`
	if err := os.WriteFile(filepath.Join(dir, "shell_test.rego"), []byte(userTest), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runPolicy(t, "", "test", "-v", dir)
	if err != nil {
		t.Fatalf("policy test with the README's deny_tool_call rule: exit %d (%v)\n%s", exitCode(err), err, out)
	}
	for _, want := range []string{
		"PASS execgate.main_test.", // a shipped test, run against the shipped policy
		"PASS team_test.test_shell_is_denied_for_executors",
		filepath.Join(dir, "shell.rego"), // the user's module has its coverage
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}
