package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

func newServeCmd() *cobra.Command {
	var role, traces string
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
(default) does both in one process.

--traces says where spans go: otlp (the OTLP/HTTP exporter, configured by the
OTEL_EXPORTER_OTLP_* variables), stdout (one JSON line per finished span, to
see traces without a collector), none, or a comma-separated list
(stdout,otlp); it overrides telemetry.tracing and telemetry.traces_stdout.
Without OTLP export the gateway also keeps each tenant's recent spans in
memory for GET /v1/admin/traces/{trace_id} (admin, auditor).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var overrides []string
			if role != "" {
				overrides = append(overrides, "EXECGATE_SERVER_ROLE="+role)
			}
			if traces != "" {
				kv, err := tracesOverrides(traces)
				if err != nil {
					return err
				}
				overrides = append(overrides, kv...)
			}
			cfg, err := loadConfig(overrides...)
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
	cmd.Flags().StringVar(&traces, "traces", "", "where spans go: otlp, stdout, none, or a list (stdout,otlp) (default: telemetry.tracing and telemetry.traces_stdout)")
	return cmd
}

// tracesOverrides turns --traces into the telemetry keys' variables.
func tracesOverrides(list string) ([]string, error) {
	otlp, stdout := false, false
	for _, v := range strings.Split(list, ",") {
		switch strings.TrimSpace(v) {
		case "otlp":
			otlp = true
		case "stdout":
			stdout = true
		case "none":
		default:
			return nil, fmt.Errorf("--traces: %q is not otlp, stdout or none", v)
		}
	}
	return []string{"EXECGATE_TELEMETRY_TRACING=" + strconv.FormatBool(otlp),
		"EXECGATE_TELEMETRY_TRACES_STDOUT=" + strconv.FormatBool(stdout)}, nil
}

func serve(ctx context.Context, cfg *config.Config) error {
	// Without OTLP export, the gateway keeps each tenant's recent spans
	// for GET /v1/admin/traces/{trace_id}.
	var ring *telemetry.SpanRing
	if !telemetry.TracingEnabled(cfg.Telemetry, os.LookupEnv) {
		ring = telemetry.NewSpanRing(telemetry.RingOptions{})
	}
	stopTelemetry, err := startTelemetry(ctx, cfg, ring)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	a, err := app.New(ctx, app.Options{Config: cfg, Progress: os.Stderr, HandleSIGHUP: true, Traces: ring})
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
func startTelemetry(ctx context.Context, cfg *config.Config, ring *telemetry.SpanRing) (stop func(), err error) {
	var extra []sdktrace.SpanProcessor
	if ring != nil {
		extra = append(extra, ring)
	}
	shutdown, err := telemetry.Setup(ctx, cfg.Telemetry, extra...)
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
