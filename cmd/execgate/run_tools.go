package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// localTools gives a local run (execgate run --tenant T) the tenant's tool
// servers from the config, governed exactly as in the gateway: the policy
// decides the grant (narrowed by --tools) and every call. It returns the
// bridge for spec.Bridge and a function ending the pooled sessions; a
// policy that denies the run is an error naming its reasons.
func localTools(ctx context.Context, cfg *config.Config, tenantID string, tools []string, stderr io.Writer) (sandbox.Bridge, func(), error) {
	tenant, err := findTenant(cfg.Tenants, tenantID)
	if err != nil {
		return nil, nil, fmt.Errorf("--tenant: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := policy.New(ctx, policy.Options{Defaults: policies.FS, Dirs: cfg.Policy.Dirs, Logger: log, DecisionCache: -1})
	if err != nil {
		return nil, nil, fmt.Errorf("loading policies: %w", err)
	}
	who := tenancy.Principal{TenantID: tenant.ID, Subject: "execgate-run", Roles: []string{tenancy.RoleExecutor}}
	dec, err := eng.Decide(ctx, policy.BuildInput(tenant, who, policy.Request{Mode: "run", Tools: tools}))
	if err != nil {
		return nil, nil, fmt.Errorf("deciding the run's tools: %w", err)
	}
	if !dec.Allow {
		return nil, nil, fmt.Errorf("policy denies the run: %v", dec.Reasons)
	}
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{tenant.ID: tenant.Tools}, toolbridge.Options{Policy: eng, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	run := hub.NewRun(toolbridge.RunInfo{
		TenantID: tenant.ID, Plan: tenant.Plan, TenantData: tenant.Policy,
		Subject: who.Subject, Roles: who.Roles, DecisionID: dec.ID, Granted: dec.Tools,
	})
	return run, hub.Close, nil
}
