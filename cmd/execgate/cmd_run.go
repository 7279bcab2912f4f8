package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the run work; replaced when it lands.
func newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "run (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("run: not built yet")
		},
	}
}
