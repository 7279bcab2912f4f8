package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// smokeSource is the probe tool of DESIGN §4.
const smokeSource = "async def run(args, context):\n    return {\"ok\": True}\n"

func newSmokeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "smoke",
		Short: "Run one real jailed execution of a trivial tool and print its envelope",
		Long: `Run the probe tool (async def run(args, context): return {"ok": True}) once
in a real jail, building the rootfs first if needed, and print the envelope.
Exit status 0 only when the run returned {"ok": true}; on failure the output
carries nsjail's own log lines and a hint.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			spec := sandbox.Spec{
				ExecutionID: newExecutionID(),
				TenantID:    "smoke",
				Language:    "python",
				Source:      smokeSource,
				Entrypoint:  "run",
				Limits:      limits.Default,
			}
			res, runErr := runLocal(cmd.Context(), cfg, spec, runFlags{}, cmd.ErrOrStderr())
			if err := reportRun(cmd.OutOrStdout(), spec, res, runErr, asJSON, nil); err != nil {
				if runErr == nil && len(res.NsjailLog) > 0 && !asJSON {
					fmt.Fprintf(cmd.ErrOrStderr(), "nsjail log:\n%s", indentBlock(joinLines(res.NsjailLog)))
				}
				return err
			}
			if string(res.Result) != `{"ok":true}` {
				fmt.Fprintf(cmd.ErrOrStderr(), "smoke: the probe returned %s, want {\"ok\":true}\n", res.Result)
				return exitError{code: exitRunError}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON envelope")
	return cmd
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}
