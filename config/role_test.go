package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoleConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     []string
		wantErr string // substring; "" means valid
	}{
		{"the default role is all and needs no dispatch section",
			"auth: {hs256_secret_file: /k}\n", nil, ""},
		{"an unknown role is refused",
			"server: {role: worker}\nauth: {hs256_secret_file: /k}\n", nil, `server.role: "worker" is not one of`},
		{"a gateway needs the spec key",
			"server: {role: gateway}\nauth: {hs256_secret_file: /k}\nquota: {backend: redis, redis_url: redis://r:6379}\n", nil, "dispatch.spec_key_file: required"},
		{"a gateway takes the quota Redis by default",
			"server: {role: gateway}\nauth: {hs256_secret_file: /k}\nquota: {backend: redis, redis_url: redis://r:6379}\ndispatch: {spec_key_file: /s}\n", nil, ""},
		{"an executor needs no JWT keys, policies or tenants",
			"server: {role: executor}\ndispatch: {redis_url: redis://r:6379, spec_key_file: /s}\n", nil, ""},
		{"an executor needs a Redis",
			"server: {role: executor}\ndispatch: {spec_key_file: /s}\n", nil, "dispatch.redis_url: required"},
		{"the role can come from the environment",
			"dispatch: {redis_url: redis://r:6379, spec_key_file: /s}\n", []string{"EXECGATE_SERVER_ROLE=executor"}, ""},
		{"a misspelled dispatch key is refused",
			"server: {role: executor}\ndispatch: {redis_url: redis://r:6379, spec_keyfile: /s}\n", nil, "spec_keyfile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte("state_dir: /tmp/eg-role\n"+tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(path, tt.env)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Load: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Load error = %v, want one containing %q", err, tt.wantErr)
			case err == nil && cfg.Dispatch.KeyPrefix != "execgate":
				t.Fatalf("dispatch.key_prefix = %q, want the quota prefix", cfg.Dispatch.KeyPrefix)
			}
		})
	}
}
