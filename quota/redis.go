package quota

import (
	"context"
	_ "embed" // Lua scripts
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// RedisLimiter keeps quota state in Redis, shared by every gateway replica.
// Admission is one Lua script (one round trip); time comes from Redis TIME
// inside the scripts, never from a gateway's clock.
//
// # Key layout
//
// Every key of a tenant carries the hash tag {t:<tenant>}, so each script
// touches one Cluster slot; <p> is Config.KeyPrefix ("execgate").
//
//	rate:<p>:{t:<id>}:rate   STRING GCRA theoretical arrival time, seconds since
//	                         2017-01-01 (redis_rate's key prefix and format, so
//	                         redis_rate reads it); EX until the bucket is full
//	<p>:{t:<id>}:leases      ZSET   execution id → lease expiry (ms, Redis TIME);
//	                         heart-beaten; expired members are purged on Admit
//	<p>:{t:<id>}:resv        HASH   execution id → reserved CPU ms; an entry
//	                         lives exactly as long as its lease
//	<p>:{t:<id>}:budget      HASH   day (UTC day number), used_ms (settled CPU ms
//	                         that day); a new day starts from 0; expires an hour
//	                         after its day
//	<p>:{t:<id>}:settled     ZSET   execution id → marker expiry: finished ids,
//	                         so a retried Settle never charges twice
//	<p>:{t:<id>}:override    HASH   admin override: rate_per_minute, burst,
//	                         concurrency, daily_cpu_seconds, max_queued (absent
//	                         in overrides older than it: 0); no expiry
//	<p>:{t:<id>}:tools       HASH   tool servers added over the admin API: server
//	                         name → its JSON (ToolServerStore); at most
//	                         MaxToolServers fields; no expiry
//
// Leases and reservations keys expire 2×LeaseTTL after their last write, so
// a tenant that stops sending leaves nothing behind but its override.
//
// When Redis cannot answer, concurrency and budget fail closed
// (ErrUnavailable); the rate fails closed too unless Config.RateFailMode is
// "local", which admits tenants without concurrency and budget limits
// through a per-process limiter. go-redis reconnects on its own, so the
// limiter recovers when Redis returns.
type RedisLimiter struct {
	client   redis.UniversalClient
	owned    bool // Close closes client
	prefix   string
	ttl      time.Duration
	failMode string
	rate     *redis_rate.Limiter
	events   events
	local    localRates

	// dayShiftMS moves the budget day boundary (tests cross midnight with
	// it); 0 in production.
	dayShiftMS atomic.Int64

	ovMu    sync.RWMutex // guards ovCache
	ovCache map[string]Limits
}

var (
	_ Limiter  = (*RedisLimiter)(nil)
	_ leaseOps = (*RedisLimiter)(nil)
)

var (
	//go:embed lua/admit.lua
	admitSrc string
	//go:embed lua/heartbeat.lua
	heartbeatSrc string
	//go:embed lua/finish.lua
	finishSrc string
	//go:embed lua/usage.lua
	usageSrc string

	admitScript     = redis.NewScript(admitSrc)
	heartbeatScript = redis.NewScript(heartbeatSrc)
	finishScript    = redis.NewScript(finishSrc)
	usageScript     = redis.NewScript(usageSrc)
)

// NewRedis returns a limiter on client (standalone, Sentinel or Cluster).
// The caller keeps ownership of client.
func NewRedis(client redis.UniversalClient, cfg Config, opts ...Option) *RedisLimiter {
	cfg = cfg.WithDefaults()
	o := buildOptions(opts)
	return &RedisLimiter{
		client:   client,
		prefix:   cfg.KeyPrefix,
		ttl:      time.Duration(cfg.LeaseTTLMS) * time.Millisecond,
		failMode: cfg.RateFailMode,
		rate:     redis_rate.NewLimiter(client),
		events:   events{observer: o.observer},
		local:    localRates{m: map[string]*localRate{}},
		ovCache:  map[string]Limits{},
	}
}

// Open builds the configured backend: a MemoryLimiter, or a RedisLimiter
// on a client from NewRedisClient that Close closes.
func Open(cfg Config, opts ...Option) (Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Backend != "redis" {
		return NewMemory(cfg, opts...), nil
	}
	client, err := NewRedisClient(cfg)
	if err != nil {
		return nil, err
	}
	l := NewRedis(client, cfg, opts...)
	l.owned = true
	return l, nil
}

// tenantKeys are one tenant's keys (see the layout on RedisLimiter).
type tenantKeys struct {
	rateBase string // what redis_rate is given; it prepends "rate:"
	rate     string
	leases   string
	resv     string
	budget   string
	settled  string
	override string
	tools    string
}

func (r *RedisLimiter) keys(tenant string) tenantKeys {
	base := r.prefix + ":{t:" + tenant + "}:"
	return tenantKeys{
		rateBase: base + "rate",
		rate:     "rate:" + base + "rate",
		leases:   base + "leases",
		resv:     base + "resv",
		budget:   base + "budget",
		settled:  base + "settled",
		override: base + "override",
		tools:    base + "tools",
	}
}

// unavailable wraps a backend error; a cancelled caller is not an outage.
func unavailable(ctx context.Context, doing string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", doing, ctx.Err())
	}
	return fmt.Errorf("%s: %w: %w", doing, ErrUnavailable, err)
}

// Admit admits one run in one round trip. See Limiter.
func (r *RedisLimiter) Admit(ctx context.Context, req AdmitRequest) (*Admission, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("admitting: %w", err)
	}
	k := r.keys(req.TenantID)
	l := req.Limits
	res, err := admitScript.Run(ctx, r.client,
		[]string{k.rate, k.leases, k.resv, k.budget, k.settled, k.override},
		req.ExecutionID, l.RatePerMinute, l.Burst, l.Concurrency, l.DailyCPUSeconds,
		req.CPUReserveMS, r.ttl.Milliseconds(), r.dayShiftMS.Load(), l.MaxQueued,
	).Int64Slice()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("admitting: %w", ctx.Err())
		}
		return r.degraded(req, err)
	}
	if len(res) != 11 {
		return nil, fmt.Errorf("admitting: %w: admit script returned %d values", ErrUnavailable, len(res))
	}
	eff := Limits{RatePerMinute: int(res[4]), Burst: int(res[5]), Concurrency: int(res[6]), DailyCPUSeconds: res[7], MaxQueued: int(res[8])}
	r.rememberEffective(req.TenantID, req.Limits, eff)
	switch res[0] {
	case 0:
		kind := KindRate
		switch res[1] {
		case 2:
			kind = KindConcurrency
		case 3:
			kind = KindBudget
		}
		e := &ExceededError{Kind: kind, RetryAfter: time.Duration(res[2]) * time.Millisecond}
		if kind == KindBudget {
			e.UsedMS, e.ReservedMS, e.LimitMS = res[9], res[10], eff.DailyCPUSeconds*1000
		}
		return nil, e
	case 2:
		a := newAdmission(req, eff, res[3], r, &r.events, r.ttl)
		a.Replayed = true
		return a, nil
	default:
		return newAdmission(req, eff, res[3], r, &r.events, r.ttl), nil
	}
}

// rememberEffective caches overrides seen by Admit for the local fallback,
// which cannot read them while Redis is down.
func (r *RedisLimiter) rememberEffective(tenant string, configured, eff Limits) {
	r.ovMu.RLock()
	cached, ok := r.ovCache[tenant]
	r.ovMu.RUnlock()
	overridden := eff != configured
	if (overridden && ok && cached == eff) || (!overridden && !ok) {
		return
	}
	r.ovMu.Lock()
	defer r.ovMu.Unlock()
	if overridden {
		r.ovCache[tenant] = eff
	} else {
		delete(r.ovCache, tenant)
	}
}

// degraded decides an admission while Redis is down: concurrency and budget
// fail closed; the rate fails closed or, in "local" mode, falls back to a
// per-process limiter.
func (r *RedisLimiter) degraded(req AdmitRequest, cause error) (*Admission, error) {
	eff := req.Limits
	r.ovMu.RLock()
	if o, ok := r.ovCache[req.TenantID]; ok {
		eff = o
	}
	r.ovMu.RUnlock()
	var kind Kind
	switch {
	case eff.Concurrency > 0:
		kind = KindConcurrency
	case eff.DailyCPUSeconds > 0:
		kind = KindBudget
	case r.failMode != FailLocal || !outage(cause):
		kind = KindRate
	}
	if kind != "" {
		r.events.record(req.TenantID, kind, OutcomeFailClosed)
		return nil, fmt.Errorf("admitting: %w (%s fails closed): %w", ErrUnavailable, kind, cause)
	}
	r.events.record(req.TenantID, KindRate, OutcomeFailOpen)
	if eff.RatePerMinute > 0 {
		if ok, retry := r.local.allow(req.TenantID, eff, time.Now()); !ok {
			return nil, &ExceededError{Kind: KindRate, RetryAfter: retry}
		}
	}
	return newAdmission(req, eff, 0, nil, &r.events, r.ttl), nil
}

// outage reports whether err means Redis cannot be reached or cannot serve
// right now. Other server errors (a script error, a key of the wrong type)
// are not outages: they fail closed whatever the fail mode.
func outage(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // dial, timeout, closed pool
	}
	for _, p := range []string{"LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

func (r *RedisLimiter) heartbeat(ctx context.Context, tenant, execID string) (bool, error) {
	k := r.keys(tenant)
	n, err := heartbeatScript.Run(ctx, r.client, []string{k.leases, k.resv}, execID, r.ttl.Milliseconds()).Int64()
	if err != nil {
		return false, unavailable(ctx, "renewing lease", err)
	}
	return n == 1, nil
}

func (r *RedisLimiter) finish(ctx context.Context, tenant, execID string, cpuMS int64, settle bool) error {
	k := r.keys(tenant)
	mode, doing := "0", "releasing"
	if settle {
		mode, doing = "1", "settling"
	}
	err := finishScript.Run(ctx, r.client, []string{k.leases, k.resv, k.budget, k.settled},
		execID, cpuMS, mode, r.dayShiftMS.Load(), settledRetention(r.ttl).Milliseconds(),
	).Err()
	if err != nil {
		return unavailable(ctx, doing, err)
	}
	return nil
}

// overrideFields are the override hash's fields; the last, max_queued, is
// absent from overrides written before it existed (read as 0).
var overrideFields = []string{"rate_per_minute", "burst", "concurrency", "daily_cpu_seconds", "max_queued"}

// Override returns the admin override of tenant's limits, if one is set.
func (r *RedisLimiter) Override(ctx context.Context, tenant string) (Limits, bool, error) {
	if err := validTenant(tenant); err != nil {
		return Limits{}, false, fmt.Errorf("reading override: %w", err)
	}
	vals, err := r.client.HMGet(ctx, r.keys(tenant).override, overrideFields...).Result()
	if err != nil {
		return Limits{}, false, unavailable(ctx, "reading override", err)
	}
	var n [5]int64
	set := 0
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		set++
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return Limits{}, false, fmt.Errorf("reading override: field %s: %w", overrideFields[i], err)
		}
	}
	switch {
	case set == 0:
		return Limits{}, false, nil
	case set == len(overrideFields), set == len(overrideFields)-1 && vals[len(vals)-1] == nil:
		return Limits{RatePerMinute: int(n[0]), Burst: int(n[1]), Concurrency: int(n[2]), DailyCPUSeconds: n[3], MaxQueued: int(n[4])}, true, nil
	default:
		return Limits{}, false, fmt.Errorf("reading override: %d of %d fields set (written outside execgate?)", set, len(overrideFields))
	}
}

// SetOverride replaces tenant's limits from the next Admit on (on every
// replica: the override lives in Redis) and resets the tenant's rate state,
// in one MULTI on one slot (see Limiter.SetOverride).
func (r *RedisLimiter) SetOverride(ctx context.Context, tenant string, l Limits) error {
	if err := validOverride(tenant, l); err != nil {
		return err
	}
	k := r.keys(tenant)
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k.override,
			"rate_per_minute", l.RatePerMinute, "burst", l.Burst,
			"concurrency", l.Concurrency, "daily_cpu_seconds", l.DailyCPUSeconds, "max_queued", l.MaxQueued)
		p.Del(ctx, k.rate)
		return nil
	})
	if err != nil {
		return unavailable(ctx, "setting override", err)
	}
	r.local.reset(tenant)
	return nil
}

// ClearOverride removes tenant's override; the configured limits apply again.
func (r *RedisLimiter) ClearOverride(ctx context.Context, tenant string) error {
	if err := validTenant(tenant); err != nil {
		return fmt.Errorf("clearing override: %w", err)
	}
	k := r.keys(tenant)
	if err := r.client.Del(ctx, k.override, k.rate).Err(); err != nil {
		return unavailable(ctx, "clearing override", err)
	}
	r.local.reset(tenant)
	r.ovMu.Lock()
	delete(r.ovCache, tenant)
	r.ovMu.Unlock()
	return nil
}

// Effective returns the override if set, else configured.
func (r *RedisLimiter) Effective(ctx context.Context, tenant string, configured Limits) (Limits, error) {
	o, ok, err := r.Override(ctx, tenant)
	if err != nil {
		return Limits{}, err
	}
	if ok {
		return o, nil
	}
	return configured, nil
}

// Usage reports tenant's state under its effective limits: one script for
// leases and budget, then redis_rate (cost 0: a peek) for the rate.
func (r *RedisLimiter) Usage(ctx context.Context, tenant string, configured Limits) (Usage, error) {
	if err := validTenant(tenant); err != nil {
		return Usage{}, fmt.Errorf("reading usage: %w", err)
	}
	k := r.keys(tenant)
	c := configured
	res, err := usageScript.Run(ctx, r.client, []string{k.leases, k.resv, k.budget, k.override},
		c.RatePerMinute, c.Burst, c.Concurrency, c.DailyCPUSeconds, r.dayShiftMS.Load(),
	).Int64Slice()
	if err != nil {
		return Usage{}, unavailable(ctx, "reading usage", err)
	}
	if len(res) != 8 {
		return Usage{}, fmt.Errorf("reading usage: usage script returned %d values", len(res))
	}
	u := Usage{
		TenantID:    tenant,
		Rate:        RateUsage{LimitPerMinute: int(res[0]), Remaining: -1},
		Concurrency: ConcurrencyUsage{Limit: int(res[2]), Running: int(res[4])},
		Budget: BudgetUsage{
			LimitMS:    res[3] * 1000,
			UsedMS:     res[6],
			ReservedMS: res[5],
			ResetsAt:   time.UnixMilli(res[7]).UTC(),
		},
	}
	if rate, burst := int(res[0]), int(res[1]); rate > 0 {
		peek, err := r.rate.AllowN(ctx, k.rateBase, redis_rate.Limit{Rate: rate, Burst: burst, Period: time.Minute}, 0)
		if err != nil {
			return Usage{}, unavailable(ctx, "reading rate usage", err)
		}
		u.Rate.Remaining = peek.Remaining
		u.Rate.ResetAfterMS = max(peek.ResetAfter, 0).Milliseconds()
	}
	return u, nil
}

// Ping checks that Redis answers.
func (r *RedisLimiter) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return unavailable(ctx, "pinging redis", err)
	}
	return nil
}

// Stats returns the event counters.
func (r *RedisLimiter) Stats() Stats { return r.events.stats() }

// Close closes the client if Open created it.
func (r *RedisLimiter) Close() error {
	if !r.owned {
		return nil
	}
	if err := r.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("closing redis client: %w", err)
	}
	return nil
}
