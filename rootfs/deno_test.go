package rootfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDenoWheelVersionComesFromTheDistInfo(t *testing.T) {
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin", "deno")
	for _, d := range []string{filepath.Dir(bin), filepath.Join(venv, "lib", "python3.11", "site-packages", "deno-2.9.8.dist-info")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := denoWheelVersion(bin); got != "2.9.8" {
		t.Errorf("version %q, want 2.9.8", got)
	}
	if got := denoWheelVersion(filepath.Join(t.TempDir(), "bin", "deno")); got != "" {
		t.Errorf("version without a dist-info %q, want empty", got)
	}
}

func TestAConfiguredDenoThatDoesNotWorkFailsTheBuild(t *testing.T) {
	_, err := Build(context.Background(), Options{Dir: filepath.Join(t.TempDir(), "rootfs"), DenoPath: "/nonexistent/deno"})
	if err == nil || !strings.Contains(err.Error(), "deno") {
		t.Fatalf("Build with a missing deno: %v", err)
	}
}
