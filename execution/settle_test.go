package execution

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
)

// admitOne admits one run for tenant t on a Redis limiter at addr.
func admitOne(t *testing.T, addr, id string) *quota.Admission {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	l := quota.NewRedis(rdb, quota.Config{Backend: "redis", TimeoutMS: 200})
	adm, err := l.Admit(context.Background(), quota.AdmitRequest{
		TenantID: "t", ExecutionID: id,
		Limits:       quota.Limits{RatePerMinute: 600, Burst: 10, Concurrency: 2, DailyCPUSeconds: 100},
		CPUReserveMS: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	return adm
}

// TestSettlerRetriesUntilTheBackendIsBack: a settlement that fails while
// Redis is down is retried in the background and lands, once, when Redis
// answers again; Flush then reports nothing lost.
func TestSettlerRetriesUntilTheBackendIsBack(t *testing.T) {
	srv := testenv.Redis(t)
	adm := admitOne(t, srv.Addr(), "run-1")
	st := newSettler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.Kill()
	if err := st.settle(context.Background(), adm, 420); err == nil {
		t.Fatal("settle with Redis down: want an error")
	}
	if st.pending.Load() != 1 {
		t.Fatalf("pending = %d, want 1", st.pending.Load())
	}
	srv.Restart()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for st.pending.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	used, err := rdb.HGet(context.Background(), "execgate:{t:t}:budget", "used_ms").Int64()
	if err != nil || used != 420 {
		t.Fatalf("budget used_ms = %d (%v), want 420", used, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if n := st.Flush(ctx); n != 0 {
		t.Fatalf("Flush reports %d uncharged, want 0", n)
	}
}

// TestSettlerFlushReportsWhatIsLost: with Redis still down at shutdown,
// Flush makes its last attempt at once (not after the backoff) and reports
// the run as uncharged.
func TestSettlerFlushReportsWhatIsLost(t *testing.T) {
	srv := testenv.Redis(t)
	adm := admitOne(t, srv.Addr(), "run-2")
	st := newSettler(slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.Kill()
	_ = st.settle(context.Background(), adm, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if n := st.Flush(ctx); n != 1 {
		t.Fatalf("Flush reports %d uncharged, want 1", n)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Flush took %v: the last attempt should not wait for the backoff", d)
	}
}
