package bench

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/toolbridge/bridgebench"
)

// bridge measures one code-mode tool call (bridgebench): a direct MCP SDK
// call vs the governed bridge in-process vs context.tools.run from a jail,
// against an MCP server on loopback in this process. The policy is the
// config's (defaults and policy.dirs), as the gateway would decide.
func (r *Report) bridge(ctx context.Context) error {
	cfg := r.Options.Config
	eng, err := policy.New(ctx, policy.Options{Defaults: policies.FS, Dirs: cfg.Policy.Dirs, Logger: slog.New(slog.DiscardHandler), DecisionCache: cfg.Policy.CacheOption()})
	if err != nil {
		return fmt.Errorf("bench: bridge: %w", err)
	}
	r.progress("bridge: %d tool calls each: direct, governed, from a jail", r.Options.BridgeCalls)
	runner, err := r.newRunner(ctx, r.Options.Runtimes[0], 0)
	if err != nil {
		return err
	}
	defer runner.Close()
	res, err := bridgebench.Run(ctx, bridgebench.Options{Calls: r.Options.BridgeCalls, Policy: eng, Runner: runner})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.Bridge = res
	return nil
}
