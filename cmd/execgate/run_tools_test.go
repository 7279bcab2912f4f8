package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
)

func TestRunCommandCallsTheConfiguredToolServers(t *testing.T) {
	testenv.RequireRoot(t)
	sb := testenv.SandboxConfig(t)
	for _, d := range []string{sb.WorkDir, filepath.Dir(sb.WorkDir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	srv := toolbridgetest.Start(t, "run-cmd-token")
	dir := t.TempDir()
	t.Setenv("EXECGATE_TEST_MCP_TOKEN", "Bearer run-cmd-token")
	cfg := filepath.Join(dir, "execgate.yaml")
	yaml := fmt.Sprintf(`state_dir: %q
auth:
  hs256_secret_file: %q
sandbox:
  nsjail_path: %q
  runtimes_dir: %q
  runtimes: [python3.11]
  work_dir: %q
tenants:
  - id: acme
    policy:
      network: [none]
      tools: ["math.*"]
      tool_calls: { max_per_run: { "math.upper": 1 } }
    tools:
      servers:
        - name: math
          url: %q
          headers: { Authorization: { env: EXECGATE_TEST_MCP_TOKEN } }
          allow: [add, upper]
`, dir, filepath.Join(dir, "dev.key"), sb.NsjailPath, sb.RuntimesDir, sb.WorkDir, srv.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dev.key"), []byte("local-dev-key-for-the-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "program.py")
	src := `from execgate_runtime import ToolDenied

def run(args, context):
    total = context.tools.run("math.add", {"a": 20, "b": 22})["sum"]
    word = context.tools.run("math.upper", {"s": "ok"})["text"]
    try:
        context.tools.run("math.upper", {"s": "again"})
    except ToolDenied as e:
        word += " / " + e.reason
    return [total, word]
`
	if err := os.WriteFile(prog, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	env, result, out := runJSON(t, prog, "--config", cfg, "--tenant", "acme")
	if env.Status != sandbox.StatusOK || result != `[42,"OK / denied by policy: at most 1 calls to math.upper per run"]` {
		t.Fatalf("%s", out)
	}
	if len(env.ToolCalls) != 3 || env.ToolCalls[0].Tool != "math.add" || env.ToolCalls[2].Outcome != sandbox.ErrToolDenied {
		t.Errorf("tool calls %+v", env.ToolCalls)
	}
	if srv.Calls("upper") != 1 {
		t.Errorf("upper reached the server %d times", srv.Calls("upper"))
	}
	t.Run("without --tenant the tool has no tools", func(t *testing.T) {
		_, err := execute(t, "run", prog, "--config", cfg, "--json")
		if err == nil {
			t.Error("the program ran its tools without --tenant")
		}
	})
}
