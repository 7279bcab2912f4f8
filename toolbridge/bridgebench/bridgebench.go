// Package bridgebench measures one code-mode tool call round trip three
// ways against the same MCP server on loopback (toolbridgetest, in this
// process): a direct SDK call, the governed bridge called from the gateway
// process (grant, per-call policy, schema validation, limits), and the same
// from inside a jail (jail → runner → bridge → MCP server → jail). Used by
// `execgate bench --sections bridge` and the toolbridge test
// TestBridgeCallLatency.
package bridgebench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/execgate/execgate/internal/stats"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Options configure Run.
type Options struct {
	// Calls measured per row (after one warm-up call). Default 500.
	Calls int
	// Policy decides the governed calls (a policy.Engine). Required.
	Policy toolbridge.CallDecider
	// Runner runs the jail row (the caller assembles it, a cold one does).
	// Required.
	Runner Runner
}

// Runner runs one jail: a *sandbox.Runner.
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// Row is one way of calling.
type Row struct {
	Name     string
	Calls    int
	P50, P99 time.Duration
}

// Result is the three rows: direct, governed in-process, from the jail.
type Result struct {
	Rows []Row
}

// Direct, Governed and Jail are the rows' names.
const (
	Direct   = "direct MCP call from the gateway process (SDK session)"
	Governed = "governed bridge from the gateway process (grant, policy, schema, limits)"
	Jail     = "from the jail: context.tools.run (jail → gateway → MCP → jail)"
)

// jailSource calls math.add n times and returns each call's nanoseconds
// as the program measured them.
const jailSource = `
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

// Run measures the three rows.
func Run(ctx context.Context, opts Options) (*Result, error) {
	n := opts.Calls
	if n <= 0 {
		n = 500
	}
	if opts.Policy == nil {
		return nil, errors.New("bridgebench: a policy is required")
	}
	if opts.Runner == nil {
		return nil, errors.New("bridgebench: a runner is required")
	}
	srv, err := toolbridgetest.Listen("")
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	args := json.RawMessage(`{"a":1,"b":2}`)

	// Direct: the SDK's session, as the gateway's pool holds it.
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL}, nil)
	if err != nil {
		return nil, fmt.Errorf("bridgebench: connecting: %w", err)
	}
	defer sess.Close()
	direct, err := measure(n, func() error {
		_, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "add", Arguments: args})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bridgebench: direct call: %w", err)
	}

	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"bench": {
		Servers: []toolconfig.Server{{Name: "math", URL: srv.URL}},
		Limits:  toolconfig.Limits{MaxCalls: 1 << 30},
	}}, toolbridge.Options{Policy: opts.Policy})
	if err != nil {
		return nil, err
	}
	defer hub.Close()
	info := toolbridge.RunInfo{TenantID: "bench", Roles: []string{"executor"}, DecisionID: "bench", Granted: []string{"math.*"}}
	gr := hub.NewRun(info)
	governed, err := measure(n, func() error {
		_, err := gr.Call(ctx, "math.add", args)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bridgebench: governed call: %w", err)
	}

	r := opts.Runner
	nArgs, _ := json.Marshal(map[string]int{"n": n})
	res, err := r.Run(ctx, sandbox.Spec{Source: jailSource, Args: nArgs, Bridge: hub.NewRun(info), Limits: sandbox.Limits{TimeoutMS: limits.Max.TimeoutMS, CPUMS: limits.Max.CPUMS}.Or(limits.Default)})
	if err != nil {
		return nil, fmt.Errorf("bridgebench: the jail run: %w", err)
	}
	if res.Status != sandbox.StatusOK {
		return nil, fmt.Errorf("bridgebench: the jail run: %s %+v", res.Result, res.Error)
	}
	var ns []int64
	if err := json.Unmarshal(res.Result, &ns); err != nil || len(ns) != n {
		return nil, fmt.Errorf("bridgebench: the jail's timings: %v: %.200s", err, res.Result)
	}
	jail := make([]time.Duration, n)
	for i, v := range ns {
		jail[i] = time.Duration(v)
	}
	out := &Result{}
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{{Direct, direct}, {Governed, governed}, {Jail, jail}} {
		out.Rows = append(out.Rows, Row{Name: row.name, Calls: n, P50: stats.Percentile(row.d, 0.50), P99: stats.Percentile(row.d, 0.99)})
	}
	return out, nil
}

// Row returns the row called name (zero if absent).
func (r *Result) Row(name string) Row {
	for _, row := range r.Rows {
		if row.Name == name {
			return row
		}
	}
	return Row{}
}

// Markdown writes the BENCHMARKS.md table: each row's p50/p99 and what it
// adds to the direct call.
func (r *Result) Markdown(w io.Writer) {
	fmt.Fprintf(w, "| path | calls | p50 | p99 | added p50 vs direct | added p99 vs direct |\n|---|---:|---:|---:|---:|---:|\n")
	d := r.Row(Direct)
	for _, row := range r.Rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |\n", row.Name, row.Calls, ms(row.P50), ms(row.P99), ms(row.P50-d.P50), ms(row.P99-d.P99))
	}
}

// measure times n calls after one warm-up; the first error stops it.
func measure(n int, call func() error) ([]time.Duration, error) {
	if err := call(); err != nil { // warm-up
		return nil, err
	}
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		if err := call(); err != nil {
			return nil, err
		}
		out[i] = time.Since(start)
	}
	return out, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }
