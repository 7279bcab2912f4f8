package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/zygote"
)

// RequireRoot skips t unless the test process runs as root, which nsjail's
// namespaces, uid maps and cgroups need on this project's hosts.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipUnlessCI(t, "needs root (nsjail namespaces, uid maps and cgroups); running as uid %d", os.Geteuid())
	}
}

var repoRoot = sync.OnceValues(func() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("no go.mod in " + wd + " or any parent")
		}
	}
})

// RepoRoot returns the module root: the nearest directory holding go.mod,
// walking up from the test's working directory (its package directory).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("finding the repository root: %v", err)
	}
	return root
}

// Nsjail returns the nsjail binary integration tests use: the repository's
// .tools/bin/nsjail (installed by scripts/setup.sh), else whatever
// sandbox.FindNsjail finds ($EXECGATE_NSJAIL, $PATH). It skips when the
// test is not root or no nsjail is installed.
func Nsjail(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	var cfg sandbox.Config
	if p := filepath.Join(RepoRoot(t), ".tools", "bin", "nsjail"); fileExists(p) {
		cfg.NsjailPath = p
	}
	p, err := sandbox.FindNsjail(cfg)
	if err != nil {
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) {
			SkipUnlessCI(t, "nsjail missing: %v\n%s", err, ue.Detail())
		}
		SkipUnlessCI(t, "nsjail missing: %v (run scripts/setup.sh)", err)
	}
	return p
}

// SandboxConfig returns a sandbox.Config ready for sandbox.NewRunner: the
// repository's nsjail, the shared test rootfs of the default runtime (see
// Rootfs) in the shared runtimes dir (sandbox.runtimes lists only it), the
// host's /usr/bin/python3 and a per-test work directory. It skips like
// Nsjail.
func SandboxConfig(t testing.TB) sandbox.Config {
	t.Helper()
	return sandbox.Config{
		NsjailPath:  Nsjail(t),
		PythonPath:  sandbox.DefaultPythonPath,
		RootfsDir:   Rootfs(t),
		RuntimesDir: runtimesDir(t),
		// The default runtime only: a test that needs more names them
		// (and builds them with RuntimesDir or Runtime).
		Runtimes:    []string{limits.DefaultRuntime},
		WorkDir:     t.TempDir(),
		Cgroups:     sandbox.DefaultCgroups,
		KillGraceMS: sandbox.DefaultKillGraceMS,
		// A zygote's start is an allowance, stretched on a slow host.
		Zygotes: zygote.Config{StartMS: zygote.DefaultStartMS * int64(TimeScale())},
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
