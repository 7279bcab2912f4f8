package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// suiteBackend is what the shared behaviour suite needs from a backend.
type suiteBackend struct {
	// newLimiter returns a limiter with isolated state.
	newLimiter func(t *testing.T, cfg Config, opts ...Option) Limiter
	// dropLeases deletes tenant's leases behind the limiter's back (an
	// operator flushing Redis, a failover losing writes).
	dropLeases func(t *testing.T, l Limiter, tenant string)
}

// recorder is an Observer that remembers events.
type recorder struct {
	mu     sync.Mutex // guards events
	events []string
}

func (r *recorder) QuotaEvent(tenant string, kind Kind, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s/%s/%s", tenant, kind, outcome))
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func mustAdmit(t *testing.T, l Limiter, tenant, exec string, lim Limits, reserve int64) *Admission {
	t.Helper()
	a, err := l.Admit(context.Background(), AdmitRequest{TenantID: tenant, ExecutionID: exec, Limits: lim, CPUReserveMS: reserve})
	if err != nil {
		t.Fatalf("Admit(%s): %v", exec, err)
	}
	t.Cleanup(func() { _ = a.Release(context.Background()) })
	return a
}

func mustExceed(t *testing.T, err error, want Kind) *ExceededError {
	t.Helper()
	var e *ExceededError
	if !errors.As(err, &e) {
		t.Fatalf("want *ExceededError{%s}, got %v", want, err)
	}
	if e.Kind != want {
		t.Fatalf("refused by %s, want %s (%v)", e.Kind, want, e)
	}
	if !errors.Is(err, ErrExceeded) {
		t.Fatalf("errors.Is(%v, ErrExceeded) = false", err)
	}
	return e
}

func mustSettle(t *testing.T, a *Admission, cpuMS int64) {
	t.Helper()
	if err := a.Settle(context.Background(), cpuMS); err != nil {
		t.Fatalf("Settle(%s, %d): %v", a.ExecutionID, cpuMS, err)
	}
}

func usage(t *testing.T, l Limiter, tenant string, lim Limits) Usage {
	t.Helper()
	u, err := l.Usage(context.Background(), tenant, lim)
	if err != nil {
		t.Fatalf("Usage(%s): %v", tenant, err)
	}
	return u
}

// waitFor polls cond every 5 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nextUTCMidnight(now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// runSuite is the behaviour both backends must show.
func runSuite(t *testing.T, b suiteBackend) {
	ctx := context.Background()
	cfg := Config{LeaseTTLMS: 300}

	t.Run("a burst is admitted, then the rate refuses with Retry-After of about one emission interval", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		// Emission interval 1 s: the burst is admitted at t0, and the
		// next request is refused for the interval less the time since
		// t0. The bounds below take that time as measured here (before
		// the first Admit to after the refusal, which holds the
		// backend's own); with a 100 ms interval and fixed bounds, seven
		// Redis round trips had to fit in 60 ms, which a loaded host
		// can miss.
		const ei = time.Second
		lim := Limits{RatePerMinute: 60, Burst: 3}
		start := time.Now()
		for i := range 3 {
			mustSettle(t, mustAdmit(t, l, "acme", fmt.Sprint("r", i), lim, 0), 0)
		}
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "r3", Limits: lim})
		e := mustExceed(t, err, KindRate)
		if least := ei - time.Since(start) - time.Millisecond; e.RetryAfter < least || e.RetryAfter > ei+time.Millisecond {
			t.Fatalf("RetryAfter = %s, want the %s emission interval less the time since the burst (at least %s)", e.RetryAfter, ei, least)
		}
		u := usage(t, l, "acme", lim)
		if least := (3*ei - time.Since(start)).Milliseconds() - 1; u.Rate.Remaining != 0 || u.Rate.ResetAfterMS < least || u.Rate.ResetAfterMS > (3*ei).Milliseconds() {
			t.Fatalf("rate usage = %+v, want remaining 0 and a reset in %d–%d ms", u.Rate, least, (3 * ei).Milliseconds())
		}
		// Retry-After is accurate: waiting it out is enough.
		time.Sleep(e.RetryAfter + 2*time.Millisecond)
		mustSettle(t, mustAdmit(t, l, "acme", "r3", lim, 0), 0)
	})

	t.Run("the concurrency limit refuses a run beyond it until a slot is settled", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{Concurrency: 2}
		a := mustAdmit(t, l, "acme", "c0", lim, 0)
		mustAdmit(t, l, "acme", "c1", lim, 0)
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "c2", Limits: lim})
		if e := mustExceed(t, err, KindConcurrency); e.RetryAfter <= 0 || e.RetryAfter > time.Second {
			t.Fatalf("RetryAfter = %s, want (0, 1s]", e.RetryAfter)
		}
		if u := usage(t, l, "acme", lim); u.Concurrency != (ConcurrencyUsage{Limit: 2, Running: 2}) {
			t.Fatalf("concurrency usage = %+v", u.Concurrency)
		}
		mustSettle(t, a, 5)
		mustAdmit(t, l, "acme", "c2", lim, 0)
	})

	t.Run("a lease whose holder stopped heart-beating expires and frees its slot and reservation", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{Concurrency: 1, DailyCPUSeconds: 100}
		start := time.Now()
		a := mustAdmit(t, l, "acme", "dead", lim, 2000)
		a.stopHeartbeat() // the gateway holding it was killed mid-run
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "next", Limits: lim})
		if e := mustExceed(t, err, KindConcurrency); e.RetryAfter > 300*time.Millisecond {
			t.Fatalf("RetryAfter = %s, want at most the 300ms left on the dead lease", e.RetryAfter)
		}
		var next *Admission
		waitFor(t, 2*time.Second, "the dead lease to expire", func() bool {
			next, err = l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "next", Limits: lim})
			return err == nil
		})
		if took := time.Since(start); took < 250*time.Millisecond || took > time.Second {
			t.Fatalf("slot freed after %s, want about the 300ms lease TTL", took)
		}
		if u := usage(t, l, "acme", lim); u.Budget.ReservedMS != 0 || u.Concurrency.Running != 1 {
			t.Fatalf("usage = %+v, want the dead run's reservation reclaimed and one run", u)
		}
		// The dead run's measured usage still counts if it ever settles.
		mustSettle(t, a, 700)
		mustSettle(t, next, 300)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 1000 {
			t.Fatalf("used = %d, want 1000", u.Budget.UsedMS)
		}
	})

	t.Run("heartbeats keep a long run's lease beyond its TTL", func(t *testing.T) {
		// A TTL long enough that a loaded CI machine's scheduling delays
		// cannot starve the heartbeat (150 ms flaked at load 10 on 2 cores).
		l := b.newLimiter(t, Config{LeaseTTLMS: 500})
		lim := Limits{Concurrency: 1}
		a := mustAdmit(t, l, "acme", "long", lim, 0)
		deadline := time.Now().Add(2500 * time.Millisecond) // 5 TTLs
		for time.Now().Before(deadline) {
			_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "other", Limits: lim})
			mustExceed(t, err, KindConcurrency)
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case <-a.Lost():
			t.Fatal("lease reported lost while heart-beaten")
		default:
		}
		mustSettle(t, a, 1)
		mustAdmit(t, l, "acme", "other", lim, 0)
	})

	t.Run("a heartbeat that finds the lease gone closes Lost and counts the event", func(t *testing.T) {
		rec := &recorder{}
		l := b.newLimiter(t, Config{LeaseTTLMS: 150}, WithObserver(rec))
		a := mustAdmit(t, l, "acme", "victim", Limits{Concurrency: 1}, 0)
		b.dropLeases(t, l, "acme")
		select {
		case <-a.Lost():
		case <-time.After(2 * time.Second):
			t.Fatal("Lost not closed within 2s of the lease vanishing")
		}
		if s := l.Stats(); s.LeasesLost != 1 {
			t.Fatalf("Stats = %+v, want 1 lease lost", s)
		}
		if got := rec.list(); len(got) != 1 || got[0] != "acme/concurrency/lease_lost" {
			t.Fatalf("observer events = %v", got)
		}
	})

	t.Run("admitting the same execution id twice consumes once", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{RatePerMinute: 60, Burst: 5, Concurrency: 3, DailyCPUSeconds: 100}
		a1 := mustAdmit(t, l, "acme", "same", lim, 1000)
		a2 := mustAdmit(t, l, "acme", "same", lim, 1000)
		if a1.Replayed || !a2.Replayed || a2.ReservedMS != 1000 {
			t.Fatalf("Replayed = %v/%v, ReservedMS = %d", a1.Replayed, a2.Replayed, a2.ReservedMS)
		}
		u := usage(t, l, "acme", lim)
		if u.Concurrency.Running != 1 || u.Budget.ReservedMS != 1000 || u.Rate.Remaining != 4 {
			t.Fatalf("usage = %+v, want 1 running, 1000ms reserved, 4 of 5 rate tokens left", u)
		}
		mustSettle(t, a1, 300)
		mustSettle(t, a2, 300) // the same run settled again: no double charge
		mustSettle(t, a1, 300)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 300 || u.Concurrency.Running != 0 || u.Budget.ReservedMS != 0 {
			t.Fatalf("usage = %+v, want 300ms used once, nothing live", u)
		}
	})

	t.Run("settled usage is the sum of measured usage and reservations come back", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{DailyCPUSeconds: 10} // 10 000 ms
		var live []*Admission
		for i := range 3 {
			live = append(live, mustAdmit(t, l, "acme", fmt.Sprint("b", i), lim, 3000))
		}
		if u := usage(t, l, "acme", lim); u.Budget.ReservedMS != 9000 || u.Budget.UsedMS != 0 || u.Budget.LimitMS != 10000 {
			t.Fatalf("budget = %+v, want 9000 reserved", u.Budget)
		}
		// 1000 ms are left: the next run reserves those, no more.
		b3 := mustAdmit(t, l, "acme", "b3", lim, 3000)
		if b3.ReservedMS != 1000 || b3.BudgetCPUMS(3000) != 1000 {
			t.Fatalf("ReservedMS = %d, BudgetCPUMS = %d; want the 1000 ms left", b3.ReservedMS, b3.BudgetCPUMS(3000))
		}
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "b4", Limits: lim, CPUReserveMS: 3000})
		if e := mustExceed(t, err, KindBudget); e.RetryAfter != time.Second || e.Spent() || e.UsedMS != 0 || e.ReservedMS != 10000 || e.LimitMS != 10000 {
			t.Fatalf("refusal %+v (spent %v), want the 1s hint: runs in flight hold all 10000 ms, none is used", e, e.Spent())
		}
		var sum int64
		mustSettle(t, b3, 0)
		for i, a := range live {
			ms := int64(100 * (i + 1))
			sum += ms
			mustSettle(t, a, ms)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 20 {
			a := mustAdmit(t, l, "acme", fmt.Sprint("m", i), lim, 400)
			ms := rng.Int64N(400)
			sum += ms
			mustSettle(t, a, ms)
		}
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != sum || u.Budget.ReservedMS != 0 {
			t.Fatalf("budget = %+v, want used = %d (the sum measured), 0 reserved", u.Budget, sum)
		}
	})

	t.Run("a budget below the run's cpu_ms admits it with what is left, and refuses only when nothing is", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{DailyCPUSeconds: 1} // below the default cpu_ms of 5000
		a := mustAdmit(t, l, "acme", "first", lim, 5000)
		if a.ReservedMS != 1000 || a.BudgetCPUMS(5000) != 1000 || a.BudgetCPUMS(400) != 400 {
			t.Fatalf("ReservedMS = %d, BudgetCPUMS(5000) = %d, BudgetCPUMS(400) = %d; want 1000, 1000, 400", a.ReservedMS, a.BudgetCPUMS(5000), a.BudgetCPUMS(400))
		}
		if u := usage(t, l, "acme", lim); u.Budget.ReservedMS != 1000 || u.Budget.UsedMS != 0 {
			t.Fatalf("budget = %+v, want 1000 reserved", u.Budget)
		}
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "second", Limits: lim, CPUReserveMS: 5000})
		if e := mustExceed(t, err, KindBudget); e.Spent() || e.RetryAfter != time.Second || e.ReservedMS != 1000 {
			t.Fatalf("refusal %+v: want the rest held by the run in flight, retry in 1s", e)
		}
		mustSettle(t, a, 300)
		a2 := mustAdmit(t, l, "acme", "second", lim, 5000)
		if a2.ReservedMS != 700 {
			t.Fatalf("ReservedMS = %d, want the 700 ms left after 300 were used", a2.ReservedMS)
		}
		replay := mustAdmit(t, l, "acme", "second", lim, 5000)
		if !replay.Replayed || replay.ReservedMS != 700 {
			t.Fatalf("replay: Replayed %v, ReservedMS %d; want the same 700 ms reservation", replay.Replayed, replay.ReservedMS)
		}
		mustSettle(t, a2, 700)
		if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 1000 || u.Budget.ReservedMS != 0 {
			t.Fatalf("budget = %+v, want 1000 used (settled once each), 0 reserved", u.Budget)
		}
		unlimited := mustAdmit(t, l, "other", "u", Limits{}, 5000)
		if unlimited.ReservedMS != 5000 || unlimited.BudgetCPUMS(5000) != 5000 {
			t.Fatalf("an unlimited budget: ReservedMS %d, BudgetCPUMS %d; want 5000", unlimited.ReservedMS, unlimited.BudgetCPUMS(5000))
		}
	})

	t.Run("an exhausted budget refuses until the next UTC midnight", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{DailyCPUSeconds: 1}
		mustSettle(t, mustAdmit(t, l, "acme", "all", lim, 1000), 1000)
		for _, reserve := range []int64{0, 1} {
			_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "more", Limits: lim, CPUReserveMS: reserve})
			e := mustExceed(t, err, KindBudget)
			want := time.Until(nextUTCMidnight(time.Now()))
			if d := e.RetryAfter - want; d < -2*time.Second || d > 2*time.Second {
				t.Fatalf("reserve %d: RetryAfter = %s, want about %s (to UTC midnight)", reserve, e.RetryAfter, want)
			}
			if !e.Spent() || e.UsedMS != 1000 || e.LimitMS != 1000 {
				t.Fatalf("reserve %d: refusal %+v, want spent: 1000 of 1000 ms used", reserve, e)
			}
		}
		u := usage(t, l, "acme", lim)
		if !u.Budget.ResetsAt.Equal(nextUTCMidnight(time.Now())) || u.Budget.UsedMS != 1000 {
			t.Fatalf("budget = %+v, want used 1000 and reset at %s", u.Budget, nextUTCMidnight(time.Now()))
		}
	})

	t.Run("an admin override applies from the next Admit and clearing it restores the configured limits", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		configured := Limits{Concurrency: 1}
		mustAdmit(t, l, "acme", "o0", configured, 0)
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "o1", Limits: configured})
		mustExceed(t, err, KindConcurrency)

		if _, ok, err := l.Override(ctx, "acme"); err != nil || ok {
			t.Fatalf("Override before set = %v, %v", ok, err)
		}
		over := Limits{RatePerMinute: 120, Burst: 10, Concurrency: 2, DailyCPUSeconds: 50, MaxQueued: 3}
		if err := l.SetOverride(ctx, "acme", over); err != nil {
			t.Fatal(err)
		}
		a := mustAdmit(t, l, "acme", "o1", configured, 0)
		if a.Limits != over {
			t.Fatalf("admission limits = %+v, want the override", a.Limits)
		}
		if got, ok, err := l.Override(ctx, "acme"); err != nil || !ok || got != over {
			t.Fatalf("Override = %+v, %v, %v", got, ok, err)
		}
		if got, err := l.Effective(ctx, "acme", configured); err != nil || got != over {
			t.Fatalf("Effective = %+v, %v", got, err)
		}
		if u := usage(t, l, "acme", configured); u.Concurrency.Limit != 2 || u.Budget.LimitMS != 50000 || u.Rate.LimitPerMinute != 120 {
			t.Fatalf("usage limits = %+v, want the override's", u)
		}
		if got, err := l.Effective(ctx, "other", configured); err != nil || got != configured {
			t.Fatalf("Effective(other) = %+v, %v: an override leaked across tenants", got, err)
		}

		if err := l.ClearOverride(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if got, err := l.Effective(ctx, "acme", configured); err != nil || got != configured {
			t.Fatalf("Effective after clear = %+v, %v", got, err)
		}
		_, err = l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "o2", Limits: configured})
		mustExceed(t, err, KindConcurrency)
	})

	t.Run("raising a throttled tenant's rate admits the very next request; leases and budget are kept", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		slow := Limits{RatePerMinute: 2, Burst: 2, Concurrency: 5, DailyCPUSeconds: 100} // emission interval 30 s
		mustSettle(t, mustAdmit(t, l, "acme", "s0", slow, 0), 1000)
		held := mustAdmit(t, l, "acme", "s1", slow, 0)
		_, err := l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "s2", Limits: slow})
		if e := mustExceed(t, err, KindRate); e.RetryAfter < 20*time.Second {
			t.Fatalf("RetryAfter = %s, want about 30s under the slow rate", e.RetryAfter)
		}
		fast := Limits{RatePerMinute: 600, Burst: 50, Concurrency: 5, DailyCPUSeconds: 100}
		if err := l.SetOverride(ctx, "acme", fast); err != nil {
			t.Fatal(err)
		}
		// The next request, with no wait: the old TAT (30 s ahead) is gone.
		for i := range 40 {
			mustSettle(t, mustAdmit(t, l, "acme", fmt.Sprint("f", i), slow, 0), 0)
		}
		u := usage(t, l, "acme", slow)
		if u.Rate.LimitPerMinute != 600 || u.Rate.Remaining < 5 || u.Rate.Remaining > 10 {
			t.Fatalf("rate usage after 40 of a burst of 50 = %+v, want the new limit and about 10 left", u.Rate)
		}
		if u.Concurrency.Running != 1 || u.Budget.UsedMS != 1000 {
			t.Fatalf("usage = %+v: the override dropped the running lease or the settled CPU", u)
		}
		mustSettle(t, held, 0)

		// Clearing it resets again: the slow configured limits start full.
		if err := l.ClearOverride(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		mustSettle(t, mustAdmit(t, l, "acme", "c0", slow, 0), 0)
		mustSettle(t, mustAdmit(t, l, "acme", "c1", slow, 0), 0)
		_, err = l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "c2", Limits: slow})
		mustExceed(t, err, KindRate)
	})

	t.Run("invalid overrides are refused with the field named", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		for _, tc := range []struct {
			name, tenant string
			lim          Limits
			field        string
		}{
			{"negative burst", "acme", Limits{Burst: -1}, "burst"},
			{"rate without burst", "acme", Limits{RatePerMinute: 10}, "burst"},
			{"negative concurrency", "acme", Limits{Concurrency: -2}, "concurrency"},
			{"absurd budget", "acme", Limits{DailyCPUSeconds: 1 << 40}, "daily_cpu_seconds"},
			{"negative max_queued", "acme", Limits{MaxQueued: -1}, "max_queued"},
			{"empty tenant", "", Limits{}, "tenant_id"},
			{"tenant breaking the hash tag", "a}b", Limits{}, "tenant_id"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := l.SetOverride(ctx, tc.tenant, tc.lim)
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("SetOverride = %v, want ErrInvalid naming %s", err, tc.field)
				}
			})
		}
		if _, ok, err := l.Override(ctx, "acme"); err != nil || ok {
			t.Fatalf("an invalid override was stored: %v, %v", ok, err)
		}
	})

	t.Run("bad admission requests are refused with the field named", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		for _, tc := range []struct {
			name  string
			req   AdmitRequest
			field string
		}{
			{"no tenant", AdmitRequest{ExecutionID: "x"}, "tenant_id"},
			{"no execution id", AdmitRequest{TenantID: "acme"}, "execution_id"},
			{"negative reservation", AdmitRequest{TenantID: "acme", ExecutionID: "x", CPUReserveMS: -1}, "cpu reservation"},
			{"negative limits", AdmitRequest{TenantID: "acme", ExecutionID: "x", Limits: Limits{Concurrency: -1}}, "concurrency"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := l.Admit(ctx, tc.req)
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("Admit = %v, want ErrInvalid naming %s", err, tc.field)
				}
			})
		}
		a := mustAdmit(t, l, "acme", "neg", Limits{}, 0)
		if err := a.Settle(ctx, -5); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Settle(-5) = %v, want ErrInvalid", err)
		}
	})

	t.Run("Release frees the lease and the reservation and charges nothing", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{Concurrency: 1, DailyCPUSeconds: 10}
		a := mustAdmit(t, l, "acme", "never-ran", lim, 500)
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("second Release = %v", err)
		}
		mustSettle(t, a, 900) // after Release: a no-op
		if u := usage(t, l, "acme", lim); u.Concurrency.Running != 0 || u.Budget.ReservedMS != 0 || u.Budget.UsedMS != 0 {
			t.Fatalf("usage = %+v, want nothing running, reserved or used", u)
		}
	})

	t.Run("tenants do not share quota", func(t *testing.T) {
		l := b.newLimiter(t, cfg)
		lim := Limits{Concurrency: 1}
		mustAdmit(t, l, "acme", "x", lim, 0)
		mustAdmit(t, l, "globex", "x", lim, 0)
	})

	t.Run("200 concurrent admissions never exceed a concurrency of 3", func(t *testing.T) {
		l := b.newLimiter(t, Config{LeaseTTLMS: 5000})
		assertNoOverAdmission(t, []Limiter{l}, 200, 3)
	})
}

// assertNoOverAdmission runs n goroutines that each retry Admit (spread
// over limiters) until admitted, hold the run briefly and settle; it fails
// if more than limit runs were ever held at once, or if the limit was never
// reached (the test would prove nothing).
func assertNoOverAdmission(t *testing.T, ls []Limiter, n, limit int) {
	t.Helper()
	lim := Limits{Concurrency: limit}
	var holders, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[i%len(ls)]
			req := AdmitRequest{TenantID: "crowd", ExecutionID: fmt.Sprint("run-", i), Limits: lim, CPUReserveMS: 10}
			for {
				a, err := l.Admit(context.Background(), req)
				var e *ExceededError
				switch {
				case err == nil:
					h := holders.Add(1)
					for p := peak.Load(); h > p && !peak.CompareAndSwap(p, h); p = peak.Load() {
					}
					time.Sleep(time.Millisecond) // the run
					holders.Add(-1)
					admitted.Add(1)
					errs <- a.Settle(context.Background(), 1)
					return
				case errors.As(err, &e):
					if time.Now().After(deadline) {
						errs <- fmt.Errorf("run-%d never admitted", i)
						return
					}
					time.Sleep(time.Duration(1+rand.IntN(3)) * time.Millisecond) // back off
				default:
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p > int64(limit) {
		t.Fatalf("%d runs held at once, limit %d", p, limit)
	} else if p < int64(limit) {
		t.Fatalf("peak %d never reached the limit %d: the test exercised nothing", p, limit)
	}
	if admitted.Load() != int64(n) {
		t.Fatalf("admitted %d of %d", admitted.Load(), n)
	}
}
