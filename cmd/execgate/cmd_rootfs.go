package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the rootfs work; replaced when it lands.
func newRootfsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rootfs",
		Short: "rootfs (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("rootfs: not built yet")
		},
	}
}
