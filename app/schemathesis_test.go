package app_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
)

// TestSchemathesis fuzzes a live `execgate serve` against /openapi.json
// (scripts/schemathesis.sh). It needs schemathesis in the tools venv; with
// CI=true a missing schemathesis fails the test instead of skipping it.
//
// The script runs as on a fresh clone: its state dir comes from mktemp -d
// (0700, below this test's private TMPDIR) and the gateway builds its
// rootfs there, the setup that once made every run a 503 (issue #20).
func TestSchemathesis(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the schemathesis run takes about two minutes")
	}
	root := testenv.RepoRoot(t)
	st := filepath.Join(root, ".tools", "venv", "bin", "schemathesis")
	if _, err := os.Stat(st); err != nil {
		msg := "schemathesis is not installed (.tools/bin/uv pip install --python .tools/venv/bin/python schemathesis)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	testenv.Nsjail(t) // the server must be able to run tools: root and nsjail

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := testenv.BuildExecgate(t)

	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "schemathesis.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"EXECGATE_BIN="+bin,
		"SCHEMATHESIS="+st,
		"TMPDIR="+t.TempDir(),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		t.Fatalf("scripts/schemathesis.sh: %v\n%s", err, out.String())
	}
	t.Logf("schemathesis passed:\n%s", tail(out.String(), 30))
}

func tail(s string, lines int) string {
	b := []byte(s)
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n > lines {
				return string(b[i+1:])
			}
		}
	}
	return s
}
