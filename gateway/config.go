// Package gateway is the HTTP API (Gin): routes, JWT middleware, request and
// response types, OpenAPI, admin API and the one place errors become HTTP.
package gateway

import (
	"errors"
	"fmt"
	"runtime"
)

// Config is the server section of the config file. Zero means default.
type Config struct {
	// MaxBodyBytes caps the request body. Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxSourceBytes caps the tool source. Default 256 KiB.
	MaxSourceBytes int `yaml:"max_source_bytes" json:"max_source_bytes"`
	// MaxArgsBytes caps the encoded args. Default 256 KiB.
	MaxArgsBytes int `yaml:"max_args_bytes" json:"max_args_bytes"`
	// MaxConcurrentRuns is the local run slots; MaxQueue waiting requests
	// beyond them get 503 Overloaded. Defaults: 2×CPUs and 64; a negative
	// MaxQueue means no waiting room (0 waiting).
	MaxConcurrentRuns int `yaml:"max_concurrent_runs" json:"max_concurrent_runs"`
	MaxQueue          int `yaml:"max_queue" json:"max_queue"`
	// TenantMaxRuns is how many of the MaxConcurrentRuns slots one tenant
	// may hold at once, so a tenant busy with long runs always leaves slots
	// to the others (runs are never preempted). Default 3/4 of the slots,
	// rounded down, at least 1; MaxConcurrentRuns turns the cap off. Free
	// slots go to the waiting tenants in turn (round robin).
	TenantMaxRuns int `yaml:"tenant_max_runs" json:"tenant_max_runs"`
	// TenantMaxQueue is how many of the MaxQueue waiting places one tenant
	// may fill; beyond it that tenant gets 503 Overloaded while others still
	// queue. Default half of MaxQueue, rounded up; negative means no waiting room for a
	// tenant at all; MaxQueue turns the bound off.
	TenantMaxQueue int `yaml:"tenant_max_queue" json:"tenant_max_queue"`
	// IdempotencyWindowSeconds: a repeated execution_id from the same tenant
	// within this window returns the first result. Default 600.
	IdempotencyWindowSeconds int `yaml:"idempotency_window_seconds" json:"idempotency_window_seconds"`
	// ShutdownGraceSeconds drains in-flight runs on shutdown. Default 30.
	ShutdownGraceSeconds int `yaml:"shutdown_grace_seconds" json:"shutdown_grace_seconds"`
	// ReadyCacheSeconds caches the readiness probe's real jailed run. Default 10.
	ReadyCacheSeconds int `yaml:"ready_cache_seconds" json:"ready_cache_seconds"`
}

// Default values for Config (zero fields).
const (
	DefaultMaxBodyBytes             = 1 << 20
	DefaultMaxSourceBytes           = 256 << 10
	DefaultMaxArgsBytes             = 256 << 10
	DefaultMaxQueue                 = 64
	DefaultIdempotencyWindowSeconds = 600
	DefaultShutdownGraceSeconds     = 30
	DefaultReadyCacheSeconds        = 10
)

// WithDefaults returns c with every zero field set to its default.
// MaxConcurrentRuns defaults to 2×CPUs. A negative MaxQueue means no waiting
// room at all (0 waiting); zero means the default. TenantMaxRuns and
// TenantMaxQueue default to 3/4 of the slots (at least 1) and half the queue.
func (c Config) WithDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxSourceBytes == 0 {
		c.MaxSourceBytes = DefaultMaxSourceBytes
	}
	if c.MaxArgsBytes == 0 {
		c.MaxArgsBytes = DefaultMaxArgsBytes
	}
	if c.MaxConcurrentRuns == 0 {
		c.MaxConcurrentRuns = 2 * runtime.NumCPU()
	}
	switch {
	case c.MaxQueue == 0:
		c.MaxQueue = DefaultMaxQueue
	case c.MaxQueue < 0:
		c.MaxQueue = 0
	}
	if c.TenantMaxRuns == 0 {
		c.TenantMaxRuns = max(1, c.MaxConcurrentRuns*3/4)
	}
	switch {
	case c.TenantMaxQueue == 0:
		c.TenantMaxQueue = (c.MaxQueue + 1) / 2
	case c.TenantMaxQueue < 0:
		c.TenantMaxQueue = 0
	}
	if c.IdempotencyWindowSeconds == 0 {
		c.IdempotencyWindowSeconds = DefaultIdempotencyWindowSeconds
	}
	if c.ShutdownGraceSeconds == 0 {
		c.ShutdownGraceSeconds = DefaultShutdownGraceSeconds
	}
	if c.ReadyCacheSeconds == 0 {
		c.ReadyCacheSeconds = DefaultReadyCacheSeconds
	}
	return c
}

// Validate rejects values that cannot work (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("server.max_body_bytes: %d is below 1024", c.MaxBodyBytes))
	}
	if c.MaxSourceBytes < 1 || int64(c.MaxSourceBytes) > c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("server.max_source_bytes: %d must be between 1 and max_body_bytes", c.MaxSourceBytes))
	}
	if c.MaxArgsBytes < 1 || int64(c.MaxArgsBytes) > c.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("server.max_args_bytes: %d must be between 1 and max_body_bytes", c.MaxArgsBytes))
	}
	if c.MaxConcurrentRuns < 1 {
		errs = append(errs, fmt.Errorf("server.max_concurrent_runs: %d must be >= 1", c.MaxConcurrentRuns))
	}
	if c.TenantMaxRuns < 1 || c.TenantMaxRuns > c.MaxConcurrentRuns {
		errs = append(errs, fmt.Errorf("server.tenant_max_runs: %d must be between 1 and max_concurrent_runs (%d)", c.TenantMaxRuns, c.MaxConcurrentRuns))
	}
	if c.TenantMaxQueue > c.MaxQueue {
		errs = append(errs, fmt.Errorf("server.tenant_max_queue: %d is more than max_queue (%d)", c.TenantMaxQueue, c.MaxQueue))
	}
	if c.IdempotencyWindowSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.idempotency_window_seconds: %d must be >= 0", c.IdempotencyWindowSeconds))
	}
	if c.ShutdownGraceSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.shutdown_grace_seconds: %d must be >= 0", c.ShutdownGraceSeconds))
	}
	if c.ReadyCacheSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.ready_cache_seconds: %d must be >= 0", c.ReadyCacheSeconds))
	}
	return errors.Join(errs...)
}
