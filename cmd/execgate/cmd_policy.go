package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/tenancy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test Rego policies and show decisions (the security team's loop)",
	}
	cmd.AddCommand(newPolicyTestCmd(), newPolicyEvalCmd())
	return cmd
}

func newPolicyTestCmd() *cobra.Command {
	var (
		run       string
		verbose   bool
		asJSON    bool
		threshold float64
	)
	cmd := &cobra.Command{
		Use:   "test [DIR...]",
		Short: "Run the Rego tests of the default policies plus DIR(s), with coverage",
		Long: `Runs every test_ rule of the embedded default policies and of the given
directories (modules and _test.rego files) with OPA's tester, compiled with the
same restricted capabilities as the gateway, and reports pass/fail and the
coverage of the policy modules. Exit status: 0 when every test passes (and
coverage reaches --threshold), 1 otherwise.`,
		RunE: func(cmd *cobra.Command, dirs []string) error {
			rep, err := policy.RunTests(cmd.Context(), policy.TestOptions{Defaults: policies.FS, Dirs: dirs, Filter: run})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printTestReport(out, rep, verbose)
			}
			if !rep.OK() {
				if rep.Passed+rep.Failed == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "execgate: no tests ran")
				}
				return exitError{code: 1}
			}
			if rep.Coverage < threshold {
				fmt.Fprintf(cmd.ErrOrStderr(), "execgate: coverage %.1f%% is below --threshold %.1f%%\n", rep.Coverage, threshold)
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&run, "run", "", "run only tests whose name matches this regular expression")
	f.BoolVarP(&verbose, "verbose", "v", false, "list every test and per-file coverage")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.Float64Var(&threshold, "threshold", 0, "fail when coverage (percent) is below this")
	return cmd
}

func printTestReport(w io.Writer, rep *policy.TestReport, verbose bool) {
	for _, r := range rep.Results {
		if r.Pass && !verbose {
			continue
		}
		status := "PASS"
		if !r.Pass {
			status = "FAIL"
		}
		fmt.Fprintf(w, "%s %s.%s (%s:%d, %v)\n", status, r.Package, r.Name, r.File, r.Line, r.Duration.Round(1000))
		if r.Error != "" {
			fmt.Fprintf(w, "    error: %s\n", r.Error)
		}
		if !r.Pass && r.Output != "" {
			fmt.Fprintf(w, "    output:\n%s", indent(r.Output, "      "))
		}
	}
	if rep.Failed > 0 {
		fmt.Fprintln(w, strings.Repeat("-", 72))
	}
	fmt.Fprintf(w, "PASS: %d/%d\n", rep.Passed, rep.Passed+rep.Failed)
	if rep.Failed > 0 {
		fmt.Fprintf(w, "FAIL: %d/%d\n", rep.Failed, rep.Passed+rep.Failed)
	}
	fmt.Fprintf(w, "coverage: %.1f%% of policy lines\n", rep.Coverage)
	if verbose {
		files := make([]string, 0, len(rep.Files))
		for f := range rep.Files {
			files = append(files, f)
		}
		sort.Strings(files)
		for _, f := range files {
			fmt.Fprintf(w, "  %6.1f%%  %s\n", rep.Files[f], f)
		}
		for _, nc := range rep.NotCovered {
			fmt.Fprintf(w, "  not covered: %s\n", nc)
		}
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

func newPolicyEvalCmd() *cobra.Command {
	var (
		tenantID  string
		inputFile string
		subject   string
		roles     []string
		dirs      []string
	)
	cmd := &cobra.Command{
		Use:   "eval --tenant T --input FILE",
		Short: "Show the policy decision for an execute request body, and the exact input used",
		Long: `Builds the policy input from an execute request body (FILE, or - for stdin),
decoded and validated exactly as POST /v1/execute decodes it,
and the tenant's policy data from the config, evaluates the policies the
gateway would (defaults, policy.dirs, the bundle, plus --dir), and prints
{"decision": …, "input": …}. Nothing is run.

The tenant comes from the config, as the gateway's does: --config FILE (or
EXECGATE_TENANTS); without one only the embedded default's tenant "demo"
exists. The repository's example:

  execgate policy eval --config deploy/examples/config.yaml --tenant acme \
    --input deploy/examples/requests/unpinned.json --dir deploy/examples/policies

Exit status: 0 allow, 2 deny, 1 error (including an undefined decision).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			tenant, err := findTenant(cfg.Tenants, tenantID)
			if err != nil {
				return err
			}
			body, err := readInput(cmd.InOrStdin(), inputFile)
			if err != nil {
				return err
			}
			// The gateway's own decoder: the same body is refused, defaulted
			// and mapped to the policy input exactly as POST /v1/execute does.
			req, err := gateway.DecodeExecuteRequest(cfg.Server, body)
			if err != nil {
				return fmt.Errorf("%s: %w", inputFile, err)
			}
			if req.TenantID != "" && req.TenantID != tenant.ID {
				return fmt.Errorf("%s: tenant_id %q does not match --tenant %q (the gateway answers 403)", inputFile, req.TenantID, tenant.ID)
			}
			engine, err := policy.New(cmd.Context(), policy.Options{
				Defaults: policies.FS,
				Dirs:     append(append([]string(nil), cfg.Policy.Dirs...), dirs...),
				Bundle:   cfg.Policy.Bundle,
				Logger:   slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				return err
			}
			in := policy.BuildInput(tenant, tenancy.Principal{TenantID: tenant.ID, Subject: subject, Roles: roles}, req.PolicyRequest())
			d, derr := engine.Decide(cmd.Context(), in)
			out := struct {
				Decision *policy.Decision `json:"decision,omitempty"`
				Error    string           `json:"error,omitempty"`
				Input    policy.Input     `json:"input"`
			}{Input: in}
			if derr != nil {
				out.Error = derr.Error()
			} else {
				out.Decision = &d
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false) // reasons quote requirements such as "six>=1.0"
			if err := enc.Encode(out); err != nil {
				return err
			}
			switch {
			case derr != nil:
				return fmt.Errorf("policy error (decision %s): %w", d.ID, derr)
			case !d.Allow:
				return exitError{code: 2}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenantID, "tenant", "", "tenant id (its policy data comes from the config: --config or EXECGATE_TENANTS)")
	f.StringVar(&inputFile, "input", "", "execute request body (JSON file, - for stdin)")
	f.StringVar(&subject, "sub", "policy-eval", "subject (token sub) to evaluate as")
	f.StringSliceVar(&roles, "role", []string{tenancy.RoleExecutor}, "roles of the subject (repeat or comma-separate)")
	f.StringSliceVar(&dirs, "dir", nil, "extra policy directory to layer on the defaults and policy.dirs (repeatable)")
	_ = cmd.MarkFlagRequired("tenant")
	_ = cmd.MarkFlagRequired("input")
	return cmd
}

func findTenant(tenants []tenancy.Tenant, id string) (tenancy.Tenant, error) {
	ids := make([]string, 0, len(tenants))
	for _, t := range tenants {
		if t.ID == id {
			return t, nil
		}
		ids = append(ids, t.ID)
	}
	return tenancy.Tenant{}, fmt.Errorf("%w %q (configured: %s; tenants come from the config file, --config FILE, or EXECGATE_TENANTS)",
		tenancy.ErrUnknownTenant, id, strings.Join(ids, ", "))
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading input: %w", err)
	}
	if len(b) == 0 {
		return nil, errors.New("reading input: " + name + " is empty")
	}
	return b, nil
}
