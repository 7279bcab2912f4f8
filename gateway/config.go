// Package gateway is the HTTP API (Gin): routes, JWT middleware, request and
// response types, OpenAPI, admin API and the one place errors become HTTP.
package gateway

// Config is the server section of the config file. Zero means default.
type Config struct {
	// MaxBodyBytes caps the request body. Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxSourceBytes caps the tool source. Default 256 KiB.
	MaxSourceBytes int `yaml:"max_source_bytes" json:"max_source_bytes"`
	// MaxArgsBytes caps the encoded args. Default 256 KiB.
	MaxArgsBytes int `yaml:"max_args_bytes" json:"max_args_bytes"`
	// MaxConcurrentRuns is the local run slots; MaxQueue waiting requests
	// beyond them get 503 Overloaded. Defaults: 2×CPUs and 64.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs" json:"max_concurrent_runs"`
	MaxQueue          int `yaml:"max_queue" json:"max_queue"`
	// IdempotencyWindowSeconds: a repeated execution_id from the same tenant
	// within this window returns the first result. Default 600.
	IdempotencyWindowSeconds int `yaml:"idempotency_window_seconds" json:"idempotency_window_seconds"`
	// ShutdownGraceSeconds drains in-flight runs on shutdown. Default 30.
	ShutdownGraceSeconds int `yaml:"shutdown_grace_seconds" json:"shutdown_grace_seconds"`
	// ReadyCacheSeconds caches the readiness probe's real jailed run. Default 10.
	ReadyCacheSeconds int `yaml:"ready_cache_seconds" json:"ready_cache_seconds"`
}
