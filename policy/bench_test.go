package policy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/stats"
)

// benchInput is a realistic request: proxy with egress, a requirement,
// requested limits.
func benchInput() Input {
	return BuildInput(demoTenant(), executor(), Request{
		Source:        "async def run(args, context):\n    return {\"ok\": True}\n",
		Args:          []byte(`{"q": "x"}`),
		Requirements:  []string{"six==1.16.0"},
		NetworkAccess: "proxy",
		EgressAllow:   []string{"api.example.com", "pypi.org:443"},
		Limits:        Limits{TimeoutMS: 10000, MemoryMB: 512},
	})
}

// The decision benchmarks report p50/p99 latency alongside ns/op and
// allocations. Each runs twice: with the engine as `execgate serve` runs it
// (the decision memo on: a request shape decided before is remembered) and
// with every decision evaluated by OPA (memo off). Every iteration decides
// a different tool (its own source hash, size and subject), as real traffic
// would; no default rule reads those fields, so they do not defeat the memo.

// BenchmarkDecide: a full request (proxy, egress, a requirement, limits).
func BenchmarkDecide(b *testing.B) { benchDecide(b, Options{}, benchInput) }

// BenchmarkDecideEvaluated: BenchmarkDecide with the memo off.
func BenchmarkDecideEvaluated(b *testing.B) { benchDecide(b, Options{DecisionCache: -1}, benchInput) }

// BenchmarkDecideProbe: the DESIGN §4 probe, network none, no
// requirements, no limits.
func BenchmarkDecideProbe(b *testing.B) { benchDecide(b, Options{}, probeInput) }

// BenchmarkDecideProbeEvaluated: BenchmarkDecideProbe with the memo off.
func BenchmarkDecideProbeEvaluated(b *testing.B) {
	benchDecide(b, Options{DecisionCache: -1}, probeInput)
}

func probeInput() Input {
	return BuildInput(demoTenant(), executor(), Request{Source: "async def run(args, context):\n    return {\"ok\": True}\n", Entrypoint: "run"})
}

func benchDecide(b *testing.B, opts Options, build func() Input) {
	e := newEngine(b, opts)
	ctx := context.Background()
	ins := make([]Input, 1024)
	base := build() // one tenant document, shared as the gateway's registry shares it
	for i := range ins {
		ins[i] = base
		ins[i].Subject.Sub = fmt.Sprintf("user-%d", i)
		ins[i].Request.SourceSHA256 = fmt.Sprintf("%064x", i)
		ins[i].Request.SourceBytes += i
	}
	if d, err := e.Decide(ctx, ins[0]); err != nil || !d.Allow {
		b.Fatalf("decide: %+v %v", d, err)
	}
	lat := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		start := time.Now()
		if _, err := e.Decide(ctx, ins[i%len(ins)]); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		i++
	}
	b.StopTimer()
	p50, p99 := stats.Percentile(lat, 0.50), stats.Percentile(lat, 0.99)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
}

// BenchmarkDecideDeny measures an evaluated denial (unknown tenant), the
// cheap path.
func BenchmarkDecideDeny(b *testing.B) {
	e := newEngine(b, Options{DecisionCache: -1})
	in := benchInput()
	in.Tenant.ID = ""
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := e.Decide(ctx, in); err != nil || d.Allow {
			b.Fatalf("decide: %+v %v", d, err)
		}
	}
}

func BenchmarkBuildInput(b *testing.B) {
	t, p := demoTenant(), executor()
	r := Request{Source: string(make([]byte, 64<<10)), Requirements: []string{"six"}, EgressAllow: []string{"A.example.com"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = BuildInput(t, p, r)
	}
}
