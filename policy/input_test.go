package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/tenancy"
)

func TestBuildInput(t *testing.T) {
	src := "async def run(args, context):\n    return {\"ok\": True}\n"
	sum := sha256.Sum256([]byte(src))
	in := BuildInput(demoTenant(), executor(), Request{
		Source:      src,
		Args:        []byte(`{"x": 1}`),
		EgressAllow: []string{" API.Example.COM:443 ", "pypi.org"},
		Limits:      Limits{MemoryMB: 128},
	})
	require.Equal(t, InputVersion, in.Version)
	require.Equal(t, "demo", in.Tenant.ID)
	require.Equal(t, "standard", in.Tenant.Plan)
	require.Equal(t, demoTenant().Policy, in.Tenant.Data)
	require.Equal(t, SubjectInput{Sub: "u1", Roles: []string{"executor"}}, in.Subject)
	require.Equal(t, RequestInput{
		Language:      "python",
		Entrypoint:    "run",
		SourceSHA256:  hex.EncodeToString(sum[:]),
		SourceBytes:   len(src),
		ArgsBytes:     8,
		Requirements:  []string{},
		Packages:      []Package{},
		NetworkAccess: "none",
		EgressHosts:   []string{"api.example.com:443", "pypi.org"},
		Limits:        Limits{MemoryMB: 128},
		Mode:          "run",
		Tools:         []string{},
		Isolation:     "jail",
		Runtime:       limits.DefaultRuntime,
		Secrets:       []string{},
	}, in.Request)

	raw, err := json.Marshal(in)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "async def", "the source never enters the input")
	require.NotContains(t, string(raw), `"x"`, "nor do the args")

	empty := BuildInput(tenancy.Tenant{ID: "t"}, tenancy.Principal{}, Request{})
	require.Equal(t, map[string]any{}, empty.Tenant.Data, "nil tenant data becomes an empty object")
	require.Equal(t, []string{}, empty.Subject.Roles)
}

func FuzzBuildInput(f *testing.F) {
	f.Add("def run(a, c): pass", []byte(`{"a":1}`), "", "", "", "", "API.example.com:443", "six==1", int64(0))
	f.Add("", []byte(nil), "javascript", "main", "proxy", "test", " *.X.org ", "", int64(-5))
	f.Add("\x00\xff", []byte("\x00"), " python ", "\t", "HOST", "run", "", "a\nb", int64(1<<40))
	f.Fuzz(func(t *testing.T, source string, args []byte, lang, entry, network, mode, host, req string, mem int64) {
		r := Request{
			Language: lang, Entrypoint: entry, Source: source, Args: args, NetworkAccess: network, Mode: mode,
			EgressAllow: []string{host}, Requirements: []string{req}, Limits: Limits{MemoryMB: mem},
		}
		in := BuildInput(tenancy.Tenant{ID: "t"}, tenancy.Principal{Subject: "s"}, r)
		sum := sha256.Sum256([]byte(source))
		if in.Request.SourceSHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("sha256 %s does not match", in.Request.SourceSHA256)
		}
		if in.Request.SourceBytes != len(source) || in.Request.ArgsBytes != len(args) {
			t.Fatalf("bytes %d/%d, want %d/%d", in.Request.SourceBytes, in.Request.ArgsBytes, len(source), len(args))
		}
		for _, c := range []struct{ got, raw, def string }{
			{in.Request.Language, lang, limits.DefaultLanguage},
			{in.Request.Entrypoint, entry, limits.DefaultEntrypoint},
			{in.Request.NetworkAccess, network, limits.DefaultNetworkAccess},
			{in.Request.Mode, mode, limits.DefaultMode},
		} {
			want := strings.TrimSpace(c.raw)
			if want == "" {
				want = c.def
			}
			if c.got != want {
				t.Fatalf("got %q for %q, want %q", c.got, c.raw, want)
			}
		}
		if len(in.Request.EgressHosts) != 1 || in.Request.EgressHosts[0] != strings.ToLower(strings.TrimSpace(host)) {
			t.Fatalf("egress %q from %q", in.Request.EgressHosts, host)
		}
		if in.Request.Limits.MemoryMB != mem || in.Request.Requirements[0] != req {
			t.Fatal("limits or requirements changed")
		}
		if in.Tenant.Data == nil || in.Subject.Roles == nil || in.Request.Tools == nil {
			t.Fatal("nil collection in input")
		}
		if _, err := json.Marshal(in); err != nil {
			t.Fatal(err)
		}
		if _, err := in.value(); err != nil {
			t.Fatalf("value: %v", err)
		}
	})
}
