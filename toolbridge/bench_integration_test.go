package toolbridge_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/bridgebench"
)

// TestBridgeCallLatency measures one tool call round trip three ways
// (bridgebench: direct SDK call, governed bridge in-process, from a jail),
// prints the Markdown table of BENCHMARKS.md and fails when the jail round
// trip regresses far past the direct call. `execgate bench --sections
// bridge` measures the same.
//
//	go test ./toolbridge -run TestBridgeCallLatency -v -count=1
//	EXECGATE_BRIDGE_BENCH_CALLS=2000 go test ./toolbridge -run TestBridgeCallLatency -v -count=1
func TestBridgeCallLatency(t *testing.T) {
	testenv.RequireRoot(t)
	n := 500
	if v := os.Getenv("EXECGATE_BRIDGE_BENCH_CALLS"); v != "" {
		fmt.Sscan(v, &n)
	}
	sc := testenv.SandboxConfig(t)
	sc.WarmPool = 0
	runner, err := sandbox.NewRunner(sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runner.Close() })
	res, err := bridgebench.Run(context.Background(), bridgebench.Options{Calls: n, Policy: newEngine(t), Runner: runner})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Markdown(&b)
	t.Logf("bridge call latency (%s):\n%s", time.Now().UTC().Format(time.RFC3339), b.String())
	d50, j50 := res.Row(bridgebench.Direct).P50, res.Row(bridgebench.Jail).P50
	if j50 > d50+20*time.Millisecond {
		t.Errorf("a bridge call from the jail takes %v at p50, %v more than a direct call", j50, j50-d50)
	}
}
