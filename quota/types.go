// Package quota admits runs per tenant: request rate (GCRA), concurrent runs
// (expiring, heart-beaten leases) and a daily CPU-milliseconds budget
// (reserve at admission, settle after the run). Two backends share one
// behaviour: Redis (shared by all gateway replicas, see RedisLimiter for the
// key layout) and in-memory (the embedded default, one process).
//
// The life of a run:
//
//	a, err := l.Admit(ctx, AdmitRequest{TenantID, ExecutionID, Limits, CPUReserveMS})
//	// err: *ExceededError (429), ErrUnavailable (503), ErrInvalid (400)
//	// run the tool; watch a.Lost() and kill the run if it fires
//	a.Settle(ctx, measuredCPUms) // or a.Release(ctx) if the run never started
//
// Admit checks every dimension first and only then consumes (never a partial
// consumption); it is idempotent per execution id while the admission lives.
// An admin override of a tenant's Limits (SetOverride) replaces the
// configured Limits from the next Admit on. Setting or clearing an override
// also resets the tenant's request-rate (GCRA) state: a theoretical arrival
// time computed under the old emission interval may lie seconds or minutes
// ahead and would keep refusing under the new limits, so the next request
// starts from a full burst of the new limits. Running leases, reservations
// and the day's CPU budget are kept.
package quota

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limits is a tenant's quota object (DESIGN §13). Zero means unlimited for
// that dimension; the defaults come from config.
type Limits struct {
	// RatePerMinute is the sustained request rate (GCRA emission interval
	// 60s/RatePerMinute). 0: unlimited.
	RatePerMinute int `yaml:"rate_per_minute" json:"rate_per_minute"`
	// Burst is how many requests may arrive at once; >= 1 when
	// RatePerMinute > 0. 0: no burst (only with RatePerMinute 0).
	Burst int `yaml:"burst" json:"burst"`
	// Concurrency is the number of runs in flight at once. 0: unlimited.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// DailyCPUSeconds is the CPU time a tenant may use per UTC day. 0:
	// unlimited.
	DailyCPUSeconds int64 `yaml:"daily_cpu_seconds" json:"daily_cpu_seconds"`
	// MaxQueued bounds the tenant's runs waiting in the dispatch queue
	// (server.role gateway: dispatched to the executors, not yet started
	// by one), counted across every gateway; beyond it a run is refused
	// (KindQueued, 429) and nothing is queued. 0: unbounded (the queued
	// runs are still bounded by Concurrency, whose leases they hold). No
	// effect in role all, which has no queue between gateway and sandbox.
	MaxQueued int `yaml:"max_queued" json:"max_queued,omitempty"`
}

// Upper bounds that keep the arithmetic exact (Lua numbers are doubles) and
// catch typos such as a value in milliseconds where seconds were meant.
const (
	maxRatePerMinute   = 10_000_000
	maxBurst           = 1_000_000
	maxConcurrency     = 1_000_000
	maxDailyCPUSeconds = 1_000_000_000
	maxMaxQueued       = 1_000_000
)

// Validate rejects negative and nonsensical values; the message names the
// field.
func (l Limits) Validate() error {
	switch {
	case l.RatePerMinute < 0:
		return errors.New("rate_per_minute must be >= 0")
	case l.RatePerMinute > maxRatePerMinute:
		return fmt.Errorf("rate_per_minute must be <= %d", maxRatePerMinute)
	case l.Burst < 0:
		return errors.New("burst must be >= 0")
	case l.Burst > maxBurst:
		return fmt.Errorf("burst must be <= %d", maxBurst)
	case l.RatePerMinute > 0 && l.Burst < 1:
		return errors.New("burst must be >= 1 when rate_per_minute is set (a burst of 0 admits nothing)")
	case l.Concurrency < 0:
		return errors.New("concurrency must be >= 0")
	case l.Concurrency > maxConcurrency:
		return fmt.Errorf("concurrency must be <= %d", maxConcurrency)
	case l.DailyCPUSeconds < 0:
		return errors.New("daily_cpu_seconds must be >= 0")
	case l.DailyCPUSeconds > maxDailyCPUSeconds:
		return fmt.Errorf("daily_cpu_seconds must be <= %d", maxDailyCPUSeconds)
	case l.MaxQueued < 0:
		return errors.New("max_queued must be >= 0")
	case l.MaxQueued > maxMaxQueued:
		return fmt.Errorf("max_queued must be <= %d", maxMaxQueued)
	}
	return nil
}

// Kind names the quota dimension that refused a run.
type Kind string

// Quota dimensions.
const (
	KindRate        Kind = "rate"
	KindConcurrency Kind = "concurrency"
	KindBudget      Kind = "budget"
	// KindQueued: the tenant's runs waiting for an executor are at
	// max_queued (refused by the gateway's dispatcher, not by Admit).
	KindQueued Kind = "max_queued"
)

// ErrExceeded matches every *ExceededError with errors.Is.
var ErrExceeded = errors.New("quota exceeded")

// ExceededError is returned by Admit when a dimension refuses the run.
// KindBudget maps to 429 BudgetExhausted, the others to 429 QuotaExceeded.
// When several dimensions refuse, Kind is the one with the longest
// RetryAfter (retrying earlier cannot succeed).
type ExceededError struct {
	Kind       Kind
	RetryAfter time.Duration // when a retry can succeed (budget: until the reset)
	// Limit is the bound that refused (set for KindQueued).
	Limit int
	// UsedMS, ReservedMS and LimitMS are today's budget when KindBudget
	// refused: the CPU settled, the CPU reserved by runs in flight, the
	// daily limit. A run is refused only when nothing is left to reserve
	// (UsedMS >= LimitMS: spent; else runs in flight hold the rest).
	UsedMS, ReservedMS, LimitMS int64
}

// Spent reports whether a KindBudget refusal is the day's budget used up
// (rather than held by runs in flight, which give back what they do not use).
func (e *ExceededError) Spent() bool { return e.UsedMS >= e.LimitMS }

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded: %s (retry after %s)", e.Kind, e.RetryAfter)
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// ErrUnavailable means the backend could not answer and the limiter fails
// closed. Maps to 503 QuotaUnavailable.
var ErrUnavailable = errors.New("quota backend unavailable")

// ErrInvalid wraps every error caused by bad input (an invalid override, an
// empty tenant or execution id). Maps to 400 BadRequest; the message names
// the field.
var ErrInvalid = errors.New("invalid quota request")

// Rate fail modes (Config.RateFailMode).
const (
	FailClosed = "closed" // Redis down: 503 QuotaUnavailable
	FailLocal  = "local"  // Redis down: a per-process golang.org/x/time/rate limiter
)

// Config is the quota section of the config file.
type Config struct {
	// Backend is "memory" (default) or "redis".
	Backend string `yaml:"backend" json:"backend"`
	// RedisURL is a redis:// or rediss:// URL. Standalone by default; with
	// RedisCluster it is a cluster seed URL (more seeds as ?addr=h:p), with
	// MasterName (or ?master_name=) a Sentinel URL. May carry a password
	// (redacted by config print). Default none (needed by backend redis
	// unless RedisAddrs is set).
	RedisURL string `yaml:"redis_url" json:"redis_url"`
	// RedisAddrs is used when RedisURL is empty: Sentinel addresses with
	// MasterName, cluster seeds with RedisCluster or more than one address,
	// else one standalone server. Default none.
	RedisAddrs []string `yaml:"redis_addrs" json:"redis_addrs"`
	// MasterName selects Sentinel: the name of the monitored master.
	// Default none: not Sentinel.
	MasterName string `yaml:"master_name" json:"master_name"`
	// RedisCluster forces Redis Cluster mode even with one seed address.
	// Default false.
	RedisCluster bool `yaml:"redis_cluster" json:"redis_cluster"`
	// RedisPasswordFile holds the Redis (and Sentinel) password for
	// RedisAddrs; one trailing newline is trimmed. Empty: no password (or
	// the one in RedisURL).
	RedisPasswordFile string `yaml:"redis_password_file" json:"redis_password_file"`
	// TimeoutMS bounds each Redis dial, read and write, in milliseconds.
	// Default 500. Admission fails (per the fail modes) after it.
	TimeoutMS int64 `yaml:"timeout_ms" json:"timeout_ms"`
	// BulkTimeoutMS bounds each Redis read and write of a large value
	// (a stored result's envelope or artifact, an idempotent response), in
	// milliseconds: the whole value must arrive within it. Default 15000.
	BulkTimeoutMS int64 `yaml:"bulk_timeout_ms" json:"bulk_timeout_ms"`
	// KeyPrefix prefixes every key. Default "execgate".
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
	// RateFailMode is what the rate limiter does when Redis is down:
	// "closed" (default: 503 QuotaUnavailable) or "local" (a per-process
	// fallback limiter with the tenant's full rate). Concurrency and budget
	// always fail closed, so "local" only admits tenants whose concurrency
	// and budget are unlimited.
	RateFailMode string `yaml:"rate_fail_mode" json:"rate_fail_mode"`
	// LeaseTTLMS is the concurrency lease lifetime, renewed by heartbeat
	// every LeaseTTLMS/3 while a run lasts. A crashed gateway's leases and
	// budget reservations are reclaimed this long after its last
	// heartbeat. Default 15000; minimum 30.
	LeaseTTLMS int64 `yaml:"lease_ttl_ms" json:"lease_ttl_ms"`
	// Defaults apply to tenants whose config gives no quota.
	Defaults Limits `yaml:"defaults" json:"defaults"`
}

// Config defaults (zero values in Config mean these).
const (
	DefaultKeyPrefix     = "execgate"
	DefaultLeaseTTLMS    = 15000
	DefaultTimeoutMS     = 500
	DefaultBulkTimeoutMS = 15000
	minLeaseTTLMS        = 30
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Backend == "" {
		c.Backend = "memory"
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.RateFailMode == "" {
		c.RateFailMode = FailClosed
	}
	if c.LeaseTTLMS == 0 {
		c.LeaseTTLMS = DefaultLeaseTTLMS
	}
	if c.TimeoutMS == 0 {
		c.TimeoutMS = DefaultTimeoutMS
	}
	if c.BulkTimeoutMS == 0 {
		c.BulkTimeoutMS = DefaultBulkTimeoutMS
	}
	return c
}

// Validate checks c (after WithDefaults) and names the bad key.
func (c Config) Validate() error {
	var errs []error
	switch c.Backend {
	case "memory", "":
	case "redis":
		if c.RedisURL == "" && len(c.RedisAddrs) == 0 {
			errs = append(errs, errors.New("quota.redis_url: required when quota.backend is redis"))
		}
	default:
		errs = append(errs, fmt.Errorf("quota.backend: %q is not memory or redis", c.Backend))
	}
	switch c.RateFailMode {
	case FailClosed, FailLocal, "":
	default:
		errs = append(errs, fmt.Errorf("quota.rate_fail_mode: %q is not closed or local", c.RateFailMode))
	}
	if c.LeaseTTLMS != 0 && c.LeaseTTLMS < minLeaseTTLMS {
		errs = append(errs, fmt.Errorf("quota.lease_ttl_ms: %d is below the minimum %d", c.LeaseTTLMS, minLeaseTTLMS))
	}
	if c.TimeoutMS < 0 {
		errs = append(errs, errors.New("quota.timeout_ms: must be >= 0"))
	}
	if c.BulkTimeoutMS < 0 {
		errs = append(errs, errors.New("quota.bulk_timeout_ms: must be >= 0"))
	}
	if err := c.Defaults.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("quota.defaults: %w", err))
	}
	return errors.Join(errs...)
}

// AdmitRequest asks to admit one run.
type AdmitRequest struct {
	TenantID string
	// ExecutionID is the idempotency key: admitting the same id again while
	// its admission lives returns it again without consuming anything.
	ExecutionID string
	// Limits are the tenant's configured limits; an admin override, if set,
	// replaces them.
	Limits Limits
	// CPUReserveMS is reserved from the daily budget until Settle: the
	// policy decision's cpu_ms limit (an upper bound of the run's usage).
	// When less of today's budget is left, only what is left is reserved
	// (Admission.ReservedMS) and the run's cpu_ms must be cut to it; the
	// run is refused only when nothing is left.
	CPUReserveMS int64
}

func (r AdmitRequest) validate() error {
	if err := validTenant(r.TenantID); err != nil {
		return err
	}
	switch {
	case r.ExecutionID == "":
		return fmt.Errorf("%w: execution_id must not be empty", ErrInvalid)
	case len(r.ExecutionID) > 256:
		return fmt.Errorf("%w: execution_id is longer than 256 bytes", ErrInvalid)
	case r.CPUReserveMS < 0:
		return fmt.Errorf("%w: cpu reservation must be >= 0 ms", ErrInvalid)
	}
	if err := r.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: limits: %w", ErrInvalid, err)
	}
	return nil
}

// validTenant rejects ids that would break the per-tenant hash tag.
func validTenant(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: tenant_id must not be empty", ErrInvalid)
	case len(id) > 256:
		return fmt.Errorf("%w: tenant_id is longer than 256 bytes", ErrInvalid)
	}
	for _, c := range id {
		if c == '{' || c == '}' || c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: tenant_id %q contains %q", ErrInvalid, id, c)
		}
	}
	return nil
}

// Usage is the admin usage report (GET /v1/admin/tenants/{id}/usage). The
// limits in it are the effective ones (override if set).
type Usage struct {
	TenantID    string           `json:"tenant_id"`
	Rate        RateUsage        `json:"rate"`
	Concurrency ConcurrencyUsage `json:"concurrency"`
	Budget      BudgetUsage      `json:"budget"`
}

// RateUsage reports the GCRA state. With LimitPerMinute 0 (unlimited)
// Remaining is -1.
type RateUsage struct {
	LimitPerMinute int `json:"limit_per_minute"`
	// Remaining is how many requests could be admitted right now.
	Remaining int `json:"remaining"`
	// ResetAfterMS is the time until the full burst is available again.
	ResetAfterMS int64 `json:"reset_after_ms"`
}

// ConcurrencyUsage reports live leases. Limit 0 is unlimited.
type ConcurrencyUsage struct {
	Limit   int `json:"limit"`
	Running int `json:"running"`
}

// BudgetUsage reports today's (UTC) CPU budget. LimitMS 0 is unlimited.
type BudgetUsage struct {
	LimitMS    int64     `json:"limit_ms"`
	UsedMS     int64     `json:"used_ms"`
	ReservedMS int64     `json:"reserved_ms"`
	ResetsAt   time.Time `json:"resets_at"`
}

// Limiter is what both backends offer; the gateway declares the subset it
// uses. RedisLimiter and MemoryLimiter implement it.
type Limiter interface {
	Admit(ctx context.Context, req AdmitRequest) (*Admission, error)
	Override(ctx context.Context, tenant string) (Limits, bool, error)
	// SetOverride and ClearOverride take effect on the next Admit and reset
	// the tenant's rate state (a full burst under the new limits); leases
	// and the CPU budget are kept.
	SetOverride(ctx context.Context, tenant string, l Limits) error
	ClearOverride(ctx context.Context, tenant string) error
	Effective(ctx context.Context, tenant string, configured Limits) (Limits, error)
	Usage(ctx context.Context, tenant string, configured Limits) (Usage, error)
	Ping(ctx context.Context) error
	Stats() Stats
	Close() error
}

// Observer receives the events an operator must see: fail-closed and
// fail-open decisions when the backend is down and leases lost while a run
// lasted. The telemetry package implements it (counters); calls must be
// cheap and must not block.
type Observer interface {
	QuotaEvent(tenant string, kind Kind, outcome string)
}

// Observer outcomes.
const (
	// OutcomeFailClosed: the backend was down and a limited dimension
	// refused the run (ErrUnavailable).
	OutcomeFailClosed = "fail_closed"
	// OutcomeFailOpen: the backend was down and the local rate fallback
	// decided instead (RateFailMode "local").
	OutcomeFailOpen = "fail_open"
	// OutcomeLeaseLost: a heartbeat found the run's lease gone.
	OutcomeLeaseLost = "lease_lost"
)

// Stats are a limiter's event counters since it was created.
type Stats struct {
	FailClosed uint64 `json:"fail_closed"`
	FailOpen   uint64 `json:"fail_open"`
	LeasesLost uint64 `json:"leases_lost"`
}

// Option configures a limiter.
type Option func(*options)

type options struct {
	now      func() time.Time
	observer Observer
}

// WithClock makes the memory backend read time from now (tests). The Redis
// backend always uses the server's TIME.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// WithObserver sends events to obs.
func WithObserver(obs Observer) Option {
	return func(o *options) { o.observer = obs }
}

func buildOptions(opts []Option) options {
	o := options{now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	return o
}
