package main

import (
	"context"
	"fmt"
	"os"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/config"
)

// serveExecutor runs server.role executor until ctx ends, then drains.
func serveExecutor(ctx context.Context, cfg *config.Config) error {
	stopTelemetry, err := startTelemetry(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	e, err := app.NewExecutor(ctx, app.Options{Config: cfg, Progress: os.Stderr})
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		_ = e.Stop(context.Background())
		return err
	}
	fmt.Fprintf(os.Stderr, "execgate: executor %s taking runs; /healthz and /metrics on %s\n", e.ID(), e.URL())
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "execgate: executor shutting down, draining its runs")
	case err := <-e.Done():
		_ = e.Stop(context.Background())
		return fmt.Errorf("http server: %w", err)
	}
	return e.Stop(context.Background())
}
