package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/cmd/execgate/internal/bench"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

// BenchmarkGatewayOverhead measures the gateway alone (HTTP, auth,
// validation, policy, quota, audit) with a no-op executor:
//
//	go test -run '^$' -bench GatewayOverhead -benchtime 2000x ./bench
func BenchmarkGatewayOverhead(b *testing.B) {
	for _, c := range []int{1, 32} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			n := max(b.N, 100)
			res, err := bench.MeasureOverhead(context.Background(), bench.OverheadOptions{Concurrency: c, Requests: n})
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

func TestMeasureOverheadSendsEveryRequestThroughTheGateway(t *testing.T) {
	cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := bench.MeasureOverhead(context.Background(), bench.OverheadOptions{Config: cfg, Concurrency: 4, Requests: 40, Warmup: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 40 || res.Concurrency != 4 || res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 || res.RPS <= 0 {
		t.Fatalf("result = %s", res)
	}
	// Its audit log is its own: the configured one is left alone (a
	// running gateway holds its lock).
	if _, err := os.Stat(cfg.Audit.File); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the configured audit file %s was touched: %v", cfg.Audit.File, err)
	}
}

// BenchmarkExecuteHandler is the per-request path without the network
// (auth → decode → policy → quota → no-op run → audit), with allocations:
//
//	go test -run '^$' -bench ExecuteHandler -benchmem ./bench
func BenchmarkExecuteHandler(b *testing.B) {
	cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Tenants = append(cfg.Tenants, bench.Tenant())
	a, err := app.New(context.Background(), app.Options{Config: cfg, Runner: app.NoopRunner{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Progress: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Stop(context.Background()) })
	s, err := a.Signer()
	if err != nil {
		b.Fatal(err)
	}
	tok, err := s.Mint(auth.Claims{Subject: "bench", TenantID: bench.TenantID, Roles: []string{tenancy.RoleExecutor}}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h := a.Handler()
	body, err := json.Marshal(map[string]string{"source": bench.ProbeSource})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/execute", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
