package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the smoke work; replaced when it lands.
func newSmokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "smoke",
		Short: "smoke (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("smoke: not built yet")
		},
	}
}
