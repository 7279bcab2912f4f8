package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// packagesDenied is `execgate run` refusing packages the tenant's policy
// forbids (exit status 2, like `execgate policy eval` on a deny).
type packagesDenied struct {
	tenant  string
	reasons []string
}

func (e *packagesDenied) Error() string {
	return fmt.Sprintf("the package policy of tenant %q denies these requirements:\n  %s", e.tenant, strings.Join(e.reasons, "\n  "))
}

func (e *packagesDenied) ExitCode() int { return 2 }

// localEnvironment resolves --requirements (or reads --lock) into an
// environment of envs (the run's runtime's; for JavaScript and TypeScript
// npm packages, runtime "") and checks every package with the package
// policy of tenantID, exactly as `execgate serve` does for a run asking
// for them.
// It returns nil when the run asks for no packages; a list uv cannot
// resolve is a DependencyError result (failure).
func localEnvironment(ctx context.Context, cfg *config.Config, envs *environments.Cache, runtime, tenantID, language string, reqs []string, lockFile string, logw io.Writer) (*environments.Environment, *sandbox.ErrorInfo, error) {
	var env environments.Environment
	npmRun := environments.EcosystemOf(language) == environments.EcosystemNPM
	switch {
	case len(reqs) > 0 && lockFile != "":
		return nil, nil, fmt.Errorf("--requirements and --lock: give one")
	case len(reqs) > 0:
		resolve := envs.Resolve
		if npmRun {
			resolve = envs.ResolveNPM // npm packages, name@version
		}
		e, failure, err := resolve(ctx, reqs)
		if err != nil || failure != nil {
			return nil, failure, err
		}
		env = e
	case lockFile != "":
		b, err := os.ReadFile(lockFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--lock: %w", err)
		}
		if env, err = envs.FromLock(string(b)); err != nil {
			return nil, nil, fmt.Errorf("--lock %s: %w", lockFile, err)
		}
		if env.Ecosystem != environments.EcosystemOf(language) {
			return nil, nil, fmt.Errorf("--lock %s: a %s tool takes a lock of its own language's packages (an npm lock for javascript and typescript)", lockFile, language)
		}
	default:
		return nil, nil, nil
	}
	tenant, err := findTenant(cfg.Tenants, tenantID)
	if err != nil {
		return nil, nil, fmt.Errorf("--tenant: %w", err)
	}
	engine, err := policy.New(ctx, policy.Options{
		Defaults: policies.FS,
		Dirs:     cfg.Policy.Dirs,
		Bundle:   cfg.Policy.Bundle,
		Logger:   slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, nil, err
	}
	in := policy.BuildInput(tenant, tenancy.Principal{TenantID: tenant.ID, Subject: "execgate-run", Roles: []string{tenancy.RoleExecutor}},
		policy.Request{Language: language, Requirements: reqs, Packages: execution.PolicyPackages(&env), Runtime: runtime})
	d, err := engine.Decide(ctx, in)
	if err != nil {
		return nil, nil, fmt.Errorf("package policy: %w", err)
	}
	switch {
	case !d.Allow:
		return nil, nil, &packagesDenied{tenant: tenant.ID, reasons: d.Reasons}
	case !d.RequirementsAllowed:
		return nil, nil, &packagesDenied{tenant: tenant.ID, reasons: []string{"requirements are not allowed for this tenant"}}
	}
	return &env, nil, nil
}
