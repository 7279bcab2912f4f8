package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the token work; replaced when it lands.
func newTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "token",
		Short: "token (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("token: not built yet")
		},
	}
}
