package config

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoad_EmbeddedDefault(t *testing.T) {
	cfg, err := Load("", []string{"EXECGATE_STATE_DIR=/tmp/eg-state"})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Embedded || len(cfg.Tenants) != 1 || cfg.Tenants[0].ID != "demo" {
		t.Fatalf("embedded default should have exactly tenant demo, got %+v", cfg.Tenants)
	}
	if got := cfg.Tenants[0].Policy["network"]; len(got.([]any)) != 1 || got.([]any)[0] != "none" {
		t.Errorf("demo tenant must be network none only, got %v", got)
	}
	if cfg.Quota.Backend != "memory" {
		t.Errorf("backend = %q, want memory", cfg.Quota.Backend)
	}
	if want := "/tmp/eg-state/dev.key"; cfg.Auth.HS256SecretFile != want {
		t.Errorf("dev key = %q, want %q", cfg.Auth.HS256SecretFile, want)
	}
	if want := "/tmp/eg-state/rootfs"; cfg.Sandbox.RootfsDir != want {
		t.Errorf("rootfs = %q, want %q", cfg.Sandbox.RootfsDir, want)
	}
	if want := "/tmp/eg-state/deps"; cfg.Sandbox.DepsDir != want {
		t.Errorf("deps dir = %q, want %q (the state dir holds the deps cache even with a custom rootfs_dir)", cfg.Sandbox.DepsDir, want)
	}
}

func TestLoad_RejectsUnknownKeys(t *testing.T) {
	_, err := Load("testdata/misspelled_key.yaml", nil)
	if err == nil || !strings.Contains(err.Error(), "redis_ulr") {
		t.Fatalf("want an error naming the misspelled key redis_ulr, got %v", err)
	}
}

func TestLoad_FileAndEnvOverrides(t *testing.T) {
	env := []string{
		"EXECGATE_LISTEN=0.0.0.0:9999",
		"EXECGATE_QUOTA_RATE_FAIL_MODE=local",
		"EXECGATE_EGRESS_ALLOW_CIDRS=10.0.0.0/8, 127.0.0.1/32",
		"EXECGATE_SERVER_MAX_QUEUE=7",
		"EXECGATE_POLICY_WATCH=false",
		"UNRELATED=1",
	}
	cfg, err := Load("testdata/full.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "0.0.0.0:9999" {
		t.Errorf("listen = %q", cfg.Listen)
	}
	if cfg.Quota.RateFailMode != "local" {
		t.Errorf("rate_fail_mode = %q", cfg.Quota.RateFailMode)
	}
	if got := cfg.Egress.AllowCIDRs; len(got) != 2 || got[1] != "127.0.0.1/32" {
		t.Errorf("allow_cidrs = %v", got)
	}
	if cfg.Server.MaxQueue != 7 {
		t.Errorf("max_queue = %d", cfg.Server.MaxQueue)
	}
	if cfg.Policy.Watch == nil || *cfg.Policy.Watch {
		t.Errorf("policy.watch = %v, want false", cfg.Policy.Watch)
	}
	if len(cfg.Tenants) != 2 || cfg.Tenants[0].Quota.Concurrency != 2 || cfg.Tenants[0].Quota.MaxQueued != 3 {
		t.Errorf("tenants = %+v", cfg.Tenants)
	}
	if cfg.Tenants[1].Quota != cfg.Quota.Defaults {
		t.Errorf("tenant without quota should get the defaults, got %+v", cfg.Tenants[1].Quota)
	}
}

func TestLoad_TenantsFromEnvJSON(t *testing.T) {
	env := []string{`EXECGATE_TENANTS=[{"id":"x","plan":"p","quota":{"concurrency":1}}]`}
	cfg, err := Load("", env)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tenants) != 1 || cfg.Tenants[0].ID != "x" || cfg.Tenants[0].Quota.Concurrency != 1 {
		t.Fatalf("tenants = %+v", cfg.Tenants)
	}
}

func TestLoad_Invalid(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"bad integer", []string{"EXECGATE_SERVER_MAX_QUEUE=lots"}, "EXECGATE_SERVER_MAX_QUEUE"},
		{"bad backend", []string{"EXECGATE_QUOTA_BACKEND=etcd"}, "quota.backend"},
		{"redis without url", []string{"EXECGATE_QUOTA_BACKEND=redis"}, "quota.redis_url"},
		{"bad cgroups", []string{"EXECGATE_SANDBOX_CGROUPS=v3"}, "sandbox.cgroups"},
		{"duplicate tenant", []string{`EXECGATE_TENANTS=[{"id":"a"},{"id":"a"}]`}, "duplicate tenant"},
		{"negative quota", []string{`EXECGATE_TENANTS=[{"id":"a","quota":{"burst":-1}}]`}, "burst"},
		{"unknown tenant field", []string{`EXECGATE_TENANTS=[{"id":"a","plna":"x"}]`}, "plna"},
		{"empty issuer", []string{"EXECGATE_AUTH_ISSUER="}, "auth.issuer"},
		{"leeway out of range", []string{"EXECGATE_AUTH_LEEWAY_SECONDS=3600"}, "auth.leeway_seconds"},
		{"negative jwks refresh", []string{"EXECGATE_AUTH_JWKS_REFRESH_SECONDS=-1"}, "auth.jwks_refresh_seconds"},
		{"negative decision cache", []string{"EXECGATE_POLICY_DECISION_CACHE=-1"}, "policy.decision_cache"},
		{"a brokered secret's file outside tools_api.secret_dirs", []string{`EXECGATE_TENANTS=[{"id":"a","secrets":{"API_KEY":{"file":"/var/lib/execgate/dev.key"}}}]`},
			"tenants[0].secrets.API_KEY.file: must lie below one of tools_api.secret_dirs (/run/secrets)"},
		{"a brokered secret's file outside the configured secret_dirs", []string{`EXECGATE_TOOLS_API_SECRET_DIRS=/etc/execgate/secrets`, `EXECGATE_TENANTS=[{"id":"a","secrets":{"K":{"file":"/run/secrets/k"}}}]`},
			"tenants[0].secrets.K.file: must lie below one of tools_api.secret_dirs (/etc/execgate/secrets)"},
		{"a brokered secret's variable without the prefix", []string{`EXECGATE_TENANTS=[{"id":"a","secrets":{"K":{"env":"EXECGATE_DISPATCH_SPEC_KEY"}}}]`},
			"tenants[0].secrets.K.env: must start with one of tools_api.env_prefixes"},
		{"every bad brokered secret is named", []string{`EXECGATE_TENANTS=[{"id":"a","secrets":{"A":{"env":"X"},"B":{"file":"/x"}}}]`},
			"tenants[0].secrets.B.file"},
		{"a brokered secret's bad name", []string{`EXECGATE_TENANTS=[{"id":"a","secrets":{"my-key":{"env":"TOOL_SECRET_K"}}}]`}, `tenants[0].secrets: "my-key" is not a secret name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load("", tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want error mentioning %q, got %v", tt.want, err)
			}
		})
	}
}

func TestPrint_RedactsSecrets(t *testing.T) {
	cfg, err := Load("testdata/full.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := cfg.Print(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "s3cret") {
		t.Fatalf("printed config leaks the redis password:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "redis://:REDACTED@127.0.0.1:6379/0") {
		t.Errorf("redacted URL missing:\n%s", buf.String())
	}
}

func TestEnvNames_CoverNestedKeys(t *testing.T) {
	names := EnvNames()
	for _, want := range []string{"EXECGATE_LISTEN", "EXECGATE_QUOTA_REDIS_URL", "EXECGATE_SANDBOX_NSJAIL_PATH", "EXECGATE_AUTH_JWKS_URL", "EXECGATE_TENANTS", "EXECGATE_QUOTA_DEFAULTS_BURST"} {
		if _, ok := names[want]; !ok {
			t.Errorf("EnvNames lacks %s", want)
		}
	}
}

func TestLoad_ShippedExamplesParse(t *testing.T) {
	for _, p := range []string{"../deploy/examples/config.yaml", "../deploy/compose/config.yaml"} {
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			if _, err := Load(p, nil); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
		})
	}
}
