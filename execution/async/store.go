// Package async keeps the executions submitted with POST /v1/executions:
// their state (queued, running, done), the envelope once done, and a cancel
// request, for a configurable time, per tenant and bounded per tenant.
//
// Runs (runs.go) submits an execution to the execute flow in a goroutine
// of its own, with a context tied to no HTTP request, and records what
// happens in a Store: MemoryStore in one process, RedisStore in the quota
// backend when it is Redis, so any gateway replica can answer GET and
// DELETE for a run another replica is running. Runs depends only on the
// flow's Run(ctx, Call); whether the run step happens in-process or on an
// executor behind a dispatcher is the flow's business.
package async

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// State is where an execution is.
type State string

// The states of an execution, in order.
const (
	StateQueued  State = "queued"  // submitted, not yet admitted
	StateRunning State = "running" // admitted (quota, run slot) and running
	StateDone    State = "done"    // the envelope is recorded
)

// Key names an execution: execution ids are scoped to their tenant.
type Key struct {
	TenantID    string
	ExecutionID string
}

// Record is one execution as stored.
type Record struct {
	Key
	State State
	// CancelRequested is set by DELETE while queued or running.
	CancelRequested bool
	SubmittedAt     time.Time
	StartedAt       time.Time // zero until running
	FinishedAt      time.Time // zero until done
	// HTTPStatus is what POST /v1/execute would have answered (200 for a
	// run, the refusal's status otherwise); set when done.
	HTTPStatus int
	// Envelope is the encoded envelope when done; nil once dropped for the
	// tenant's result budget (Expired).
	Envelope []byte
	// Expired: done, but the envelope was dropped before its TTL (the
	// tenant's result budget).
	Expired bool
}

// Limits bound a Store per tenant. Zero fields take the defaults.
type Limits struct {
	// MaxActive is how many queued or running executions a tenant may
	// have; beyond it a submit is refused (429). Default 64.
	MaxActive int
	// TenantResultBytes is the bytes of kept envelopes per tenant; the
	// tenant's oldest are dropped first. Default 64 MiB.
	TenantResultBytes int64
	// MaxResults is how many finished executions a tenant keeps; beyond
	// it its oldest are forgotten (GET is then 404). Default 10000.
	MaxResults int
	// ResultTTL is how long a finished execution is kept. Default 1 h.
	ResultTTL time.Duration
	// ActiveTTL bounds how long an execution may stay queued or running in
	// the store: one whose gateway died is forgotten after it (its tenant's
	// active count with it). Default 30 min.
	ActiveTTL time.Duration
	// TenantArtifactBytes and MaxArtifacts bound the artifacts a tenant's
	// runs (sync and async) keep, in bytes and in number; the tenant's
	// oldest go first. They are kept for ResultTTL. Defaults 256 MiB and
	// 10000.
	TenantArtifactBytes int64
	MaxArtifacts        int
}

// Defaults of Limits.
const (
	DefaultMaxActive         = 64
	DefaultTenantResultBytes = 64 << 20
	DefaultMaxResults        = 10000
	DefaultResultTTL         = time.Hour
	DefaultActiveTTL         = 30 * time.Minute

	DefaultTenantArtifactBytes = 256 << 20
	DefaultMaxArtifacts        = 10000
)

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxActive == 0 {
		l.MaxActive = DefaultMaxActive
	}
	if l.TenantResultBytes == 0 {
		l.TenantResultBytes = DefaultTenantResultBytes
	}
	if l.MaxResults == 0 {
		l.MaxResults = DefaultMaxResults
	}
	if l.ResultTTL == 0 {
		l.ResultTTL = DefaultResultTTL
	}
	if l.ActiveTTL == 0 {
		l.ActiveTTL = DefaultActiveTTL
	}
	if l.TenantArtifactBytes == 0 {
		l.TenantArtifactBytes = DefaultTenantArtifactBytes
	}
	if l.MaxArtifacts == 0 {
		l.MaxArtifacts = DefaultMaxArtifacts
	}
	return l
}

// Store keeps executions. Implementations are safe for concurrent use and
// bound what each tenant holds (Limits).
type Store interface {
	// Create records a new queued execution. Errors callers branch on:
	// ErrExists (the tenant already has an execution with this id within
	// the TTL) and *TooManyError (the tenant's active bound).
	Create(ctx context.Context, k Key) error
	// Start marks k running; it reports whether a cancel was requested
	// meanwhile.
	Start(ctx context.Context, k Key) (cancelRequested bool, err error)
	// Finish records k's envelope: done, kept for the TTL.
	Finish(ctx context.Context, k Key, httpStatus int, envelope []byte) error
	// Get returns k's record; false when there is none (never was, or
	// expired).
	Get(ctx context.Context, k Key) (Record, bool, error)
	// Head is Get without the envelope (Record.Envelope nil): what a
	// reader looks at before it reads the envelope with Envelope, so
	// neither a status poll nor a refused reader copies a result.
	Head(ctx context.Context, k Key) (Record, bool, error)
	// Envelope returns k's kept envelope for reading and a release to call
	// once the reader is done with it (once); false when there is none
	// (not done, dropped, forgotten). The bytes are shared and must not be
	// modified: concurrent readers of one execution share one copy, so a
	// result read by many costs its size once. reserve, if set, is asked
	// for the memory of a copy the store has to make (RedisStore; the
	// memory store hands out what it keeps), given back with the copy's
	// last reader; its error is returned.
	Envelope(ctx context.Context, k Key, reserve Reserve) (env []byte, release func(), ok bool, err error)
	// RequestCancel marks a queued or running k cancelled and returns its
	// record as it was, without the envelope (as Head); false when there
	// is none. A done execution is left as it is.
	RequestCancel(ctx context.Context, k Key) (Record, bool, error)
	// CancelRequested reports whether a cancel was requested for k (a
	// replica polls it for the runs it owns).
	CancelRequested(ctx context.Context, k Key) (bool, error)
	// PutArtifacts keeps the artifacts of a run of the tenant (sync or
	// async: execution.ArtifactStore) for ResultTTL, within the tenant's
	// TenantArtifactBytes and MaxArtifacts (its oldest are dropped first;
	// one larger than the whole budget is not kept).
	PutArtifacts(ctx context.Context, tenantID, executionID string, arts []sandbox.Artifact) error
	// Artifact returns the artifact name of k for reading and a release to
	// call once the reader is done with it (once); false when there is
	// none (never was, expired, dropped). Readers of one artifact share one
	// copy, as Envelope's share one; reserve is asked for the memory of a
	// copy the store has to make.
	Artifact(ctx context.Context, k Key, name string, reserve Reserve) (a StoredArtifact, release func(), ok bool, err error)
}

// StoredArtifact is an artifact as kept: what the envelope says of it and
// its bytes (shared between readers: never modified).
type StoredArtifact struct {
	Name   string
	MIME   string
	SHA256 string
	Data   []byte
}

// Reserve reserves n bytes of memory, waiting at most as long as it
// decides, and returns the func that gives them back
// (execution.Flow.ReserveOutput: the gateway's output memory budget).
type Reserve func(ctx context.Context, n int64) (release func(), err error)

// ErrExists means the tenant already has an execution with this id.
var ErrExists = errors.New("an execution with this id exists")

// TooManyError means the tenant already has its maximum of queued or
// running executions.
type TooManyError struct{ Max int }

func (e *TooManyError) Error() string {
	return fmt.Sprintf("the tenant already has %d queued or running executions", e.Max)
}
