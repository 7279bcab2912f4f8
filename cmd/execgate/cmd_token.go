package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

func newTokenCmd() *cobra.Command {
	var (
		tenant string
		roles  []string
		ttl    time.Duration
		sub    string
	)
	cmd := &cobra.Command{
		Use:   "token --tenant T [--role executor]... [--ttl 1h] [--sub S]",
		Short: "Mint a dev token with the configured HS256 key; prints only the token",
		Long: `Mint a JWT signed with the dev HS256 key (auth.hs256_secret_file; the
embedded default keeps it in the state dir) and print only the token, so
$(execgate token --tenant demo) works. Refuses when only public keys or a
JWKS are configured: then tokens come from your identity provider.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			tok, err := mintToken(cfg, tenant, roles, ttl, sub)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "tenant id (required; must be configured)")
	f.StringArrayVar(&roles, "role", []string{tenancy.RoleExecutor}, "role to grant (repeatable): "+strings.Join(tenancy.Roles(), ", "))
	f.DurationVar(&ttl, "ttl", time.Hour, "token lifetime")
	f.StringVar(&sub, "sub", "", "subject (default: $USER or execgate-cli)")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

func mintToken(cfg *config.Config, tenant string, roles []string, ttl time.Duration, sub string) (string, error) {
	var known []string
	for _, t := range cfg.Tenants {
		known = append(known, t.ID)
	}
	if !slices.Contains(known, tenant) {
		return "", fmt.Errorf("tenant %q is not configured (configured: %s)", tenant, strings.Join(known, ", "))
	}
	valid := tenancy.Roles()
	for _, r := range roles {
		if !slices.Contains(valid, r) {
			return "", fmt.Errorf("--role %q is not one of %s", r, strings.Join(valid, ", "))
		}
	}
	if cfg.Auth.HS256SecretFile == "" {
		return "", auth.ErrNoSigningKey
	}
	if cfg.Embedded {
		// The same key `execgate serve` uses; created on first use.
		if _, err := auth.EnsureDevKey(cfg.Auth.HS256SecretFile); err != nil {
			return "", fmt.Errorf("dev key: %w", err)
		}
	}
	if sub == "" {
		sub = os.Getenv("USER")
		if sub == "" {
			sub = "execgate-cli"
		}
	}
	s, err := auth.NewSigner(cfg.Auth, nil)
	if err != nil {
		return "", err
	}
	return s.Mint(auth.Claims{Subject: sub, TenantID: tenant, Roles: roles}, ttl)
}
