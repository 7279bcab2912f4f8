package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// TestPrepareAgainstTheGateway: `execgate prepare` resolves through a real
// gateway (real uv, a local wheel directory), writes the lock, and a second
// prepare from that lock names the same environment, cached.
func TestPrepareAgainstTheGateway(t *testing.T) {
	wheels := testenv.WriteWheels(t, filepath.Join(t.TempDir(), "wheels"),
		testenv.Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
		testenv.Wheel{Name: "beta", Version: "1.0"})
	uv := testenv.UV(t)
	rootfs := testenv.Rootfs(t)
	deps := filepath.Join(testenv.JailDir(t), "deps")
	a, signer := startGateway(t, func(c *config.Config) {
		c.Sandbox = sandbox.Config{RootfsDir: rootfs, RuntimesDir: filepath.Dir(rootfs), Runtimes: []string{limits.DefaultRuntime}, WorkDir: t.TempDir(), DepsDir: deps, UVPath: uv,
			PackageIndex: sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true}}
		for i := range c.Tenants {
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"alpha", "beta"}, "deny": []any{}}
			if c.Tenants[i].ID == "acme" {
				c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"alpha"}, "deny": []any{}}
			}
		}
	})
	lock := filepath.Join(t.TempDir(), "env.lock")
	out, err := execute(t, "prepare", "--url", a.URL(), "--token", mint(t, signer, "demo", "executor"),
		"--requirements", "alpha>=1", "--lock-out", lock)
	if err != nil {
		t.Fatalf("prepare: %v\n%s", err, out)
	}
	var first struct {
		EnvironmentID string `json:"environment_id"`
		Cached        bool   `json:"cached"`
	}
	if err := json.Unmarshal([]byte(out), &first); err != nil || len(first.EnvironmentID) != 64 || first.Cached {
		t.Fatalf("answer %s (%v)", out, err)
	}
	if b, err := os.ReadFile(lock); err != nil || !strings.Contains(string(b), "beta==1.0") {
		t.Fatalf("--lock-out: %v %q", err, b)
	}
	out, err = execute(t, "prepare", "--url", a.URL(), "--token", mint(t, signer, "demo", "executor"), "--lock", lock, "--warm", "1")
	var second struct {
		EnvironmentID string `json:"environment_id"`
		Cached        bool   `json:"cached"`
		Warm          int    `json:"warm"`
	}
	if err != nil || json.Unmarshal([]byte(out), &second) != nil || second.EnvironmentID != first.EnvironmentID || !second.Cached || second.Warm != 0 {
		t.Fatalf("prepare --lock --warm 1: %v\n%s", err, out)
	}
	// --warm reaches the gateway (this one runs no sandbox, so it warms
	// nothing: app tests cover warming), which refuses more than 2.
	if out, err := execute(t, "prepare", "--url", a.URL(), "--token", mint(t, signer, "demo", "executor"), "--lock", lock, "--warm", "3"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("--warm 3: %v\n%s", err, out)
	}
	// A tenant that may not have beta is refused.
	if out, err := execute(t, "prepare", "--url", a.URL(), "--token", mint(t, signer, "acme", "executor"), "--lock", lock); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("acme: %v\n%s", err, out)
	}
}
