package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

func newServeCmd() *cobra.Command {
	var role string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway (default: the embedded default config)",
		Long: `Run the HTTP gateway. Without --config it starts the embedded default:
tenant "demo" (network none only), in-memory quotas, the default policies, a
rootfs and a dev signing key under the state dir, and prints a ready curl line.
SIGINT/SIGTERM drain in-flight runs for server.shutdown_grace_seconds; SIGHUP
reloads the policies.

--role (server.role) splits the service (issue #15): "gateway" decides and
hands runs to executors over Redis (dispatch.*; no nsjail, no privileges),
"executor" runs what gateways decided (needs the sandbox, dispatch.redis_url
and dispatch.spec_key_file only) and serves /healthz and /metrics; "all"
(default) does both in one process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if role != "" {
				os.Setenv("EXECGATE_SERVER_ROLE", role)
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cfg.Server.WithDefaults().Role == gateway.RoleExecutor {
				return serveExecutor(cmd.Context(), cfg)
			}
			return serve(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "all | gateway | executor (default: server.role, all)")
	return cmd
}

func serve(ctx context.Context, cfg *config.Config) error {
	stopTelemetry, err := startTelemetry(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	a, err := app.New(ctx, app.Options{Config: cfg, Progress: os.Stderr, HandleSIGHUP: true})
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		_ = a.Stop(context.Background())
		return err
	}
	fmt.Fprintf(os.Stderr, "execgate: listening on %s (state dir %s)\n", a.URL(), cfg.StateDir)
	if err := a.SandboxErr(); err != nil {
		fmt.Fprintf(os.Stderr, "execgate: WARNING: every run will be refused (503 SandboxUnavailable): %v\n", err)
	}
	if cfg.Embedded {
		printCurl(a, cfg)
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "execgate: shutting down, draining in-flight runs")
	case err := <-a.Done():
		_ = a.Stop(context.Background())
		return fmt.Errorf("http server: %w", err)
	}
	return a.Stop(context.Background())
}

// startTelemetry sets up the OTel exporters of cfg; the function it returns
// flushes and stops them (at most 5 s).
func startTelemetry(ctx context.Context, cfg *config.Config) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx, cfg.Telemetry)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}

// printCurl prints, once, a ready-to-paste request with a fresh demo token.
func printCurl(a *app.App, cfg *config.Config) {
	s, err := a.Signer()
	if err != nil {
		return
	}
	tenant := config.DemoTenant().ID
	tok, err := s.Mint(auth.Claims{Subject: "execgate-serve", TenantID: tenant, Roles: []string{tenancy.RoleExecutor}}, 12*time.Hour)
	if err != nil {
		fmt.Fprintf(os.Stderr, "execgate: minting the demo token: %v\n", err)
		return
	}
	state := "is ready"
	if a.SandboxErr() != nil {
		state = "is serving but CANNOT RUN TOOLS (see the warning above)"
	}
	fmt.Printf(`# execgate %s (tenant %q, token valid 12h; more: execgate token --tenant %s --state-dir %s)
curl -s -H "Authorization: Bearer %s" -H 'Content-Type: application/json' -d '{"source":"def run(args, context):\n    return {\"ok\": True}\n"}' %s/v1/execute
# console: open %s/ui/ and sign in with that token
`, state, tenant, tenant, cfg.StateDir, tok, a.URL(), a.URL())
}
