package policy

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/tenancy"
)

// defaultsFS is the real embedded default policy set.
var defaultsFS = policies.FS

func quietLogger() *slog.Logger { return slogTo(io.Discard) }

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// newEngine builds an Engine on the real embedded defaults unless opts says
// otherwise.
func newEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	if opts.Defaults == nil {
		opts.Defaults = policies.FS
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	e, err := New(context.Background(), opts)
	require.NoError(t, err)
	return e
}

// demoTenant mirrors the DESIGN §13 example tenant, with a few extras.
func demoTenant() tenancy.Tenant {
	return tenancy.Tenant{
		ID:   "demo",
		Plan: "standard",
		Policy: map[string]any{
			"network":      []any{"none", "proxy"},
			"egress_allow": []any{"*.example.com:443", "pypi.org"},
			"packages":     map[string]any{"allow": []any{"six", "requests", "pip"}, "deny": []any{"requests"}},
			"max_limits":   map[string]any{"timeout_ms": 30000, "memory_mb": 512},
			"tools":        []any{"search", "calendar"},
		},
	}
}

func executor() tenancy.Principal {
	return tenancy.Principal{TenantID: "demo", Subject: "u1", Roles: []string{tenancy.RoleExecutor}}
}

// writeFile writes content to dir/name, creating dir.
func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	// Write to a temp file and rename, as editors do, so a watcher never
	// sees a half-written file.
	tmp := filepath.Join(dir, "."+name+".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
