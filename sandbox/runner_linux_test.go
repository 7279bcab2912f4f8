package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSweepDirsRemovesOnlyWhatDeadProcessesLeft(t *testing.T) {
	base := t.TempDir()
	jails, deps := filepath.Join(base, "jails"), filepath.Join(base, "deps")
	dead := "run-2147483646-abcdef" // above any pid_max: never alive
	mine := fmt.Sprintf("run-%d-abcdef", os.Getpid())
	for _, d := range []string{filepath.Join(jails, dead, "egress"), filepath.Join(jails, mine, "egress"),
		filepath.Join(deps, ".tmp-old"), filepath.Join(deps, ".tmp-new"), filepath.Join(deps, "0123set")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(deps, ".tmp-old"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(deps, "0123set"), old, old); err != nil {
		t.Fatal(err)
	}
	sweepDirs(jails, deps, 10*time.Minute)
	for p, want := range map[string]bool{
		filepath.Join(jails, dead):      false,
		filepath.Join(jails, mine):      true,
		filepath.Join(deps, ".tmp-old"): false,
		filepath.Join(deps, ".tmp-new"): true, // an install that may still be running
		filepath.Join(deps, "0123set"):  true, // an installed set is kept, however old
	} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %t, want %t", p, err == nil, want)
		}
	}
}
