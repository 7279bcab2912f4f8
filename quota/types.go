// Package quota admits runs per tenant: request rate (GCRA), concurrent runs
// (expiring, heart-beaten leases) and a daily CPU-milliseconds budget
// (reserve at admission, settle after the run). Two backends share one
// behaviour: Redis (shared by all gateway replicas) and in-memory (the
// embedded default, one process).
package quota

import (
	"errors"
	"fmt"
	"time"
)

// Limits is a tenant's quota object (DESIGN §13). Zero means unlimited for
// that dimension only where documented; the defaults come from config.
type Limits struct {
	RatePerMinute   int   `yaml:"rate_per_minute" json:"rate_per_minute"`
	Burst           int   `yaml:"burst" json:"burst"`
	Concurrency     int   `yaml:"concurrency" json:"concurrency"`
	DailyCPUSeconds int64 `yaml:"daily_cpu_seconds" json:"daily_cpu_seconds"`
}

// Validate rejects negative and nonsensical values.
func (l Limits) Validate() error {
	switch {
	case l.RatePerMinute < 0:
		return errors.New("rate_per_minute must be >= 0")
	case l.Burst < 0:
		return errors.New("burst must be >= 0")
	case l.Concurrency < 0:
		return errors.New("concurrency must be >= 0")
	case l.DailyCPUSeconds < 0:
		return errors.New("daily_cpu_seconds must be >= 0")
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
)

// ExceededError is returned by Admit when a dimension refuses the run.
// KindBudget maps to 429 BudgetExhausted, the others to 429 QuotaExceeded.
type ExceededError struct {
	Kind       Kind
	RetryAfter time.Duration // when a retry can succeed (budget: until the reset)
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("quota exceeded: %s (retry after %s)", e.Kind, e.RetryAfter)
}

// ErrUnavailable means the backend could not answer and the limiter fails
// closed. Maps to 503 QuotaUnavailable.
var ErrUnavailable = errors.New("quota backend unavailable")

// Config is the quota section of the config file.
type Config struct {
	// Backend is "memory" (default) or "redis".
	Backend string `yaml:"backend" json:"backend"`
	// RedisURL is a redis:// or rediss:// URL (standalone). For Sentinel or
	// Cluster use RedisAddrs with MasterName.
	RedisURL   string   `yaml:"redis_url" json:"redis_url"`
	RedisAddrs []string `yaml:"redis_addrs" json:"redis_addrs"`
	MasterName string   `yaml:"master_name" json:"master_name"`
	// KeyPrefix prefixes every key. Default "execgate".
	KeyPrefix string `yaml:"key_prefix" json:"key_prefix"`
	// RateFailMode is what the rate limiter does when Redis is down:
	// "closed" (default: 503 QuotaUnavailable) or "local" (a per-process
	// fallback limiter). Concurrency and budget always fail closed.
	RateFailMode string `yaml:"rate_fail_mode" json:"rate_fail_mode"`
	// LeaseTTLMS is the concurrency lease lifetime, renewed by heartbeat
	// while a run lasts. Default 15000.
	LeaseTTLMS int64 `yaml:"lease_ttl_ms" json:"lease_ttl_ms"`
	// Defaults apply to tenants whose config gives no quota.
	Defaults Limits `yaml:"defaults" json:"defaults"`
}
