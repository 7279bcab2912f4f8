package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the diagnose work; replaced when it lands.
func newDiagnoseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diagnose",
		Short: "diagnose (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("diagnose: not built yet")
		},
	}
}
