// Package execution is the execute flow of DESIGN §1 without its
// transport: an execute request, decoded, is decided (policy), admitted
// (quota, a fair run slot, memory for its output), run (sandbox), settled
// (its CPU charged, retried while the quota backend is down) and recorded
// (audit, metrics, trace, one log line), exactly once per execution_id
// within the idempotency window.
//
// A transport (POST /v1/execute in package gateway, the MCP tools in
// package mcpserver, the async runs of package execution/async)
// authenticates the caller, hands Run a Call — who calls, under which
// grants, and how to read and decode the request — and renders the
// Outcome. Nothing here knows HTTP requests: a refusal is an *Error
// carrying the status the contract gives it, the envelope is the answer
// whatever the transport, and Run is cancelled by its context alone, so a
// run submitted now and awaited later (issue #15) is Run in a goroutine of
// its own with its own context. Validate checks a tool's source (POST
// /v1/validate, the MCP validate tool) with a fixed checker run through
// the same queue and quota.
//
// How to add a transport:
//  1. Authenticate the caller and check its route at the edge (gateway's
//     access table).
//  2. Build a Call: the principal, the /v1/execute row's grants, an id
//     from NewID, a Body that reads under the body cap, and the strict
//     decoder (decode.Execute) as Decode.
//  3. Run it; render Outcome.Envelope (or write Outcome.Body, the bytes
//     /v1/execute sends and the idempotency store keeps), pass on
//     RetryAfter, and call Release once the answer is sent.
package execution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http" // status codes only
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
)

// TracerName names the flow's tracer (its spans are children of the
// transport's).
const TracerName = "github.com/execgate/execgate/execution"

// The small interfaces the flow needs from the domain packages (STYLE:
// declared where used, only the methods used). app wires the real ones.

// Tenants authorises a caller for a tenant (*tenancy.Registry).
type Tenants interface {
	Authorize(p tenancy.Principal, target string, grants []tenancy.Grant) (tenancy.Tenant, error)
}

// Decider decides what a tenant may run (*policy.Engine). Any error is a
// PolicyError: deny, never allow.
type Decider interface {
	Decide(ctx context.Context, in policy.Input) (policy.Decision, error)
}

// Admitter admits runs against the tenant's quota (quota.MemoryLimiter,
// quota.RedisLimiter).
type Admitter interface {
	Admit(ctx context.Context, req quota.AdmitRequest) (*quota.Admission, error)
}

// Runner runs one tool inside the sandbox (*sandbox.Runner). Its only
// errors are *sandbox.UnavailableError and, from a runner that queues (the
// gateway role's dispatcher), *quota.ExceededError of kind max_queued:
// nothing was run; and, from the dispatcher, *sandbox.OutcomeUnknownError:
// the run may have run (502 OutcomeUnknown, its execution_id kept). The
// run's context carries its admission (quota.FromContext).
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// Auditor writes one durable record per authenticated execute request
// (*audit.Log).
type Auditor interface {
	Record(ctx context.Context, r audit.Record) error
}

// Environments are the package environments of every runtime the service
// runs (one per runtime of package runtimes; a gateway's, per runtime its
// executors serve): For returns those of a run in language on runtime
// (Python runs name their runtime; JavaScript and TypeScript runs name
// none and get the environments of the runtime that runs them), or an
// *sandbox.UnavailableError naming a runtime it does not serve.
type Environments interface {
	For(language, runtime string) (RuntimeEnvironments, error)
}

// RuntimeEnvironments resolves requirements into locked environments for
// one runtime's Python and platform (Resolve) or npm requirements
// (ResolveNPM: they do not depend on the Python runtime), and installs
// them (*environments.Cache); FromLock reads either lock. Resolve and
// Prepare report what cannot be built as a DependencyError
// (*sandbox.ErrorInfo); their error is an *sandbox.UnavailableError (no
// uv, an unusable deps dir) or a bad requirement string. Python
// environment ids are per runtime: Lookup knows only the ones of its
// runtime (and the npm ones).
type RuntimeEnvironments interface {
	Resolve(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error)
	ResolveNPM(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error)
	FromLock(lock string) (environments.Environment, error)
	Lookup(id string) (environments.Environment, bool, error)
	Prepare(ctx context.Context, env environments.Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error)
}

// Bridges makes the governed tool bridge of a run (*toolbridge.Hub).
type Bridges interface {
	NewRun(info toolbridge.RunInfo) *toolbridge.Run
}

// Metrics are the flow's Prometheus hooks (*telemetry.Metrics).
type Metrics interface {
	Execution(tenant, status, errType string)
	Stage(stage string, d time.Duration)
	PolicyEval(d time.Duration)
	QuotaRefusal(tenant, kind string)
	SandboxCrash()
	SyscallDenied(syscall string)
	EgressDenied(tenant string)
	SetQueue(waiting, running int)
}

// Config bounds the flow. The gateway fills it from its server.* keys.
type Config struct {
	// Queue bounds the runs of this process and their waiting room.
	Queue QueueLimits
	// OutputMemoryBytes is the budget of memory for the output of all runs
	// in flight (server.max_output_memory_mb); must be > 0.
	OutputMemoryBytes int64
	// IdempotencyWindow and IdempotencyLimits configure the in-memory
	// idempotency store used when Deps.Idempotency is nil.
	IdempotencyWindow time.Duration
	IdempotencyLimits IdempotencyLimits
	// ArtifactsInlineBytes is the largest artifact whose bytes the
	// envelope carries (base64; server.artifacts_inline_bytes). Zero:
	// DefaultArtifactsInlineBytes; negative: none.
	ArtifactsInlineBytes int64
}

// Deps are the components a Flow uses. Tenants, Policy, Quota, Runner and
// Audit are required.
type Deps struct {
	Tenants Tenants
	Policy  Decider
	Quota   Admitter
	Runner  Runner
	Audit   Auditor
	// Environments resolves and installs requirements. Nil: requests with
	// requirements are 503 SandboxUnavailable.
	Environments Environments
	// Tools makes each run's governed tool bridge. Nil: runs get no host
	// tools.
	Tools Bridges
	// Idempotency remembers run responses per (tenant, execution_id). Nil:
	// an in-memory store.
	Idempotency IdempotencyStore
	// Artifacts keeps runs' artifacts for GET
	// /v1/executions/{id}/artifacts/{name}. Nil: they are only in the
	// envelope (the small ones).
	Artifacts ArtifactStore
	// Metrics may be nil (no metrics).
	Metrics Metrics
	// Succeeded is told when a jailed run ended ok (the readiness check
	// counts it). Nil: no one is told.
	Succeeded func(at time.Time)
	// Logger gets one line per execute request. Nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider for the flow's spans. Nil: the global one.
	TracerProvider trace.TracerProvider
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Getenv reads the gateway's environment for tenants' secrets given
	// as {env: VAR}. Nil: os.Getenv.
	Getenv func(string) string
}

// Flow runs execute requests. Create it with New; it is safe for
// concurrent use, and its run queue, output budget and settlement retries
// live as long as it does.
type Flow struct {
	d Deps
	// inline is Config.ArtifactsInlineBytes, defaulted.
	inline int64
	queue  *runQueue
	output *outputBudget
	// resolves bounds the resolutions of new requirement lists, in all
	// and per tenant (they run before any quota admission).
	resolves *environments.ResolveGate
	idem     IdempotencyStore
	settle   *settler
	tracer   trace.Tracer
	log      *slog.Logger
	now      func() time.Time
}

// New builds a Flow from cfg and d.
func New(cfg Config, d Deps) (*Flow, error) {
	if d.Tenants == nil || d.Policy == nil || d.Quota == nil || d.Runner == nil || d.Audit == nil {
		return nil, errors.New("execution: Tenants, Policy, Quota, Runner and Audit are required")
	}
	if cfg.OutputMemoryBytes <= 0 || cfg.Queue.Running < 1 {
		return nil, fmt.Errorf("execution: output memory %d and run slots %d must be > 0", cfg.OutputMemoryBytes, cfg.Queue.Running)
	}
	if d.Metrics == nil {
		d.Metrics = nopMetrics{}
	}
	if d.Succeeded == nil {
		d.Succeeded = func(time.Time) {}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.TracerProvider == nil {
		d.TracerProvider = otel.GetTracerProvider()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Getenv == nil {
		d.Getenv = os.Getenv
	}
	if d.Idempotency == nil {
		d.Idempotency = NewMemoryIdempotency(cfg.IdempotencyWindow, cfg.IdempotencyLimits, d.Now)
	}
	inline := cfg.ArtifactsInlineBytes
	if inline == 0 {
		inline = DefaultArtifactsInlineBytes
	}
	return &Flow{
		d:        d,
		inline:   inline,
		queue:    newRunQueue(cfg.Queue, d.Metrics.SetQueue),
		resolves: environments.NewResolveGate(environments.MaxResolves, environments.MaxTenantResolves),
		output:   newOutputBudget(cfg.OutputMemoryBytes),
		idem:     d.Idempotency,
		settle:   newSettler(d.Logger),
		tracer:   d.TracerProvider.Tracer(TracerName),
		log:      d.Logger,
		now:      d.Now,
	}, nil
}

// Drain waits until no run is queued or running, or ctx ends.
func (f *Flow) Drain(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if w, r := f.queue.load(); w == 0 && r == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			w, r := f.queue.load()
			return fmt.Errorf("draining runs (%d waiting, %d running): %w", w, r, ctx.Err())
		case <-t.C:
		}
	}
}

// FlushSettlements makes one last attempt at the quota settlements still
// being retried (the backend was down when their runs ended) and waits for
// them until ctx ends. An error says how many runs' CPU could not be
// charged.
func (f *Flow) FlushSettlements(ctx context.Context) error {
	if n := f.settle.Flush(ctx); n > 0 {
		return fmt.Errorf("%d quota settlements failed at shutdown (quota backend unreachable): their runs' CPU is not charged", n)
	}
	return nil
}

// Call is one execute request as it enters the flow, whatever its
// transport.
type Call struct {
	Principal tenancy.Principal
	// Grants are who may run (the /v1/execute access row).
	Grants []tenancy.Grant
	// ID is the execution id until the request names one.
	ID string
	// Body reads the request under the transport's cap; Decode decodes it
	// strictly. Both are timed as the decode stage; their errors are
	// refusals (an *Error names the field).
	Body   func() ([]byte, error)
	Decode func(body []byte) (*Request, error)
	// Started, if set, is called once the run is admitted (quota, run
	// slot) and about to run: an async run is "running" from then on.
	Started func()
	// Output, if set, sees the run's stdout and stderr as they happen
	// (sandbox.OutputFunc: it must not block).
	Output sandbox.OutputFunc
}

// Outcome is what the flow answers: the status the contract gives it, the
// envelope (encoded once), and the Retry-After of a refusal (0: none).
type Outcome struct {
	Status     int
	Envelope   *Envelope
	Body       *EncodedEnvelope
	RetryAfter time.Duration
	// release gives back the run's output memory. Never nil.
	release func()
}

// Release gives back the memory held for the run's output; call it once
// the answer is sent. Idempotent.
func (o *Outcome) Release() { o.release() }

// state is one execute request as it goes through the flow; what it holds
// at the end becomes the audit record and the log line.
type state struct {
	id        string
	principal tenancy.Principal
	req       *Request
	srcSHA    string
	decision  *policy.Decision
	limits    sandbox.Limits // the decided limits (every field set by the policy)
	policySC  trace.SpanContext
	quota     audit.Quota
	result    *sandbox.Result
	replayed  bool
	// claimed is the idempotency key this request holds (nil: none); the
	// record step completes or abandons it.
	claimed *IdempotencyKey
	// bridge is the run's governed tool bridge (nil: none, or test mode).
	bridge *toolbridge.Run
	env    *environments.Environment // the packages the run installs; nil: none
	// failedDecisionID is the id of a decision that errored (PolicyError),
	// so the audit record and the log can be joined with OPA's view.
	failedDecisionID string
	// output watches the run's stdout and stderr (Call.Output); nil: no one.
	output sandbox.OutputFunc
	// secrets are the names of the brokered secrets the run was given
	// (for the audit record; never a value).
	secrets []string
	// releaseOutput gives back the run's output memory reservation
	// (output.go) once the response is written; nil without one.
	releaseOutput func()
}

// Run is the execute flow of DESIGN §1: decode → tenancy → idempotency →
// environment → decide → admit (queue, quota, output memory, run slot) →
// run → settle → record (audit, idempotency, metrics, log). Every call
// leaves exactly one audit record, written before the answer; if that
// write fails the answer is 500 AuditError.
func (f *Flow) Run(ctx context.Context, call Call) *Outcome {
	start := time.Now()
	x := &state{id: call.ID, principal: call.Principal, quota: audit.Quota{Outcome: audit.QuotaSkipped}, output: call.Output}
	out := &Outcome{release: func() {
		if x.releaseOutput != nil {
			x.releaseOutput()
		}
	}}
	out.Status, out.Envelope, out.RetryAfter = f.answer(ctx, call, x)
	out.Body = f.record(ctx, x, out, start)
	return out
}

// answer runs the request up to its answer: the envelope of a run (or a
// replay), or of the refusal that stopped it.
func (f *Flow) answer(ctx context.Context, call Call, x *state) (int, *Envelope, time.Duration) {
	status, env, err := f.execute(ctx, call, x)
	if err == nil {
		return status, env, 0
	}
	e := Refusal(err)
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), sandbox.ErrCancelledByCaller) {
		e = errCancelledBeforeRun(err)
	}
	if !e.Expected() {
		f.log.ErrorContext(ctx, "execute failed", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, x.principal.TenantID,
			"error_type", e.Type, "decision_id", x.failedDecisionID, "err", err)
	}
	env = refusalEnvelope(ctx, x, e)
	if x.decision != nil {
		env.Decision = envelopeDecision(x.decision, x.limits)
	}
	return e.Status, env, e.RetryAfter
}

// execute runs the stages that lead to a run. It returns the 200 envelope
// of a run (or replay) or the error that refused the request.
func (f *Flow) execute(ctx context.Context, call Call, x *state) (int, *Envelope, error) {
	req, err := f.decode(call, x)
	if err != nil {
		return 0, nil, err
	}
	tenant, err := f.d.Tenants.Authorize(x.principal, req.TenantID, call.Grants)
	if err != nil {
		return 0, nil, err
	}
	if status, env, err := f.claim(ctx, x, tenant); env != nil || err != nil {
		return status, env, err
	}
	// Requirements resolve for the run's language and runtime, which is
	// therefore known before the policy is asked (the policy decides the
	// same default).
	pkgs, failure, err := f.Environment(ctx, tenant.ID, req.Language, policy.RuntimeFor(tenant, req.Language, req.Runtime), req.Requirements, req.RequirementsLock, req.EnvironmentID)
	if err != nil {
		if IsUnavailable(err) {
			// The runtime is not served here (or has no rootfs): the policy's
			// answer without the packages comes first, so a runtime the tenant
			// is not granted is its 403, not this gateway's 503. Packages only
			// add reasons to deny, so its deny stands; its allow is not kept.
			if _, derr := f.decide(ctx, x, tenant); derr != nil {
				return 0, nil, derr
			}
			x.decision = nil
		}
		return 0, nil, err
	}
	if failure != nil { // the requirements cannot be resolved: nothing to decide or run
		return http.StatusOK, dependencyEnvelope(ctx, x, tenant, failure), nil
	}
	x.env = pkgs
	dec, err := f.decide(ctx, x, tenant)
	if err != nil {
		return 0, nil, err
	}
	if err := checkFiles(req.Files, x.limits); err != nil {
		return 0, nil, err
	}
	tk, adm, err := f.admit(ctx, x, tenant)
	if err != nil {
		return 0, nil, err
	}
	defer tk.release() // also if the run panics (the edge recovers)
	if call.Started != nil {
		call.Started()
	}
	res, err := f.run(ctx, x, tenant, dec, adm)
	tk.release() // the slot is free before the settlement's round trip
	if err != nil {
		return 0, nil, err
	}
	f.observe(x, tenant, res)
	f.settleRun(ctx, adm, res)
	f.keepArtifacts(ctx, x, tenant.ID, res.Artifacts)
	env := runEnvelope(ctx, x, tenant, res)
	env.Artifacts = EnvelopeArtifacts(res.Artifacts, f.inline, x.limits.OutputBytes)
	return http.StatusOK, env, nil
}
