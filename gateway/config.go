// Package gateway is the HTTP edge (Gin): routes, JWT authentication, the
// access table, the connection caps and refusal limits, reading bodies
// under their caps and deadlines, OpenAPI, the admin API, and the one
// place errors become HTTP. Behind the edge it hands each route to its
// domain: bodies to package decode, runs to the execute flow (package
// execution) and its async runs (execution/async), POST /mcp to the MCP
// server (package mcpserver), the code-mode stubs of GET /v1/tools to
// toolbridge/stubs.
package gateway

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/webhook"
)

// Config is the server section of the config file. Zero means default.
type Config struct {
	// Role is what this process does (issue #15): "all" (default) decides
	// and runs in-process; "gateway" decides and hands runs to executors
	// over dispatch.* (no nsjail, no privileges); "executor" only runs
	// what gateways decided (no JWT keys, policies or tenants).
	Role string `yaml:"role" json:"role"`
	// MaxBodyBytes caps the request body. Default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxSourceBytes caps the tool source. Default 256 KiB.
	MaxSourceBytes int `yaml:"max_source_bytes" json:"max_source_bytes"`
	// MaxArgsBytes caps the encoded args. Default 256 KiB.
	MaxArgsBytes int `yaml:"max_args_bytes" json:"max_args_bytes"`
	// MaxConcurrentRuns is the local run slots: runs of this process at
	// once. Default 2×CPUs.
	MaxConcurrentRuns int `yaml:"max_concurrent_runs" json:"max_concurrent_runs"`
	// MaxQueue is how many requests may wait for a run slot; beyond it they
	// get 503 Overloaded. Default 64; a negative MaxQueue means no waiting
	// room (0 waiting).
	MaxQueue int `yaml:"max_queue" json:"max_queue"`
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
	// MaxOutputMemoryMB bounds, in MiB, the memory the output of all runs
	// in flight may take in this process (stdout, stderr, result, response
	// body, artifacts): each run reserves 6 × its output_bytes + 4 MiB, and
	// 2 × its artifacts_bytes + 4 × min(output_bytes, artifacts_bytes) for
	// its artifacts, before it starts and gives it back once its response
	// is written; a run that finds no room waits, at most its own
	// timeout_ms, then gets 503 Overloaded. Default: max_concurrent_runs ×
	// the reservation of a run at the platform's largest caps (16 MiB
	// output, 64 MiB artifacts: 292 MiB), at most 1024.
	MaxOutputMemoryMB int64 `yaml:"max_output_memory_mb" json:"max_output_memory_mb"`
	// IdempotencyWindowSeconds: a repeated execution_id from the same tenant
	// within this window returns the first result. Default 600.
	IdempotencyWindowSeconds int `yaml:"idempotency_window_seconds" json:"idempotency_window_seconds"`
	// IdempotencyMaxClaims is how many execution_id claims one tenant may
	// hold within the window (never evicted; beyond it the tenant's new ids
	// get 429 QuotaExceeded). Default 50000.
	IdempotencyMaxClaims int `yaml:"idempotency_max_claims" json:"idempotency_max_claims"`
	// IdempotencyTenantResponseBytes is each tenant's budget of stored
	// responses, in bytes; the tenant's oldest go first (a repeat then gets
	// 409 ResultExpired, never a second run). Default 16 MiB.
	IdempotencyTenantResponseBytes int64 `yaml:"idempotency_tenant_response_bytes" json:"idempotency_tenant_response_bytes"`
	// AsyncResultTTLSeconds is how long the result of an async execution
	// (POST /v1/executions) is kept for GET. Default 3600.
	AsyncResultTTLSeconds int `yaml:"async_result_ttl_seconds" json:"async_result_ttl_seconds"`
	// AsyncMaxActive is how many async executions one tenant may have
	// queued or running; beyond it POST /v1/executions is 429
	// QuotaExceeded. Default 64.
	AsyncMaxActive int `yaml:"async_max_active" json:"async_max_active"`
	// AsyncMaxResults is how many finished async executions one tenant
	// keeps; beyond it its oldest are forgotten (GET is 404). Default 10000.
	AsyncMaxResults int `yaml:"async_max_results" json:"async_max_results"`
	// AsyncTenantResultBytes is each tenant's budget of kept async
	// results, in bytes; the oldest are dropped first (GET is then 409
	// ResultExpired). Default 64 MiB.
	AsyncTenantResultBytes int64 `yaml:"async_tenant_result_bytes" json:"async_tenant_result_bytes"`
	// AsyncTenantArtifactBytes is each tenant's budget of kept artifacts
	// (the files runs leave in /workspace/out, sync and async alike, for
	// GET /v1/executions/{id}/artifacts/{name}), in bytes; kept for
	// async_result_ttl_seconds, the oldest dropped first (GET is then
	// 404). Default 256 MiB.
	AsyncTenantArtifactBytes int64 `yaml:"async_tenant_artifact_bytes" json:"async_tenant_artifact_bytes"`
	// AsyncMaxArtifacts is how many artifacts one tenant keeps; beyond it
	// its oldest are dropped. Default 10000.
	AsyncMaxArtifacts int `yaml:"async_max_artifacts" json:"async_max_artifacts"`
	// ArtifactsInlineBytes is the largest artifact whose bytes the
	// envelope carries too (base64, as long as the inlined bytes stay
	// within the run's output_bytes); every artifact is listed and can be
	// fetched whatever its size. Default 65536; -1 inlines none.
	ArtifactsInlineBytes int64 `yaml:"artifacts_inline_bytes" json:"artifacts_inline_bytes"`
	// TenantMaxResultReaders is how many requests of one tenant may be
	// reading stored async results at once on this gateway (GET
	// /v1/executions/{id}, and …/events of a finished execution); beyond it
	// a read is 429 QuotaExceeded naming this key. Readers of one result
	// share one copy of it, and each must take its response as fast as an
	// execute response (within 10 s plus 1 s per MiB) or is cut off.
	// Default 16.
	TenantMaxResultReaders int `yaml:"tenant_max_result_readers" json:"tenant_max_result_readers"`
	// TenantMaxLiveReaders is how many GET /v1/executions/{id}/events
	// streams of one tenant may follow runs that are not finished, at once
	// on this gateway; beyond it a stream is 429 QuotaExceeded naming this
	// key. Each stream shares the run's encoded events (no copy per
	// reader); one that does not take a write within 10 s (plus 1 s per
	// MiB) is closed. Default 64.
	TenantMaxLiveReaders int `yaml:"tenant_max_live_readers" json:"tenant_max_live_readers"`
	// WebhookMaxAttempts bounds the delivery attempts of one callback
	// (POST /v1/executions callback_url). Default 5.
	WebhookMaxAttempts int `yaml:"webhook_max_attempts" json:"webhook_max_attempts"`
	// WebhookBackoffMS is the wait before a callback's second attempt, in
	// ms, doubled before each next one (up to 20% jitter, at most 5 min).
	// Default 1000.
	WebhookBackoffMS int64 `yaml:"webhook_backoff_ms" json:"webhook_backoff_ms"`
	// WebhookTimeoutMS bounds one delivery attempt, in ms. Default 10000.
	WebhookTimeoutMS int64 `yaml:"webhook_timeout_ms" json:"webhook_timeout_ms"`
	// ShutdownGraceSeconds drains in-flight runs on shutdown. Default 30.
	ShutdownGraceSeconds int `yaml:"shutdown_grace_seconds" json:"shutdown_grace_seconds"`
	// ReadyCacheSeconds caches the readiness probe's real jailed run. Default 10.
	ReadyCacheSeconds int `yaml:"ready_cache_seconds" json:"ready_cache_seconds"`
	// MaxJSONDepth is how deep objects and arrays may nest in a request
	// body, the body itself being level 1; deeper is 400 BadRequest naming
	// the path. Default 64; at most 256 (the harness's Python JSON parser
	// recurses per level).
	MaxJSONDepth int `yaml:"max_json_depth" json:"max_json_depth"`

	// The request edge (edge.go). Zero means the default.

	// ReadHeaderTimeoutSeconds: the request header must arrive within it.
	// Default 10.
	ReadHeaderTimeoutSeconds int `yaml:"read_header_timeout_seconds" json:"read_header_timeout_seconds"`
	// ReadBodyTimeoutSeconds: the whole body must arrive within it of the
	// header (a minimum average rate of max_body_bytes per this many
	// seconds for a full-size body); else the connection is closed.
	// Default 30.
	ReadBodyTimeoutSeconds int `yaml:"read_body_timeout_seconds" json:"read_body_timeout_seconds"`
	// WriteTimeoutSeconds bounds a whole exchange from the end of the
	// header to the last byte of the response. It must exceed the longest
	// legitimate sync run: queue wait + requirements install
	// (sandbox.deps_timeout_ms, 120 s) + the platform's maximum timeout_ms
	// (60 s) + kill grace. Default 300.
	WriteTimeoutSeconds int `yaml:"write_timeout_seconds" json:"write_timeout_seconds"`
	// IdleTimeoutSeconds closes keep-alive connections idle this long.
	// Default 120.
	IdleTimeoutSeconds int `yaml:"idle_timeout_seconds" json:"idle_timeout_seconds"`
	// MaxHeaderBytes caps the request line and header (net/http allows
	// 4 KiB of slack on top); over it is 431 with error.type
	// PayloadTooLarge. Default 64 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes" json:"max_header_bytes"`
	// MaxUnauthenticatedConns caps the connections that have not yet
	// presented a valid token; a new one beyond it closes the oldest of
	// them. Default 256.
	MaxUnauthenticatedConns int `yaml:"max_unauthenticated_conns" json:"max_unauthenticated_conns"`
	// MaxConnsPerSubject caps the connections one subject (a token's
	// tenant_id and sub) holds once authenticated; a connection beyond it
	// closes that subject's oldest idle one, and a request that finds all
	// of them busy is 429 QuotaExceeded with its connection closed.
	// Default 128.
	MaxConnsPerSubject int `yaml:"max_conns_per_subject" json:"max_conns_per_subject"`
	// ConnFDReserve is how many file descriptors of RLIMIT_NOFILE client
	// connections may never take: they stay for jails, files, Redis, MCP
	// servers and the next tenant's or the probe's connection. A
	// connection accepted with only the reserve left closes the oldest
	// idle connection of the subject holding the most. Default a fifth of
	// the limit, at least 256 and at most half of it.
	ConnFDReserve int `yaml:"conn_fd_reserve" json:"conn_fd_reserve"`
	// RefusalsPerMinute is the rate of each subject's token bucket of
	// refused (4xx) requests, and each client address's for tokens that do
	// not verify (refusals.go): past it the subject's requests are 429
	// QuotaExceeded before any other check, with one audit record per 10 s
	// standing for them. Default 600; a negative value turns the limit off.
	RefusalsPerMinute int `yaml:"refusals_per_minute" json:"refusals_per_minute"`
	// RefusalsBurst is the size of that bucket: refusals a subject may
	// have at once before the rate applies. Default 300.
	RefusalsBurst int `yaml:"refusals_burst" json:"refusals_burst"`
}

// Roles of a process (server.role).
const (
	RoleAll      = "all"
	RoleGateway  = "gateway"
	RoleExecutor = "executor"
)

// Default values for Config (zero fields).
const (
	DefaultMaxBodyBytes             = 1 << 20
	DefaultMaxSourceBytes           = 256 << 10
	DefaultMaxArgsBytes             = 256 << 10
	DefaultMaxQueue                 = 64
	DefaultIdempotencyWindowSeconds = 600
	DefaultShutdownGraceSeconds     = 30
	DefaultReadyCacheSeconds        = 10
	DefaultMaxJSONDepth             = decode.DefaultMaxDepth
	DefaultReadHeaderTimeoutSeconds = 10
	DefaultReadBodyTimeoutSeconds   = 30
	DefaultWriteTimeoutSeconds      = 300
	DefaultIdleTimeoutSeconds       = 120
	DefaultMaxHeaderBytes           = 64 << 10
	DefaultMaxUnauthenticatedConns  = 256
	DefaultMaxConnsPerSubject       = 128
	DefaultRefusalsPerMinute        = 600
	DefaultRefusalsBurst            = 300
	minConnFDReserve                = 256
	DefaultTenantMaxResultReaders   = 16
	DefaultTenantMaxLiveReaders     = 64
	maxMaxJSONDepth                 = 256
)

// DefaultMaxOutputMemoryMBCeiling caps the derived default of
// MaxOutputMemoryMB.
const DefaultMaxOutputMemoryMBCeiling = 1024

// WithDefaults returns c with every zero field set to its default.
// MaxConcurrentRuns defaults to 2×CPUs, ConnFDReserve to its share of this
// process's RLIMIT_NOFILE (left zero when the limit is unknown). A negative MaxQueue means no waiting
// room at all (0 waiting); zero means the default. TenantMaxRuns and
// TenantMaxQueue default to 3/4 of the slots (at least 1) and half the queue.
func (c Config) WithDefaults() Config {
	if c.Role == "" {
		c.Role = RoleAll
	}
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
		c.MaxOutputMemoryMB = min(execution.OutputMemoryFor(c.MaxConcurrentRuns)>>20, DefaultMaxOutputMemoryMBCeiling)
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
	if c.IdempotencyMaxClaims == 0 {
		c.IdempotencyMaxClaims = execution.DefaultIdempotencyMaxClaims
	}
	if c.IdempotencyTenantResponseBytes == 0 {
		c.IdempotencyTenantResponseBytes = execution.DefaultIdempotencyResponseBytes
	}
	if c.AsyncResultTTLSeconds == 0 {
		c.AsyncResultTTLSeconds = int(async.DefaultResultTTL / time.Second)
	}
	if c.AsyncMaxActive == 0 {
		c.AsyncMaxActive = async.DefaultMaxActive
	}
	if c.AsyncMaxResults == 0 {
		c.AsyncMaxResults = async.DefaultMaxResults
	}
	if c.AsyncTenantResultBytes == 0 {
		c.AsyncTenantResultBytes = async.DefaultTenantResultBytes
	}
	if c.AsyncTenantArtifactBytes == 0 {
		c.AsyncTenantArtifactBytes = async.DefaultTenantArtifactBytes
	}
	if c.AsyncMaxArtifacts == 0 {
		c.AsyncMaxArtifacts = async.DefaultMaxArtifacts
	}
	if c.ArtifactsInlineBytes == 0 {
		c.ArtifactsInlineBytes = execution.DefaultArtifactsInlineBytes
	}
	if c.WebhookMaxAttempts == 0 {
		c.WebhookMaxAttempts = 5
	}
	if c.WebhookBackoffMS == 0 {
		c.WebhookBackoffMS = 1000
	}
	if c.WebhookTimeoutMS == 0 {
		c.WebhookTimeoutMS = 10000
	}
	if c.ShutdownGraceSeconds == 0 {
		c.ShutdownGraceSeconds = DefaultShutdownGraceSeconds
	}
	if c.ReadyCacheSeconds == 0 {
		c.ReadyCacheSeconds = DefaultReadyCacheSeconds
	}
	if c.MaxJSONDepth == 0 {
		c.MaxJSONDepth = DefaultMaxJSONDepth
	}
	if c.ConnFDReserve == 0 {
		if lim := fdLimit(); lim > 0 {
			c.ConnFDReserve = defaultConnFDReserve(lim)
		}
	}
	for _, d := range []struct {
		v   *int
		def int
	}{
		{&c.ReadHeaderTimeoutSeconds, DefaultReadHeaderTimeoutSeconds},
		{&c.ReadBodyTimeoutSeconds, DefaultReadBodyTimeoutSeconds},
		{&c.WriteTimeoutSeconds, DefaultWriteTimeoutSeconds},
		{&c.IdleTimeoutSeconds, DefaultIdleTimeoutSeconds},
		{&c.MaxHeaderBytes, DefaultMaxHeaderBytes},
		{&c.MaxUnauthenticatedConns, DefaultMaxUnauthenticatedConns},
		{&c.MaxConnsPerSubject, DefaultMaxConnsPerSubject},
		{&c.RefusalsPerMinute, DefaultRefusalsPerMinute},
		{&c.RefusalsBurst, DefaultRefusalsBurst},
		{&c.TenantMaxResultReaders, DefaultTenantMaxResultReaders},
		{&c.TenantMaxLiveReaders, DefaultTenantMaxLiveReaders},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return c
}

// IdempotencyLimits are the per-tenant bounds of the idempotency store.
func (c Config) IdempotencyLimits() execution.IdempotencyLimits {
	return execution.IdempotencyLimits{MaxClaims: c.IdempotencyMaxClaims, TenantResponseBytes: c.IdempotencyTenantResponseBytes}
}

// AsyncLimits are the per-tenant bounds of the async execution store
// (after WithDefaults).
func (c Config) AsyncLimits() async.Limits {
	return async.Limits{MaxActive: c.AsyncMaxActive, MaxResults: c.AsyncMaxResults, TenantResultBytes: c.AsyncTenantResultBytes,
		ResultTTL:           time.Duration(c.AsyncResultTTLSeconds) * time.Second,
		TenantArtifactBytes: c.AsyncTenantArtifactBytes, MaxArtifacts: c.AsyncMaxArtifacts}
}

// WebhookOptions are the delivery bounds of callbacks (after WithDefaults).
func (c Config) WebhookOptions() webhook.Options {
	return webhook.Options{MaxAttempts: c.WebhookMaxAttempts, Backoff: time.Duration(c.WebhookBackoffMS) * time.Millisecond,
		Timeout: time.Duration(c.WebhookTimeoutMS) * time.Millisecond}
}

// Validate rejects values that cannot work (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	switch c.Role {
	case "", RoleAll, RoleGateway, RoleExecutor:
	default:
		errs = append(errs, fmt.Errorf("server.role: %q is not one of all, gateway, executor", c.Role))
	}
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
	if c.MaxOutputMemoryMB < 1 {
		errs = append(errs, fmt.Errorf("server.max_output_memory_mb: %d must be >= 1", c.MaxOutputMemoryMB))
	}
	if c.IdempotencyWindowSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.idempotency_window_seconds: %d must be >= 0", c.IdempotencyWindowSeconds))
	}
	if c.IdempotencyMaxClaims < 1 {
		errs = append(errs, fmt.Errorf("server.idempotency_max_claims: %d must be >= 1", c.IdempotencyMaxClaims))
	}
	if c.IdempotencyTenantResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("server.idempotency_tenant_response_bytes: %d must be >= 0", c.IdempotencyTenantResponseBytes))
	}
	if c.AsyncResultTTLSeconds < 1 {
		errs = append(errs, fmt.Errorf("server.async_result_ttl_seconds: %d must be >= 1", c.AsyncResultTTLSeconds))
	}
	if c.AsyncMaxActive < 1 {
		errs = append(errs, fmt.Errorf("server.async_max_active: %d must be >= 1", c.AsyncMaxActive))
	}
	if c.AsyncMaxResults < 1 {
		errs = append(errs, fmt.Errorf("server.async_max_results: %d must be >= 1", c.AsyncMaxResults))
	}
	if c.AsyncTenantResultBytes < 1 {
		errs = append(errs, fmt.Errorf("server.async_tenant_result_bytes: %d must be >= 1", c.AsyncTenantResultBytes))
	}
	if c.AsyncTenantArtifactBytes < 1 {
		errs = append(errs, fmt.Errorf("server.async_tenant_artifact_bytes: %d must be >= 1", c.AsyncTenantArtifactBytes))
	}
	if c.AsyncMaxArtifacts < 1 {
		errs = append(errs, fmt.Errorf("server.async_max_artifacts: %d must be >= 1", c.AsyncMaxArtifacts))
	}
	if c.ArtifactsInlineBytes < -1 {
		errs = append(errs, fmt.Errorf("server.artifacts_inline_bytes: %d must be >= -1 (-1: inline none)", c.ArtifactsInlineBytes))
	}
	if c.WebhookMaxAttempts < 1 || c.WebhookMaxAttempts > 20 {
		errs = append(errs, fmt.Errorf("server.webhook_max_attempts: %d is outside 1..20", c.WebhookMaxAttempts))
	}
	if c.WebhookBackoffMS < 1 {
		errs = append(errs, fmt.Errorf("server.webhook_backoff_ms: %d must be >= 1", c.WebhookBackoffMS))
	}
	if c.WebhookTimeoutMS < 1 {
		errs = append(errs, fmt.Errorf("server.webhook_timeout_ms: %d must be >= 1", c.WebhookTimeoutMS))
	}
	if c.ShutdownGraceSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.shutdown_grace_seconds: %d must be >= 0", c.ShutdownGraceSeconds))
	}
	if c.ReadyCacheSeconds < 0 {
		errs = append(errs, fmt.Errorf("server.ready_cache_seconds: %d must be >= 0", c.ReadyCacheSeconds))
	}
	for _, p := range []struct {
		name string
		v    int
	}{
		{"read_header_timeout_seconds", c.ReadHeaderTimeoutSeconds},
		{"read_body_timeout_seconds", c.ReadBodyTimeoutSeconds},
		{"write_timeout_seconds", c.WriteTimeoutSeconds},
		{"idle_timeout_seconds", c.IdleTimeoutSeconds},
		{"max_unauthenticated_conns", c.MaxUnauthenticatedConns},
		{"max_conns_per_subject", c.MaxConnsPerSubject},
		{"refusals_burst", c.RefusalsBurst},
		{"tenant_max_result_readers", c.TenantMaxResultReaders},
		{"tenant_max_live_readers", c.TenantMaxLiveReaders},
	} {
		if p.v < 1 {
			errs = append(errs, fmt.Errorf("server.%s: %d must be >= 1", p.name, p.v))
		}
	}
	if c.ConnFDReserve < 0 {
		errs = append(errs, fmt.Errorf("server.conn_fd_reserve: %d must be >= 0", c.ConnFDReserve))
	}
	if c.MaxHeaderBytes < 4096 {
		errs = append(errs, fmt.Errorf("server.max_header_bytes: %d is below 4096", c.MaxHeaderBytes))
	}
	if c.MaxJSONDepth < 4 || c.MaxJSONDepth > maxMaxJSONDepth {
		// 4: body → fixtures → variables → a nested value.
		errs = append(errs, fmt.Errorf("server.max_json_depth: %d is outside 4..%d", c.MaxJSONDepth, maxMaxJSONDepth))
	}
	return errors.Join(errs...)
}

// maxConns is how many client connections the process may hold with
// fdLimit descriptors (RLIMIT_NOFILE): the limit less ConnFDReserve (its
// default when zero), at least 1. 0 (no bound) when the limit is unknown.
func (c Config) maxConns(fdLimit int) int {
	if fdLimit <= 0 {
		return 0
	}
	reserve := c.ConnFDReserve
	if reserve == 0 {
		reserve = defaultConnFDReserve(fdLimit)
	}
	return max(fdLimit-reserve, 1)
}

// caps are the decoders' size limits (after WithDefaults).
func (c Config) caps() decode.Caps {
	return decode.Caps{Body: c.MaxBodyBytes, Source: c.MaxSourceBytes, Args: c.MaxArgsBytes, Depth: c.MaxJSONDepth}
}

// defaultConnFDReserve is ConnFDReserve's default for fdLimit descriptors:
// a fifth, at least 256 and at most half.
func defaultConnFDReserve(fdLimit int) int {
	return min(max(fdLimit/5, minConnFDReserve), fdLimit/2)
}

// flowConfig are the execute flow's bounds (after WithDefaults).
func (c Config) flowConfig() execution.Config {
	return execution.Config{
		Queue: execution.QueueLimits{Running: c.MaxConcurrentRuns, Waiting: c.MaxQueue,
			TenantRunning: c.TenantMaxRuns, TenantWaiting: c.TenantMaxQueue},
		OutputMemoryBytes:    c.MaxOutputMemoryMB << 20,
		IdempotencyWindow:    time.Duration(c.IdempotencyWindowSeconds) * time.Second,
		IdempotencyLimits:    c.IdempotencyLimits(),
		ArtifactsInlineBytes: c.ArtifactsInlineBytes,
	}
}
