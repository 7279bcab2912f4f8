package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BuildFlags are the flags every build of the execgate binary uses, as
// scripts/setup.sh, scripts/image.sh and the Dockerfile do: -trimpath, so
// nothing the binary reports (span attributes such as code.filepath, panic
// traces) carries the build machine's paths.
var BuildFlags = []string{"-trimpath"}

// BuildExecgate builds cmd/execgate with BuildFlags into a temporary
// directory of t and returns the binary's path.
func BuildExecgate(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "execgate")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a cold build on a loaded 2-core host
	defer cancel()
	args := append(append([]string{"build"}, BuildFlags...), "-o", bin, "./cmd/execgate")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	return bin
}
