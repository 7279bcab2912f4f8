package quota

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MemoryLimiter keeps quota state in this process: the embedded default
// (one gateway, no Redis). It has the same semantics as RedisLimiter, with
// time from an injectable clock; it is never unavailable.
type MemoryLimiter struct {
	ttl    time.Duration
	now    func() time.Time
	events events

	mu        sync.Mutex // guards tenants, overrides and tools
	tenants   map[string]*memTenant
	overrides map[string]Limits
	tools     map[string]map[string][]byte // tenant → API tool server name → JSON
}

// memTenant is one tenant's state (guarded by MemoryLimiter.mu).
type memTenant struct {
	tat      time.Time            // GCRA theoretical arrival time
	leases   map[string]time.Time // execution id → lease expiry
	resv     map[string]int64     // execution id → reserved CPU ms; lives with its lease
	day      int64                // UTC day usedMS belongs to
	usedMS   int64                // settled CPU ms on day
	settled  map[string]time.Time // execution id → marker expiry (idempotent finish)
	settledQ []settledMark        // the same markers in expiry order, for purging
}

type settledMark struct {
	id  string
	exp time.Time
}

var (
	_ Limiter  = (*MemoryLimiter)(nil)
	_ leaseOps = (*MemoryLimiter)(nil)
)

// NewMemory returns an in-memory limiter. cfg.LeaseTTLMS (default 15 s)
// sets the lease lifetime; WithClock injects time for tests.
func NewMemory(cfg Config, opts ...Option) *MemoryLimiter {
	cfg = cfg.WithDefaults()
	o := buildOptions(opts)
	return &MemoryLimiter{
		ttl:       time.Duration(cfg.LeaseTTLMS) * time.Millisecond,
		now:       o.now,
		events:    events{observer: o.observer},
		tenants:   map[string]*memTenant{},
		overrides: map[string]Limits{},
	}
}

func (m *MemoryLimiter) tenant(id string) *memTenant {
	t := m.tenants[id]
	if t == nil {
		t = &memTenant{
			leases:  map[string]time.Time{},
			resv:    map[string]int64{},
			settled: map[string]time.Time{},
		}
		m.tenants[id] = t
	}
	return t
}

// purge drops expired leases with their reservations and old settled
// markers.
func (t *memTenant) purge(now time.Time) {
	for id, exp := range t.leases {
		if !exp.After(now) {
			delete(t.leases, id)
			delete(t.resv, id)
		}
	}
	i := 0
	for ; i < len(t.settledQ) && !t.settledQ[i].exp.After(now); i++ {
		if exp, ok := t.settled[t.settledQ[i].id]; ok && !exp.After(now) {
			delete(t.settled, t.settledQ[i].id)
		}
	}
	t.settledQ = t.settledQ[i:]
}

func (t *memTenant) reserved() int64 {
	var sum int64
	for _, ms := range t.resv {
		sum += ms
	}
	return sum
}

func (t *memTenant) usedOn(day int64) int64 {
	if t.day != day {
		return 0
	}
	return t.usedMS
}

func (t *memTenant) earliestLease() time.Time {
	var first time.Time
	for _, exp := range t.leases {
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
	}
	return first
}

func (m *MemoryLimiter) effective(tenant string, configured Limits) Limits {
	if o, ok := m.overrides[tenant]; ok {
		return o
	}
	return configured
}

// Admit admits one run or returns *ExceededError naming the refusing
// dimension. See Limiter.
func (m *MemoryLimiter) Admit(ctx context.Context, req AdmitRequest) (*Admission, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("admitting: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("admitting: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	eff := m.effective(req.TenantID, req.Limits)
	t := m.tenant(req.TenantID)
	t.purge(now)

	if _, ok := t.leases[req.ExecutionID]; ok {
		t.leases[req.ExecutionID] = now.Add(m.ttl)
		a := newAdmission(req, eff, t.resv[req.ExecutionID], m, &m.events, m.ttl)
		a.Replayed = true
		return a, nil
	}

	// Check everything first.
	var refusal *ExceededError
	var g gcraResult
	if eff.RatePerMinute > 0 {
		g = gcra(t.tat, now, eff.RatePerMinute, eff.Burst, 1)
		if !g.allowed {
			refusal = maxKind(refusal, KindRate, g.retryAfter)
		}
	}
	if eff.Concurrency > 0 && len(t.leases) >= eff.Concurrency {
		retry := concurrencyRetryHint
		if d := t.earliestLease().Sub(now); d < retry {
			retry = d
		}
		refusal = maxKind(refusal, KindConcurrency, retry)
	}
	reserve := req.CPUReserveMS
	var budget ExceededError // the budget's numbers, for a budget refusal
	if eff.DailyCPUSeconds > 0 {
		limit := eff.DailyCPUSeconds * 1000
		day := utcDay(now)
		used, reserved := t.usedOn(day), t.reserved()
		left := limit - used - reserved
		switch {
		case used >= limit || (reserve > 0 && left <= 0):
			retry := dayReset(day).Sub(now)
			if used < limit && retry > concurrencyRetryHint {
				retry = concurrencyRetryHint // the rest is reserved by runs in flight: it comes back as they settle
			}
			budget = ExceededError{UsedMS: used, ReservedMS: reserved, LimitMS: limit}
			refusal = maxKind(refusal, KindBudget, retry)
		case reserve > left:
			reserve = left // the run's cpu_ms becomes what is left (Admission.ReservedMS)
		}
	}
	if refusal != nil {
		if refusal.Kind == KindBudget {
			refusal.UsedMS, refusal.ReservedMS, refusal.LimitMS = budget.UsedMS, budget.ReservedMS, budget.LimitMS
		}
		return nil, refusal
	}

	// Then consume.
	if eff.RatePerMinute > 0 {
		t.tat = g.tat
	}
	t.leases[req.ExecutionID] = now.Add(m.ttl)
	if reserve > 0 {
		t.resv[req.ExecutionID] = reserve
	}
	delete(t.settled, req.ExecutionID) // the id is admitted anew
	return newAdmission(req, eff, reserve, m, &m.events, m.ttl), nil
}

func (m *MemoryLimiter) heartbeat(_ context.Context, tenant, execID string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	t := m.tenant(tenant)
	exp, ok := t.leases[execID]
	if !ok || !exp.After(now) {
		delete(t.leases, execID)
		delete(t.resv, execID)
		return false, nil
	}
	t.leases[execID] = now.Add(m.ttl)
	return true, nil
}

func (m *MemoryLimiter) finish(_ context.Context, tenant, execID string, cpuMS int64, settle bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	t := m.tenant(tenant)
	t.purge(now)
	if _, done := t.settled[execID]; done {
		return nil
	}
	delete(t.leases, execID)
	delete(t.resv, execID)
	if settle {
		if day := utcDay(now); t.day != day {
			t.day, t.usedMS = day, 0
		}
		t.usedMS += cpuMS
	}
	exp := now.Add(settledRetention(m.ttl))
	t.settled[execID] = exp
	t.settledQ = append(t.settledQ, settledMark{id: execID, exp: exp})
	return nil
}

// settledRetention is how long a finished execution id is remembered so a
// retried Settle does not charge twice.
func settledRetention(ttl time.Duration) time.Duration {
	return max(2*ttl, time.Minute)
}

// Override returns the admin override of tenant's limits, if one is set.
func (m *MemoryLimiter) Override(_ context.Context, tenant string) (Limits, bool, error) {
	if err := validTenant(tenant); err != nil {
		return Limits{}, false, fmt.Errorf("reading override: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.overrides[tenant]
	return o, ok, nil
}

// SetOverride replaces tenant's limits from the next Admit on and resets
// the tenant's rate state (see Limiter.SetOverride).
func (m *MemoryLimiter) SetOverride(_ context.Context, tenant string, l Limits) error {
	if err := validOverride(tenant, l); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.overrides[tenant] = l
	m.resetRate(tenant)
	return nil
}

// resetRate forgets tenant's GCRA state: a theoretical arrival time
// computed under the old emission interval says nothing about the new one.
// Callers hold m.mu.
func (m *MemoryLimiter) resetRate(tenant string) {
	if t := m.tenants[tenant]; t != nil {
		t.tat = time.Time{}
	}
}

// ClearOverride removes tenant's override; the configured limits apply again.
func (m *MemoryLimiter) ClearOverride(_ context.Context, tenant string) error {
	if err := validTenant(tenant); err != nil {
		return fmt.Errorf("clearing override: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.overrides, tenant)
	m.resetRate(tenant)
	return nil
}

// Effective returns the override if set, else configured.
func (m *MemoryLimiter) Effective(_ context.Context, tenant string, configured Limits) (Limits, error) {
	if err := validTenant(tenant); err != nil {
		return Limits{}, fmt.Errorf("reading limits: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.effective(tenant, configured), nil
}

// Usage reports tenant's state under its effective limits.
func (m *MemoryLimiter) Usage(_ context.Context, tenant string, configured Limits) (Usage, error) {
	if err := validTenant(tenant); err != nil {
		return Usage{}, fmt.Errorf("reading usage: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	eff := m.effective(tenant, configured)
	t := m.tenants[tenant]
	if t == nil {
		t = &memTenant{} // never seen: report without keeping state for a read
	}
	t.purge(now)
	day := utcDay(now)
	u := Usage{
		TenantID:    tenant,
		Rate:        RateUsage{LimitPerMinute: eff.RatePerMinute, Remaining: -1},
		Concurrency: ConcurrencyUsage{Limit: eff.Concurrency, Running: len(t.leases)},
		Budget: BudgetUsage{
			LimitMS:    eff.DailyCPUSeconds * 1000,
			UsedMS:     t.usedOn(day),
			ReservedMS: t.reserved(),
			ResetsAt:   dayReset(day),
		},
	}
	if eff.RatePerMinute > 0 {
		g := gcra(t.tat, now, eff.RatePerMinute, eff.Burst, 0)
		u.Rate.Remaining = g.remaining
		u.Rate.ResetAfterMS = g.resetAfter.Milliseconds()
	}
	return u, nil
}

// Ping always succeeds.
func (m *MemoryLimiter) Ping(context.Context) error { return nil }

// Stats returns the event counters (only lease losses happen here).
func (m *MemoryLimiter) Stats() Stats { return m.events.stats() }

// Close does nothing; admissions keep their heartbeats until settled.
func (m *MemoryLimiter) Close() error { return nil }

func validOverride(tenant string, l Limits) error {
	if err := validTenant(tenant); err != nil {
		return fmt.Errorf("setting override: %w", err)
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("setting override: %w: %w", ErrInvalid, err)
	}
	return nil
}
