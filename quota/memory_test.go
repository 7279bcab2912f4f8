package quota

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestMemoryBehaviour(t *testing.T) {
	runSuite(t, suiteBackend{
		newLimiter: func(t *testing.T, cfg Config, opts ...Option) Limiter {
			return NewMemory(cfg, opts...)
		},
		dropLeases: func(t *testing.T, l Limiter, tenant string) {
			m := l.(*MemoryLimiter)
			m.mu.Lock()
			defer m.mu.Unlock()
			clear(m.tenants[tenant].leases)
		},
	})
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestMemoryFixedInstants(t *testing.T) {
	ctx := context.Background()
	req := func(id string, lim Limits, reserve int64) AdmitRequest {
		return AdmitRequest{TenantID: "acme", ExecutionID: id, Limits: lim, CPUReserveMS: reserve}
	}

	t.Run("GCRA refuses the request after the burst for exactly one emission interval", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		l := NewMemory(Config{}, WithClock(clk.Now))
		lim := Limits{RatePerMinute: 60, Burst: 2}
		mustSettle(t, mustAdmit(t, l, "acme", "a", lim, 0), 0)
		mustSettle(t, mustAdmit(t, l, "acme", "b", lim, 0), 0)
		_, err := l.Admit(ctx, req("c", lim, 0))
		if e := mustExceed(t, err, KindRate); e.RetryAfter != time.Second {
			t.Fatalf("RetryAfter = %s, want exactly 1s", e.RetryAfter)
		}
		clk.Advance(999 * time.Millisecond)
		_, err = l.Admit(ctx, req("c", lim, 0))
		if e := mustExceed(t, err, KindRate); e.RetryAfter != time.Millisecond {
			t.Fatalf("RetryAfter = %s, want 1ms", e.RetryAfter)
		}
		clk.Advance(time.Millisecond)
		mustSettle(t, mustAdmit(t, l, "acme", "c", lim, 0), 0)
		// Idle for the whole bucket: the full burst is back.
		clk.Advance(2 * time.Second)
		if u := usage(t, l, "acme", lim); u.Rate.Remaining != 2 || u.Rate.ResetAfterMS != 0 {
			t.Fatalf("rate usage = %+v, want full", u.Rate)
		}
	})

	t.Run("the budget resets at UTC midnight", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 23, 59, 59, 500_000_000, time.UTC)}
		l := NewMemory(Config{}, WithClock(clk.Now))
		lim := Limits{DailyCPUSeconds: 2}
		mustSettle(t, mustAdmit(t, l, "acme", "a", lim, 2000), 2000)
		_, err := l.Admit(ctx, req("b", lim, 2))
		if e := mustExceed(t, err, KindBudget); e.RetryAfter != 500*time.Millisecond {
			t.Fatalf("RetryAfter = %s, want the 500ms left until midnight", e.RetryAfter)
		}
		u := usage(t, l, "acme", lim)
		if want := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC); !u.Budget.ResetsAt.Equal(want) || u.Budget.UsedMS != 2000 {
			t.Fatalf("budget = %+v, want 2000 used, reset %s", u.Budget, want)
		}
		clk.Advance(500 * time.Millisecond) // 00:00:00.000 UTC
		a := mustAdmit(t, l, "acme", "b", lim, 2000)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 0 || u.Budget.ReservedMS != 2000 {
			t.Fatalf("budget after midnight = %+v, want a fresh day", u.Budget)
		}
		mustSettle(t, a, 42)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 42 {
			t.Fatalf("used = %d, want 42", u.Budget.UsedMS)
		}
	})

	t.Run("a run reserved before midnight and settled after is charged to the new day", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 23, 59, 59, 0, time.UTC)}
		l := NewMemory(Config{LeaseTTLMS: 60_000}, WithClock(clk.Now))
		lim := Limits{DailyCPUSeconds: 10}
		mustSettle(t, mustAdmit(t, l, "acme", "old", lim, 0), 5000)
		a := mustAdmit(t, l, "acme", "across", lim, 3000)
		clk.Advance(2 * time.Second)
		mustSettle(t, a, 2500)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 2500 {
			t.Fatalf("used = %d, want 2500 on the new day", u.Budget.UsedMS)
		}
	})

	t.Run("leases expire by the clock, not by wall time", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		l := NewMemory(Config{LeaseTTLMS: 60_000}, WithClock(clk.Now))
		lim := Limits{Concurrency: 1}
		a := mustAdmit(t, l, "acme", "a", lim, 0)
		a.stopHeartbeat()
		clk.Advance(59 * time.Second)
		_, err := l.Admit(ctx, req("b", lim, 0))
		if e := mustExceed(t, err, KindConcurrency); e.RetryAfter != time.Second {
			t.Fatalf("RetryAfter = %s, want 1s (the dead lease's remaining time)", e.RetryAfter)
		}
		clk.Advance(time.Second)
		mustAdmit(t, l, "acme", "b", lim, 0)
	})

	t.Run("when several dimensions refuse, the longest wait is reported", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		l := NewMemory(Config{}, WithClock(clk.Now))
		lim := Limits{RatePerMinute: 60, Burst: 1, DailyCPUSeconds: 1}
		mustSettle(t, mustAdmit(t, l, "acme", "a", lim, 1000), 1000)
		_, err := l.Admit(ctx, req("b", lim, 1))
		if e := mustExceed(t, err, KindBudget); e.RetryAfter != 12*time.Hour {
			t.Fatalf("RetryAfter = %s, want 12h (budget beats the 1s rate wait)", e.RetryAfter)
		}
	})

	t.Run("settled markers are purged after their retention", func(t *testing.T) {
		clk := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
		l := NewMemory(Config{LeaseTTLMS: 1000}, WithClock(clk.Now))
		for _, id := range []string{"a", "b", "c"} {
			mustSettle(t, mustAdmit(t, l, "acme", id, Limits{}, 0), 1)
		}
		clk.Advance(time.Minute)
		mustSettle(t, mustAdmit(t, l, "acme", "d", Limits{}, 0), 1)
		l.mu.Lock()
		n := len(l.tenants["acme"].settled)
		l.mu.Unlock()
		if n != 1 {
			t.Fatalf("%d settled markers kept, want 1", n)
		}
	})
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  Limits
		ok   bool
	}{
		{"zero is unlimited", Limits{}, true},
		{"the embedded default", Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4, DailyCPUSeconds: 3600}, true},
		{"burst without rate is harmless", Limits{Burst: 3}, true},
		{"rate needs a burst", Limits{RatePerMinute: 60}, false},
		{"negative rate", Limits{RatePerMinute: -1, Burst: 1}, false},
		{"rate beyond the cap", Limits{RatePerMinute: maxRatePerMinute + 1, Burst: 1}, false},
		{"negative daily seconds", Limits{DailyCPUSeconds: -1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.lim.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%+v) = %v, want ok=%v", tc.lim, err, tc.ok)
			}
		})
	}
}
