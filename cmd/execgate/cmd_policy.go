package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// TODO: owned by the policy work; replaced when it lands.
func newPolicyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "policy",
		Short: "policy (not built yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("policy: not built yet")
		},
	}
}
