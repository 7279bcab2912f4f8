package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/toolbridge/toolconfig"
)

func TestConfigValidate(t *testing.T) {
	scope := toolconfig.APIScope{SecretDirs: []string{"/run/secrets"}, EnvPrefixes: []string{"TOOL_SECRET_"}}
	many := Config{}
	for i := 0; i <= MaxPerTenant; i++ {
		many[fmt.Sprintf("S%d", i)] = toolconfig.Secret{Env: "TOOL_SECRET_X"}
	}
	tests := []struct {
		name string
		c    Config
		want string // "" = valid
	}{
		{"a file below secret_dirs and a prefixed variable", Config{"API_KEY": {File: "/run/secrets/api"}, "db_pass": {Env: "TOOL_SECRET_DB"}}, ""},
		{"a file outside secret_dirs is refused", Config{"KEY": {File: "/var/lib/execgate/dev.key"}}, "secrets.KEY.file: must lie below one of tools_api.secret_dirs (/run/secrets)"},
		{"a path escaping secret_dirs is refused", Config{"KEY": {File: "/run/secrets/../../etc/shadow"}}, "secrets.KEY.file: must be a clean absolute path"},
		{"a relative file is refused", Config{"KEY": {File: "run/secrets/x"}}, "clean absolute path"},
		{"a variable without the prefix is refused", Config{"KEY": {Env: "EXECGATE_DISPATCH_SPEC_KEY"}}, "secrets.KEY.env: must start with one of tools_api.env_prefixes (TOOL_SECRET_)"},
		{"both file and env", Config{"KEY": {File: "/run/secrets/a", Env: "TOOL_SECRET_A"}}, "secrets.KEY: set exactly one of file or env"},
		{"neither", Config{"KEY": {}}, "exactly one of file or env"},
		{"a name that is not an identifier", Config{"api-key": {Env: "TOOL_SECRET_A"}}, `"api-key" is not a secret name`},
		{"a name starting with a digit", Config{"1KEY": {Env: "TOOL_SECRET_A"}}, "is not a secret name"},
		{"a name over 64 bytes", Config{strings.Repeat("K", 65): {Env: "TOOL_SECRET_A"}}, "is not a secret name"},
		{"too many secrets", many, fmt.Sprintf("at most %d", MaxPerTenant)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate(scope)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"TOOL_SECRET_A": "from-env-value"}
	c := Config{
		"FILE":   {File: write("f", "from-file-value\n")},
		"ENV":    {Env: "TOOL_SECRET_A"},
		"UNSET":  {Env: "TOOL_SECRET_UNSET"},
		"GONE":   {File: filepath.Join(dir, "gone")},
		"BIG":    {File: write("big", strings.Repeat("x", MaxValueBytes+1))},
		"BINARY": {File: write("bin", "a\x00b")},
		"LATIN1": {File: write("latin1", "caf\xe9")},
	}
	getenv := func(k string) string { return env[k] }
	vals, err := Resolve(c, []string{"FILE", "ENV"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 2 || vals[0].Name() != "FILE" || vals[0].Reveal() != "from-file-value" || vals[1].Reveal() != "from-env-value" {
		t.Fatalf("Resolve = %v", vals)
	}
	for name, want := range map[string]string{
		"UNSET":   "empty or unset",
		"GONE":    "no such file",
		"BIG":     fmt.Sprintf("more than %d bytes", MaxValueBytes),
		"BINARY":  "control character U+0000",
		"LATIN1":  "not UTF-8",
		"MISSING": "not configured for the tenant",
	} {
		_, err := Resolve(c, []string{"FILE", name}, getenv)
		var ue *UnavailableError
		if !errors.As(err, &ue) || ue.Name != name || !strings.Contains(err.Error(), want) || !strings.Contains(ue.Public(), `"`+name+`"`) {
			t.Errorf("Resolve(%s) = %v; want an UnavailableError naming it, saying %q", name, err, want)
		}
		if strings.Contains(err.Error(), "from-file-value") {
			t.Errorf("the error of %s holds another secret's value: %v", name, err)
		}
	}
}

func TestValueNeverShowsItsValue(t *testing.T) {
	v := NewValue("API_KEY", "hunter2-value")
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("x", "secret", v, "list", []Value{v})
	for _, s := range []string{fmt.Sprint(v), fmt.Sprintf("%v %+v %#v %s", v, v, v, v), fmt.Sprint([]Value{v}), sb.String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("the value shows: %s", s)
		}
	}
	if _, err := json.Marshal(struct{ S []Value }{[]Value{v}}); err == nil {
		t.Error("a Value was encoded as JSON")
	}
	if v.Reveal() != "hunter2-value" || v.Name() != "API_KEY" {
		t.Error("Reveal or Name is wrong")
	}
}
