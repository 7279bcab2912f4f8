package app

import (
	"testing"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
)

// The dev key is created for the embedded default and for a config file
// that names the state dir's own dev.key (deploy/compose's, on a fresh
// volume: serve failed "no such file" there); never for a key file the
// operator provides elsewhere.
func TestDevKeyToCreate(t *testing.T) {
	for _, tt := range []struct {
		cfg  config.Config
		want string
	}{
		{config.Config{Embedded: true, StateDir: "/s", Auth: auth.Config{HS256SecretFile: "/s/dev.key"}}, "/s/dev.key"},
		{config.Config{StateDir: "/var/lib/execgate", Auth: auth.Config{HS256SecretFile: "/var/lib/execgate/dev.key"}}, "/var/lib/execgate/dev.key"},
		{config.Config{StateDir: "/var/lib/execgate/", Auth: auth.Config{HS256SecretFile: "/var/lib/execgate//dev.key"}}, "/var/lib/execgate//dev.key"},
		{config.Config{StateDir: "/var/lib/execgate", Auth: auth.Config{HS256SecretFile: "/etc/execgate/hs256.key"}}, ""},
		{config.Config{StateDir: "/var/lib/execgate"}, ""},
	} {
		if got := devKeyToCreate(&tt.cfg); got != tt.want {
			t.Errorf("devKeyToCreate(state %q, key %q) = %q, want %q", tt.cfg.StateDir, tt.cfg.Auth.HS256SecretFile, got, tt.want)
		}
	}
}
