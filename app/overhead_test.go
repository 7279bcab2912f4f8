package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/quota"
)

// BenchmarkGatewayOverhead measures the gateway alone (HTTP, auth,
// validation, policy, quota, audit) with a no-op executor:
//
//	go test -run '^$' -bench GatewayOverhead -benchtime 2000x ./app
func BenchmarkGatewayOverhead(b *testing.B) {
	for _, c := range []int{1, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			n := max(b.N, 100)
			res, err := app.MeasureOverhead(context.Background(), app.OverheadOptions{Concurrency: c, Requests: n})
			if err != nil {
				b.Fatal(err)
			}
			if res.Errors > 0 {
				b.Fatalf("%d of %d requests failed", res.Errors, n)
			}
			b.ReportMetric(float64(res.P50.Microseconds()), "p50-µs")
			b.ReportMetric(float64(res.P99.Microseconds()), "p99-µs")
			b.ReportMetric(res.RPS, "req/s")
			b.ReportMetric(0, "ns/op") // wall per b.N is meaningless here; see the metrics above
			b.Log(res)
		})
	}
}

func TestMeasureOverheadWorks(t *testing.T) {
	res, err := app.MeasureOverhead(context.Background(), app.OverheadOptions{Concurrency: 4, Requests: 40, Warmup: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 || res.RPS <= 0 {
		t.Fatalf("result = %s", res)
	}
}

// BenchmarkExecuteHandler is the per-request path without the network
// (auth → decode → policy → quota → no-op run → audit), with allocations:
//
//	go test -run '^$' -bench ExecuteHandler -benchmem ./app
func BenchmarkExecuteHandler(b *testing.B) {
	cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	bench := config.DemoTenant()
	bench.ID = "bench"
	bench.Quota = quota.Limits{RatePerMinute: 10_000_000, Burst: 1_000_000, Concurrency: 1_000_000, DailyCPUSeconds: 1_000_000_000}
	cfg.Tenants = append(cfg.Tenants, bench)
	a, err := app.New(context.Background(), app.Options{Config: cfg, Runner: app.NoopRunner{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Progress: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Stop(context.Background()) })
	s, err := a.Signer()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := s.Mint(auth.Claims{Subject: "bench", TenantID: "bench", Roles: []string{"executor"}}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h := a.Handler()
	const body = `{"source":"def run(args, context):\n    return {\"ok\": True}\n","args":{"n":1}}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/execute", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
