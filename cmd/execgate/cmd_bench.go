package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the bench work; replaced when it lands.
func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench",
		Short: "bench (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("bench: not built yet")
		},
	}
}
