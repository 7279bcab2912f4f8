package quota

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
)

// Run: go test -run '^$' -bench 'Admit' -benchtime 20000x ./quota/
// Each op is one Admit plus one Settle for a single (hot) tenant, from
// 8×GOMAXPROCS goroutines; p50/p99 are per admit+settle pair.

func BenchmarkAdmitMemory(b *testing.B) {
	benchAdmit(b, NewMemory(Config{}))
}

func BenchmarkAdmitRedis(b *testing.B) {
	srv := testenv.Redis(b)
	client, err := NewRedisClient(Config{RedisURL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	benchAdmit(b, NewRedis(client, Config{KeyPrefix: uniquePrefix()}))
}

func benchAdmit(b *testing.B, l Limiter) {
	ctx := context.Background()
	lim := Limits{RatePerMinute: maxRatePerMinute, Burst: maxBurst, Concurrency: maxConcurrency, DailyCPUSeconds: maxDailyCPUSeconds}
	var (
		seq  atomic.Int64
		mu   sync.Mutex // guards lat
		lat  []time.Duration
		fail atomic.Value
	)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			id := strconv.FormatInt(seq.Add(1), 10)
			t0 := time.Now()
			a, err := l.Admit(ctx, AdmitRequest{TenantID: "bench", ExecutionID: id, Limits: lim, CPUReserveMS: 100})
			if err == nil {
				err = a.Settle(ctx, 10)
			}
			if err != nil {
				fail.Store(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := fail.Load().(error); err != nil {
		b.Fatal(err)
	}
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(float64(len(lat)-1)*p)].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "admissions/s")
}
