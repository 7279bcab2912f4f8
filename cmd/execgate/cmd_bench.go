package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/cmd/execgate/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var o bench.Options
	var asJSON bool
	var snekbox string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure start-up, gateway latency/throughput, overhead and memory (DESIGN §11)",
		Long: `Runs, in one process on this machine: bare /usr/bin/python3 -c pass, and for each
runtime (--runtimes) raw nsjail running its trivial Python and the harness in its
rootfs, the runner in-process, ` + "`execgate run`" + ` cold; the gateway over HTTP end to end cold,
with a warm pool and at isolation level process, at each concurrency, the runtimes
taking turns at each level (with their ratios to the first); the gateway's overhead with a no-op
executor, memory, the gateway's memory around concurrent output floods, and one
code-mode tool call (a direct MCP SDK call vs the governed bridge vs
context.tools.run from a jail, against an MCP server on loopback in-process).
Prints Markdown tables for BENCHMARKS.md. Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			o.Config = cfg
			o.Snekbox = strings.Fields(snekbox)
			o.ConfigFile = flags.configFile
			o.Progress = os.Stderr
			rep, err := bench.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return rep.JSON(cmd.OutOrStdout())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Command: `%s`\n\n", rep.Options.Command())
			rep.Markdown(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Runs, "runs", 20, "samples per start-up row")
	f.IntVar(&o.Requests, "requests", 200, "measured requests per gateway row")
	f.IntSliceVar(&o.Concurrency, "concurrency", []int{1, 2, 8, 32}, "gateway concurrency levels")
	f.IntVar(&o.WarmPool, "warm-pool", 4, "warm jails per profile for the warm rows")
	f.IntVar(&o.BridgeCalls, "bridge-calls", 500, "measured tool calls per bridge row")
	f.BoolVar(&asJSON, "json", false, "print every row as JSON (name, isolation, concurrency, p50, p99, req/s, CPU per run, errors) instead of Markdown")
	f.StringSliceVar(&o.Sections, "sections", nil, "subset of: startup, gateway, overhead, memory, output, bridge, files (default all), and snekbox (only when named: level jail beside snekbox, needs --snekbox)")
	f.StringSliceVar(&o.Modes, "modes", nil, "gateway rows' modes, subset of: cold, warm, process (default all)")
	f.StringSliceVar(&o.Languages, "languages", nil, "start-up and gateway rows' languages, subset of: python, javascript (default all; JavaScript runs on the default runtime)")
	f.StringSliceVar(&o.Runtimes, "runtimes", nil, "the Python runtimes measured, each in turn in the same run (default: sandbox.runtimes)")
	f.StringVar(&snekbox, "snekbox", "", "section snekbox: the snekbox driver's command, split at spaces (scripts/bench-snekbox.sh passes it)")
	return cmd
}
