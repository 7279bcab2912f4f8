package toolbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// TestBridgeCallLatency measures one tool call round trip three ways
// against the same MCP server on loopback: a direct SDK call from this
// process, the governed bridge called from this process (grant, per-call
// policy, schema validation, limits), and the same from inside a jail
// (jail → runner → bridge → MCP server → jail). It prints a Markdown table
// (BENCHMARKS.md) and fails when the jail round trip regresses far past
// the direct call.
//
//	go test ./toolbridge -run TestBridgeCallLatency -v -count=1
//	EXECGATE_BRIDGE_BENCH_CALLS=2000 go test ./toolbridge -run TestBridgeCallLatency -v -count=1
func TestBridgeCallLatency(t *testing.T) {
	testenv.RequireRoot(t)
	n := 500
	if v := os.Getenv("EXECGATE_BRIDGE_BENCH_CALLS"); v != "" {
		fmt.Sscan(v, &n)
	}
	ctx := context.Background()
	srv := toolbridgetest.Start(t, "")
	args := json.RawMessage(`{"a":1,"b":2}`)

	// Direct: the SDK's session, as the gateway's pool holds it.
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	direct := measure(n, func() error {
		_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: args})
		return err
	})

	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"bench": {
		Servers: []toolconfig.Server{{Name: "math", URL: srv.URL}},
		Limits:  toolconfig.Limits{MaxCalls: 1 << 30},
	}}, toolbridge.Options{Policy: newEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	info := toolbridge.RunInfo{TenantID: "bench", Roles: []string{"executor"}, DecisionID: "bench", Granted: []string{"math.*"}}
	gr := hub.NewRun(info)
	governed := measure(n, func() error {
		_, err := gr.Call(ctx, "math.add", args)
		return err
	})

	r, err := sandbox.NewRunner(testenv.SandboxConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	src := `
import time

def run(args, context):
    context.tools.run("math.add", {"a": 1, "b": 2})  # warm-up
    out = []
    for _ in range(args["n"]):
        t0 = time.perf_counter_ns()
        context.tools.run("math.add", {"a": 1, "b": 2})
        out.append(time.perf_counter_ns() - t0)
    return out
`
	nArgs, _ := json.Marshal(map[string]int{"n": n})
	res, err := r.Run(ctx, sandbox.Spec{Source: src, Args: nArgs, Bridge: hub.NewRun(info), Limits: sandbox.Limits{TimeoutMS: 120000, CPUMS: 120000}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != sandbox.StatusOK {
		t.Fatalf("%s %+v", res.Result, res.Error)
	}
	var ns []int64
	if err := json.Unmarshal(res.Result, &ns); err != nil || len(ns) != n {
		t.Fatalf("%v: %s", err, res.Result)
	}
	jail := make([]time.Duration, n)
	for i, v := range ns {
		jail[i] = time.Duration(v)
	}

	rows := []struct {
		name string
		d    []time.Duration
	}{
		{"direct MCP call from the gateway process (SDK session)", direct},
		{"governed bridge from the gateway process (grant, policy, schema, limits)", governed},
		{"from the jail: context.tools.run (jail → gateway → MCP → jail)", jail},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| path | calls | p50 | p99 | added p50 vs direct | added p99 vs direct |\n|---|---:|---:|---:|---:|---:|\n")
	d50, d99 := pct(direct, 50), pct(direct, 99)
	for _, row := range rows {
		p50, p99 := pct(row.d, 50), pct(row.d, 99)
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", row.name, n, ms(p50), ms(p99), ms(p50-d50), ms(p99-d99))
	}
	t.Logf("bridge call latency (%s):\n%s", time.Now().UTC().Format(time.RFC3339), b.String())
	if j := pct(jail, 50); j > d50+20*time.Millisecond {
		t.Errorf("a bridge call from the jail takes %v at p50, %v more than a direct call", j, j-d50)
	}
}

func measure(n int, call func() error) []time.Duration {
	_ = call() // warm-up
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		if err := call(); err != nil {
			panic(err)
		}
		out[i] = time.Since(start)
	}
	return out
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
