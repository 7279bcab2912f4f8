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
		{"an unknown tenant", "", `unknown tenant "nope" (configured: demo)`, []string{"--tenant", "nope", "--input", file}},
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
