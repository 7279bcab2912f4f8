package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the effective configuration"}
	cmd.AddCommand(&cobra.Command{
		Use:   "print",
		Short: "Print the effective config (file + EXECGATE_… overrides + every default, derived ones too), secrets redacted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			return cfg.Print(cmd.OutOrStdout())
		},
	}, &cobra.Command{
		Use:   "env",
		Short: "List every EXECGATE_… variable and the config key it overrides",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, l := range config.SortedEnvNames() {
				fmt.Fprintln(cmd.OutOrStdout(), l)
			}
			return nil
		},
	})
	return cmd
}
