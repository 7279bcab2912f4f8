package policy

import (
	"context"
	"slices"
	"testing"
	"time"
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

// BenchmarkDecide measures one decision on the default policies for a
// full request (proxy, egress, a requirement, limits) and reports p50/p99
// latency alongside ns/op and allocations.
func BenchmarkDecide(b *testing.B) { benchDecide(b, benchInput()) }

// BenchmarkDecideProbe measures the DESIGN §4 probe: network none, no
// requirements, no limits.
func BenchmarkDecideProbe(b *testing.B) {
	benchDecide(b, BuildInput(demoTenant(), executor(), Request{Source: "async def run(args, context):\n    return {\"ok\": True}\n", Entrypoint: "run"}))
}

func benchDecide(b *testing.B, in Input) {
	e := newEngine(b, Options{})
	ctx := context.Background()
	if d, err := e.Decide(ctx, in); err != nil || !d.Allow {
		b.Fatalf("decide: %+v %v", d, err)
	}
	lat := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := e.Decide(ctx, in); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	p50, p99 := percentiles(lat)
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
}

// BenchmarkDecideDeny measures a denial (unknown tenant), the cheap path.
func BenchmarkDecideDeny(b *testing.B) {
	e := newEngine(b, Options{})
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

func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}
