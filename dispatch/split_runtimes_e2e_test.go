package dispatch

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
)

// TestSplitModeRoutesARunToAnExecutorServingItsRuntime: executors announce
// their runtimes; a run goes to one that serves its runtime (the
// interpreter that answers is that runtime's), JavaScript goes to one whose
// runtime carries Deno, and a runtime no live executor serves is a 503
// naming it, with nothing run.
func TestSplitModeRoutesARunToAnExecutorServingItsRuntime(t *testing.T) {
	testenv.RuntimesDir(t) // python3.11 and python3.13 built
	e := newSplitEnv(t)
	e.policyExtra = ", runtimes: [python3.11, python3.13]"
	e.runtimes = map[string]string{"ex-311": "python3.11", "ex-313": "python3.13"}
	e.startGateway()
	e.startExecutor("ex-311")
	e.startExecutor("ex-313")
	src := "import sys\ndef run(args, context):\n    return list(sys.version_info[:2])\n"
	for _, tc := range []struct{ runtime, want string }{
		{"python3.13", "[3,13]"},
		{"python3.11", "[3,11]"},
		{"", "[3,11]"}, // the tenant's default, the first of its runtimes
	} {
		for i := 0; i < 3; i++ { // whichever executor reads first, only one serves the runtime
			body := map[string]any{"source": src}
			if tc.runtime != "" {
				body["runtime"] = tc.runtime
			}
			st, env, err := e.execute(body)
			if err != nil || st != http.StatusOK || env.Status != "ok" {
				t.Fatalf("runtime %q: %d %+v %v", tc.runtime, st, env, err)
			}
			var got []int
			_ = json.Unmarshal(env.Result, &got)
			if b, _ := json.Marshal(got); string(b) != tc.want {
				t.Fatalf("runtime %q ran on Python %s, want %s", tc.runtime, env.Result, tc.want)
			}
		}
	}
	st, env, err := e.execute(map[string]any{"source": "export function run() { return 7 }", "language": "javascript"})
	if err != nil || st != http.StatusOK || string(env.Result) != "7" {
		t.Fatalf("javascript: %d %+v %v", st, env, err)
	}

	// The python3.13 executor goes away: its runs are refused, naming the
	// runtime, until one serves it again.
	ex := e.execs["ex-313"]
	_ = ex.cmd.Process.Kill()
	_ = ex.cmd.Wait()
	waitFor(t, 10*time.Second, "ex-313's heartbeat to expire", func() bool {
		fleet, err := live(t.Context(), e.rdb, newKeys("execgate"), time.Now())
		if err != nil {
			return false
		}
		for _, a := range fleet {
			if a.ID == "ex-313" {
				return false
			}
		}
		return true
	})
	st, env, err = e.execute(map[string]any{"source": src, "runtime": "python3.13"})
	if err != nil || st != http.StatusServiceUnavailable || env.errType() != "SandboxUnavailable" || !strings.Contains(env.Error.Message, `no executor serves runtime "python3.13"`) {
		t.Fatalf("python3.13 with no executor serving it: %d %+v %v; want 503 SandboxUnavailable naming the runtime", st, env, err)
	}
	if st, env, err := e.execute(map[string]any{"source": src, "runtime": "python3.11"}); err != nil || st != http.StatusOK || string(env.Result) != "[3,11]" {
		t.Fatalf("python3.11 still runs: %d %+v %v", st, env, err)
	}
}
