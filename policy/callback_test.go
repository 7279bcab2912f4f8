package policy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// The callback policy: the tenant's callbacks list decides, and an
// extension module adds its own deny_callback reasons (never an allow).
func TestDecideCallback(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "hooks.rego", `package execgate.main

deny_callback contains "plain http callbacks are off here" if input.callback.scheme == "http"
`)
	e := newEngine(t, Options{Dirs: []string{dir}})
	in := func(data map[string]any, scheme, host string, port int) CallbackInput {
		return CallbackInput{Tenant: TenantInput{ID: "demo", Data: data}, Subject: SubjectInput{Sub: "u1", Roles: []string{"executor"}},
			Callback: CallbackField{URL: scheme + "://" + host + "/h", Scheme: scheme, Host: host, Port: port}}
	}
	granted := map[string]any{"callbacks": []any{"hooks.example.com"}}
	tests := []struct {
		name    string
		in      CallbackInput
		allow   bool
		reasons []string
	}{
		{"a granted host is allowed", in(granted, "https", "hooks.example.com", 443), true, []string{}},
		{"no callbacks by default", in(map[string]any{}, "https", "hooks.example.com", 443), false,
			[]string{"callback host hooks.example.com:443 is not in the tenant's callbacks allow-list"}},
		{"another host is denied", in(granted, "https", "evil.example.net", 443), false,
			[]string{"callback host evil.example.net:443 is not in the tenant's callbacks allow-list"}},
		{"an extension's reason denies a granted host", in(granted, "http", "hooks.example.com", 80), false,
			[]string{"plain http callbacks are off here"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := e.DecideCallback(context.Background(), tc.in)
			require.NoError(t, err)
			require.NotEmpty(t, d.ID)
			require.Equal(t, tc.allow, d.Allow)
			require.Equal(t, tc.reasons, d.Reasons)
		})
	}
}
