package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the serve work; replaced when it lands.
func newServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "serve (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("serve: not built yet")
		},
	}
}
