package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
)

func TestMintToken(t *testing.T) {
	embedded := func(t *testing.T) *config.Config {
		t.Helper()
		cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}

	t.Run("the embedded default creates the dev key and the token verifies", func(t *testing.T) {
		cfg := embedded(t)
		tok, err := mintToken(cfg, "demo", []string{"executor", "admin"}, time.Hour, "alice")
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(cfg.Auth.HS256SecretFile)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("dev key: %v, mode %v", err, st.Mode())
		}
		v, err := auth.NewVerifier(context.Background(), cfg.Auth, auth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := v.Verify(context.Background(), tok)
		if err != nil || c.TenantID != "demo" || c.Subject != "alice" || len(c.Roles) != 2 {
			t.Fatalf("Verify = %+v, %v", c, err)
		}
		again, err := mintToken(cfg, "demo", []string{"executor"}, time.Hour, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(context.Background(), again); err != nil {
			t.Fatalf("a second token (same key) does not verify: %v", err)
		}
	})
	t.Run("an unknown tenant is refused with the configured ones", func(t *testing.T) {
		_, err := mintToken(embedded(t), "acme", []string{"executor"}, time.Hour, "")
		if err == nil || !strings.Contains(err.Error(), `tenant "acme" is not configured (configured: demo)`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("an unknown role is refused", func(t *testing.T) {
		_, err := mintToken(embedded(t), "demo", []string{"root"}, time.Hour, "")
		if err == nil || !strings.Contains(err.Error(), `--role "root" is not one of`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("only public keys or a JWKS configured: refused", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "config.yaml")
		yaml := "state_dir: " + dir + "\nauth:\n  jwks_url: https://idp.example/jwks.json\ntenants:\n  - id: demo\n"
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mintToken(cfg, "demo", []string{"executor"}, time.Hour, ""); !errors.Is(err, auth.ErrNoSigningKey) {
			t.Fatalf("err = %v, want auth.ErrNoSigningKey", err)
		}
	})
}
