package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the admin work; replaced when it lands.
func newAdminCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "admin",
		Short: "admin (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("admin: not built yet")
		},
	}
}
