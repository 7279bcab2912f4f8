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
	// MaxOutputMemoryMB bounds, in MiB, the memory the output of all runs
	// in flight may take in this process (stdout, stderr, result, response
	// body): each run reserves 6 × its output_bytes + 4 MiB before it starts
	// and gives it back once its response is written; a run that finds no
	// room waits, at most its own timeout_ms, then gets 503 Overloaded.
	// Default: max_concurrent_runs × the reservation of a run at the
	// platform's largest cap (16 MiB output: 100 MiB), at most 1024.
	MaxOutputMemoryMB int64 `yaml:"max_output_memory_mb" json:"max_output_memory_mb"`
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

// DefaultMaxOutputMemoryMBCeiling caps the derived default of
// MaxOutputMemoryMB.
const DefaultMaxOutputMemoryMBCeiling = 1024

// WithDefaults returns c with every zero field set to its default.
// MaxConcurrentRuns defaults to 2×CPUs. A negative MaxQueue means no waiting
// room at all (0 waiting); zero means the default.
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
	if c.MaxOutputMemoryMB == 0 {
		c.MaxOutputMemoryMB = min(int64(c.MaxConcurrentRuns)*outputReservation(platformMaxOutput)>>20, DefaultMaxOutputMemoryMBCeiling)
	}
	switch {
	case c.MaxQueue == 0:
		c.MaxQueue = DefaultMaxQueue
	case c.MaxQueue < 0:
		c.MaxQueue = 0
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
	if c.MaxOutputMemoryMB < 1 {
		errs = append(errs, fmt.Errorf("server.max_output_memory_mb: %d must be >= 1", c.MaxOutputMemoryMB))
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
