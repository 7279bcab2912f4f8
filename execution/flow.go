// Package execution is the execute flow of DESIGN §1 without its
// transport: an execute request, decoded, is decided (policy), admitted
// (quota, a fair run slot, memory for its output), run (sandbox), settled
// (its CPU charged, retried while the quota backend is down) and recorded
// (audit, metrics, trace, one log line), exactly once per execution_id
// within the idempotency window.
//
// A transport (POST /v1/execute, the MCP tools in package gateway; later
// the async API) authenticates the caller, hands Run a Call — who calls,
// under which grants, and how to read and decode the request — and renders
// the Outcome. Nothing here knows HTTP requests: a refusal is an *Error
// carrying the status the contract gives it, the envelope is the answer
// whatever the transport, and Run is cancelled by its context alone, so a
// run submitted now and awaited later (issue #15) is Run in a goroutine of
// its own with its own context.
package execution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http" // status codes only
	"sort"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
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

// Runner runs one tool inside the sandbox (*sandbox.Runner). Its only error
// is *sandbox.UnavailableError: nothing was run.
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// Auditor writes one durable record per authenticated execute request
// (*audit.Log).
type Auditor interface {
	Record(ctx context.Context, r audit.Record) error
}

// Environments resolves requirements into locked environments and installs
// them (*sandbox.Environments). Resolve and Prepare report what cannot be
// built as a DependencyError (*sandbox.ErrorInfo); their error is an
// *sandbox.UnavailableError (no uv, an unusable deps dir) or a bad
// requirement string.
type Environments interface {
	Resolve(ctx context.Context, reqs []string) (sandbox.Environment, *sandbox.ErrorInfo, error)
	FromLock(lock string) (sandbox.Environment, error)
	Lookup(id string) (sandbox.Environment, bool, error)
	Prepare(ctx context.Context, env sandbox.Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error)
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
}

// Flow runs execute requests. Create it with New; it is safe for
// concurrent use, and its run queue, output budget and settlement retries
// live as long as it does.
type Flow struct {
	d      Deps
	queue  *runQueue
	output *outputBudget
	idem   IdempotencyStore
	settle *settler
	tracer trace.Tracer
	log    *slog.Logger
	now    func() time.Time
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
	if d.Idempotency == nil {
		d.Idempotency = NewMemoryIdempotency(cfg.IdempotencyWindow, cfg.IdempotencyLimits, d.Now)
	}
	return &Flow{
		d:      d,
		queue:  newRunQueue(cfg.Queue, d.Metrics.SetQueue),
		output: newOutputBudget(cfg.OutputMemoryBytes),
		idem:   d.Idempotency,
		settle: newSettler(d.Logger),
		tracer: d.TracerProvider.Tracer(TracerName),
		log:    d.Logger,
		now:    d.Now,
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
	limits    sandbox.Limits // the decided limits with the runner's defaults
	policySC  trace.SpanContext
	quota     audit.Quota
	result    *sandbox.Result
	replayed  bool
	// claimed is the idempotency key this request holds (nil: none); the
	// record step completes or abandons it.
	claimed *IdempotencyKey
	// bridge is the run's governed tool bridge (nil: none, or test mode).
	bridge *toolbridge.Run
	env    *sandbox.Environment // the packages the run installs; nil: none
	// failedDecisionID is the id of a decision that errored (PolicyError),
	// so the audit record and the log can be joined with OPA's view.
	failedDecisionID string
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
	x := &state{id: call.ID, principal: call.Principal, quota: audit.Quota{Outcome: audit.QuotaSkipped}}
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
	pkgs, failure, err := f.Environment(ctx, req.Requirements, req.RequirementsLock, req.EnvironmentID)
	if err != nil {
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
	tk, adm, err := f.admit(ctx, x, tenant)
	if err != nil {
		return 0, nil, err
	}
	defer tk.release()
	res, err := f.run(ctx, x, tenant, dec, adm)
	tk.release()
	if err != nil {
		return 0, nil, err
	}
	f.observe(x, tenant, res)
	f.settleRun(ctx, adm, res)
	return http.StatusOK, runEnvelope(ctx, x, tenant, res), nil
}

// decode reads and decodes the request, and takes the execution id it
// names.
func (f *Flow) decode(call Call, x *state) (*Request, error) {
	start := time.Now()
	body, err := call.Body()
	if err != nil {
		return nil, err
	}
	req, err := call.Decode(body)
	f.d.Metrics.Stage(telemetry.StageDecode, time.Since(start))
	if err != nil {
		return nil, err
	}
	x.req = req
	sum := sha256.Sum256([]byte(req.Source))
	x.srcSHA = hex.EncodeToString(sum[:])
	if req.ExecutionID != "" {
		x.id = req.ExecutionID
	}
	return req, nil
}

// claim takes the request's execution_id for this run, or returns the
// remembered answer of the run that already had it (a non-nil envelope).
// Without an execution_id there is nothing to claim.
func (f *Flow) claim(ctx context.Context, x *state, tenant tenancy.Tenant) (int, *Envelope, error) {
	req := x.req
	if req.ExecutionID == "" {
		return 0, nil, nil
	}
	key := IdempotencyKey{TenantID: tenant.ID, ExecutionID: req.ExecutionID}
	stored, ok, err := f.idem.Claim(ctx, key, Fingerprint(req))
	switch {
	case errors.Is(err, ErrIdempotencyConflict):
		return 0, nil, BadRequest("execution_id", "%q was already used for a different request within the idempotency window", req.ExecutionID)
	case err != nil:
		return 0, nil, err
	case ok:
		x.claimed = &key
		return 0, nil, nil
	}
	if x.releaseOutput, err = f.output.acquireReplay(ctx, len(stored.Body)); err != nil {
		return 0, nil, err
	}
	var env Envelope
	if err := json.Unmarshal(stored.Body, &env); err != nil {
		return 0, nil, fmt.Errorf("decoding remembered response: %w", err)
	}
	x.replayed = true
	if env.Decision != nil {
		x.decision = &policy.Decision{ID: env.Decision.ID, Allow: true, NetworkAccess: env.Decision.NetworkAccess,
			Limits: policy.Limits(env.Decision.Limits), Egress: env.Decision.Egress}
		x.limits = env.Decision.Limits
	}
	return stored.Status, &env, nil
}

// decide asks the policy. Any error is a PolicyError; a deny carries the
// policy's reasons.
func (f *Flow) decide(ctx context.Context, x *state, tenant tenancy.Tenant) (policy.Decision, error) {
	req := x.req
	in := policyInput(x, tenant)
	pctx, span := f.tracer.Start(ctx, telemetry.StagePolicy)
	defer span.End()
	x.policySC = span.SpanContext()
	start := time.Now()
	dec, err := f.d.Policy.Decide(pctx, in)
	d := time.Since(start)
	f.d.Metrics.PolicyEval(d)
	f.d.Metrics.Stage(telemetry.StagePolicy, d)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		x.failedDecisionID = dec.ID
		return policy.Decision{}, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if dec.ID == "" {
		dec.ID = NewID()
	}
	x.decision = &dec
	x.limits = sandbox.Limits(dec.Limits).WithDefaults()
	span.SetAttributes(
		attribute.String("execgate.decision_id", dec.ID),
		attribute.Bool("execgate.allow", dec.Allow),
		attribute.String("execgate.network_access", dec.NetworkAccess),
	)
	if !dec.Allow {
		return dec, Denied(dec.Reasons)
	}
	if x.env != nil && !dec.RequirementsAllowed {
		// The policy allowed the run but not its requirements: never install
		// what was not granted.
		return dec, Denied([]string{"requirements are not allowed for this tenant"})
	}
	if req.Mode == "test" {
		// Capability testing never reaches the network (DESIGN §12.6).
		x.decision.NetworkAccess = string(sandbox.NetworkNone)
		x.decision.Egress = policy.Egress{Allow: []string{}}
	}
	return *x.decision, nil
}

// policyInput is the policy's input for the request.
func policyInput(x *state, tenant tenancy.Tenant) policy.Input {
	preq := policyRequest(x.req)
	preq.Packages = PolicyPackages(x.env)
	return policy.BuildInput(tenant, x.principal, preq)
}

// Decide is the decision the flow would make for req as p of tenant, and
// the policy input it was made on, with nothing admitted or run (POST
// /v1/admin/policy/evaluate). A deny is a *PolicyDeniedError beside the
// decision; any other error a PolicyError.
func (f *Flow) Decide(ctx context.Context, p tenancy.Principal, tenant tenancy.Tenant, req *Request) (policy.Input, policy.Decision, error) {
	x := &state{principal: p, req: req}
	dec, err := f.decide(ctx, x, tenant)
	return policyInput(x, tenant), dec, err
}

// policyRequest is what the policy sees of req (BuildInput hashes and
// measures the source and args; they never enter the input).
func policyRequest(req *Request) policy.Request {
	tools := append(make([]string, 0, len(req.Tools)), req.Tools...)
	if req.Fixtures != nil && req.Mode == "test" {
		for name := range req.Fixtures.Tools {
			tools = append(tools, name)
		}
		sort.Strings(tools)
	}
	preq := policy.Request{
		Language:      req.Language,
		Entrypoint:    req.Entrypoint,
		Source:        req.Source,
		Args:          req.Args,
		Requirements:  req.Requirements,
		NetworkAccess: req.NetworkAccess,
		Limits:        req.Limits,
		Mode:          req.Mode,
		Tools:         tools,
	}
	if req.Egress != nil {
		preq.EgressAllow = req.Egress.Allow
	}
	return preq
}

// admit takes what a decided run holds while it runs, in this order: a
// place in the run queue (refused at once when full), the tenant's quota,
// memory for its output, and a fair run slot. On success the caller
// releases the ticket (slot and place) and ends the quota lease by
// settling it; on failure nothing is held.
func (f *Flow) admit(ctx context.Context, x *state, tenant tenancy.Tenant) (*ticket, *quota.Admission, error) {
	tk := f.queue.enter(tenant.ID)
	if tk == nil {
		return nil, nil, errOverloaded
	}
	adm, err := f.admitQuota(ctx, x, tenant)
	if err != nil {
		tk.release()
		return nil, nil, err
	}
	if x.releaseOutput, err = f.output.acquire(ctx, x.limits); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		tk.release()
		return nil, nil, err
	}
	if err := tk.acquire(ctx); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		tk.release()
		return nil, nil, err
	}
	return tk, adm, nil
}

// admitQuota asks the quota backend for this run.
func (f *Flow) admitQuota(ctx context.Context, x *state, tenant tenancy.Tenant) (*quota.Admission, error) {
	qctx, span := f.tracer.Start(ctx, telemetry.StageQuota)
	defer span.End()
	start := time.Now()
	adm, err := f.d.Quota.Admit(qctx, quota.AdmitRequest{
		TenantID:     tenant.ID,
		ExecutionID:  x.id,
		Limits:       tenant.Quota,
		CPUReserveMS: x.limits.CPUMS,
	})
	f.d.Metrics.Stage(telemetry.StageQuota, time.Since(start))
	if err == nil {
		x.quota = audit.Quota{Outcome: audit.QuotaAdmitted}
		return adm, nil
	}
	span.RecordError(err)
	x.quota = quotaRefusal(err)
	switch x.quota.Outcome {
	case audit.QuotaExceeded, audit.QuotaBudgetExhausted:
		f.d.Metrics.QuotaRefusal(tenant.ID, x.quota.Kind)
	case audit.QuotaUnavailable:
		if errors.Is(err, quota.ErrUnavailable) {
			f.d.Metrics.QuotaRefusal(tenant.ID, "unavailable")
		}
	}
	return nil, err
}

// quotaRefusal is how the audit record describes a refused admission.
func quotaRefusal(err error) audit.Quota {
	var ex *quota.ExceededError
	if errors.As(err, &ex) {
		q := audit.Quota{Outcome: audit.QuotaExceeded, Kind: string(ex.Kind), RetryAfterMS: ex.RetryAfter.Milliseconds()}
		if ex.Kind == quota.KindBudget {
			q.Outcome = audit.QuotaBudgetExhausted
		}
		return q
	}
	return audit.Quota{Outcome: audit.QuotaUnavailable}
}

// spec is the sandbox spec of the decided run.
func (f *Flow) spec(x *state, tenant tenancy.Tenant, dec policy.Decision) (sandbox.Spec, error) {
	req := x.req
	spec := sandbox.Spec{
		ExecutionID: x.id,
		TenantID:    tenant.ID,
		Language:    req.Language,
		Source:      req.Source,
		Entrypoint:  req.Entrypoint,
		Args:        req.Args,
		Mode:        req.Mode,
		Network:     sandbox.Network(dec.NetworkAccess),
		Limits:      x.limits,
		EgressAllow: dec.Egress.Allow,
	}
	if spec.Network == "" {
		spec.Network = sandbox.NetworkNone
	}
	if dec.RequirementsAllowed && x.env != nil {
		spec.Lock = x.env.Lock // installed by run
	}
	if x.bridge = f.toolBridge(x, tenant, dec); x.bridge != nil {
		spec.Bridge = x.bridge
	}
	if req.Fixtures != nil {
		spec.Variables = req.Fixtures.Variables
		if len(req.Fixtures.Tools) > 0 {
			b, err := json.Marshal(req.Fixtures.Tools)
			if err != nil {
				return sandbox.Spec{}, fmt.Errorf("encoding tool fixtures: %w", err)
			}
			spec.ToolFixtures = b
		}
	}
	return spec, nil
}

// toolBridge returns the governed bridge of a run (nil without a hub, and in
// test mode, where the sandbox answers from the fixtures).
func (f *Flow) toolBridge(x *state, tenant tenancy.Tenant, dec policy.Decision) *toolbridge.Run {
	if f.d.Tools == nil || x.req.Mode == "test" {
		return nil
	}
	return f.d.Tools.NewRun(toolbridge.RunInfo{
		TenantID:   tenant.ID,
		Plan:       tenant.Plan,
		TenantData: tenant.Policy,
		Subject:    x.principal.Subject,
		Roles:      x.principal.Roles,
		DecisionID: dec.ID,
		Granted:    dec.Tools,
	})
}

// run installs the run's packages (once per environment) and runs the tool
// in the sandbox. A lost quota lease (the slot may be someone else's now)
// cancels the run. The error is the sandbox's: nothing was run, and the
// lease is released.
func (f *Flow) run(ctx context.Context, x *state, tenant tenancy.Tenant, dec policy.Decision, adm *quota.Admission) (sandbox.Result, error) {
	if dec.RequirementsAllowed && x.env != nil {
		// Installed here (once per environment; a hit when prepared), so
		// the runner only finds it.
		_, _, failure, err := f.d.Environments.Prepare(ctx, *x.env)
		if err != nil {
			return sandbox.Result{}, err
		}
		if failure != nil {
			return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: failure}, nil
		}
	}
	spec, err := f.spec(x, tenant, dec)
	if err != nil {
		return sandbox.Result{}, err
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lost := make(chan struct{})
	go func() {
		select {
		case <-adm.Lost():
			close(lost)
			cancel()
		case <-rctx.Done():
		}
	}()

	runCtx, span := f.tracer.Start(rctx, telemetry.StageRun)
	defer span.End()
	start := time.Now()
	res, err := f.d.Runner.Run(runCtx, spec)
	f.d.Metrics.Stage(telemetry.StageRun, time.Since(start))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "sandbox unavailable")
		if rerr := adm.Release(context.WithoutCancel(ctx)); rerr != nil {
			f.log.WarnContext(ctx, "quota release failed", telemetry.KeyExecutionID, x.id, "err", rerr)
		}
		return sandbox.Result{}, err
	}
	select {
	case <-lost:
		f.log.ErrorContext(ctx, "quota lease lost during the run; the run was cancelled", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, tenant.ID)
	default:
	}
	span.SetAttributes(attribute.String("execgate.status", string(res.Status)), attribute.String("execgate.error_type", res.ErrorType()))
	if res.Status != sandbox.StatusOK {
		span.SetStatus(codes.Error, res.ErrorType())
	}
	return res, nil
}

// observe takes note of what a run showed about the host and the tenant:
// a good jailed run (readiness), denied egress and syscalls (metrics).
func (f *Flow) observe(x *state, tenant tenancy.Tenant, res sandbox.Result) {
	x.result = &res
	if res.Status == sandbox.StatusOK {
		f.d.Succeeded(f.now())
	}
	for _, a := range res.Egress {
		if !a.Allowed {
			f.d.Metrics.EgressDenied(tenant.ID)
		}
	}
	if res.ErrorType() == sandbox.ErrSyscallDenied {
		f.d.Metrics.SyscallDenied(res.DeniedSyscall)
	}
}

// settleRun charges the run's CPU and ends its lease. The run happened and
// its answer stands; if the backend is down the charge is retried in the
// background (settle.go).
func (f *Flow) settleRun(ctx context.Context, adm *quota.Admission, res sandbox.Result) {
	sctx, span := f.tracer.Start(ctx, telemetry.StageSettle)
	defer span.End()
	start := time.Now()
	if err := f.settle.settle(sctx, adm, res.Usage.CPUMS); err != nil {
		span.RecordError(err)
	}
	f.d.Metrics.Stage(telemetry.StageSettle, time.Since(start))
}

// record writes what the request leaves behind — the audit record (a
// failed write turns the answer into 500 AuditError), the remembered
// response of a run, metrics and the log line — and returns the encoded
// answer.
func (f *Flow) record(ctx context.Context, x *state, out *Outcome, start time.Time) *EncodedEnvelope {
	if err := f.audit(ctx, x, out.Status, out.Envelope); err != nil {
		e := Refusal(fmt.Errorf("%w: %w", errAudit, err))
		out.Status, out.Envelope, out.RetryAfter = e.Status, refusalEnvelope(ctx, x, e), 0
	}
	env := out.Envelope
	if env.Logs == nil { // a remembered response from before logs existed
		env.Logs = []sandbox.LogLine{}
	}
	body, err := EncodeEnvelope(env)
	if err != nil { // cannot happen for these types; keep the contract anyway
		body = &EncodedEnvelope{head: []byte(`{"status":"error"}`), size: len(`{"status":"error"}`)}
	}
	f.remember(ctx, x, out.Status, env, body)

	errType := ""
	if env.Error != nil {
		errType = env.Error.Type
	}
	f.d.Metrics.Execution(x.principal.TenantID, string(env.Status), errType)
	f.d.Metrics.Stage(telemetry.StageTotal, time.Since(start))
	if errType == sandbox.ErrSandboxCrashed {
		f.d.Metrics.SandboxCrash()
	}
	f.logExecution(x, out.Status, env, time.Since(start))
	return body
}

// audit writes the request's one audit record.
func (f *Flow) audit(ctx context.Context, x *state, status int, env *Envelope) error {
	actx, span := f.tracer.Start(ctx, telemetry.StageAudit)
	defer span.End()
	start := time.Now()
	err := f.d.Audit.Record(actx, auditRecord(ctx, x, status, env))
	f.d.Metrics.Stage(telemetry.StageAudit, time.Since(start))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "audit write failed")
		f.log.ErrorContext(ctx, "audit write failed", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, x.principal.TenantID, "err", err)
	}
	return err
}

// remember settles the request's idempotency claim: the response of a run
// is kept for the window; a refusal leaves the id free for a retry.
func (f *Flow) remember(ctx context.Context, x *state, status int, env *Envelope, body *EncodedEnvelope) {
	if x.claimed == nil {
		return
	}
	bg := context.WithoutCancel(ctx)
	var err error
	if status == http.StatusOK && !x.replayed {
		err = f.idem.Complete(bg, *x.claimed, StoredResponse{Fingerprint: Fingerprint(x.req), Status: status, Outcome: env.ExecutionStatus(), Body: body.Bytes()})
	} else {
		err = f.idem.Abandon(bg, *x.claimed)
	}
	if err != nil {
		f.log.WarnContext(ctx, "idempotency store", telemetry.KeyExecutionID, x.id, "err", err)
	}
}

// runEnvelope is the answer of a run that happened.
func runEnvelope(ctx context.Context, x *state, tenant tenancy.Tenant, res sandbox.Result) *Envelope {
	env := &Envelope{
		ExecutionID: x.id,
		TenantID:    tenant.ID,
		Status:      res.Status,
		Result:      res.Result,
		Stdout:      res.Stdout,
		Stderr:      res.Stderr,
		Truncated:   res.Truncated,
		Usage:       res.Usage,
		Logs:        res.Logs,
		ToolCalls:   envelopeToolCalls(res.ToolCalls),
		Decision:    envelopeDecision(x.decision, x.limits),
		TraceID:     TraceID(ctx),
	}
	env.Egress, env.EgressDropped = sandbox.BoundEgress(res.Egress)
	env.EgressDropped += res.EgressDropped
	if env.Status == "" {
		env.Status = sandbox.StatusError
	}
	if env.Logs == nil {
		env.Logs = []sandbox.LogLine{}
	}
	if res.Error != nil {
		env.Error = &ErrorBody{Type: res.Error.Type, Message: res.Error.Message, Traceback: res.Error.Traceback,
			Line: max(res.Error.Line, 0), Column: max(res.Error.Column, 0)}
	} else if env.Status != sandbox.StatusOK {
		env.Error = &ErrorBody{Type: sandbox.ErrSandboxCrashed, Message: "the run ended in error without an error report"}
	}
	if env.Status != sandbox.StatusOK {
		env.Result = nil
	}
	return env
}

// refusalEnvelope is the envelope of a call refused before (or instead of)
// a run.
func refusalEnvelope(ctx context.Context, x *state, e *Error) *Envelope {
	body := e.Body()
	return &Envelope{
		ExecutionID: x.id,
		TenantID:    x.principal.TenantID,
		Status:      sandbox.StatusError,
		Error:       &body,
		Logs:        []sandbox.LogLine{},
		TraceID:     TraceID(ctx),
	}
}

// dependencyEnvelope is the answer to requirements that cannot be
// resolved: a run outcome (200, DependencyError with uv's output), though
// nothing was decided or run.
func dependencyEnvelope(ctx context.Context, x *state, tenant tenancy.Tenant, failure *sandbox.ErrorInfo) *Envelope {
	return &Envelope{
		ExecutionID: x.id,
		TenantID:    tenant.ID,
		Status:      sandbox.StatusError,
		Error:       &ErrorBody{Type: failure.Type, Message: failure.Message, Traceback: failure.Traceback},
		Logs:        []sandbox.LogLine{},
		TraceID:     TraceID(ctx),
	}
}

// auditRecord is the one audit record of this request.
func auditRecord(ctx context.Context, x *state, status int, env *Envelope) audit.Record {
	p := x.principal
	r := audit.Record{
		ExecutionID:  x.id,
		TenantID:     p.TenantID,
		Subject:      p.Subject,
		Roles:        p.Roles,
		Quota:        x.quota,
		SourceSHA256: x.srcSHA,
		Outcome:      audit.Outcome{HTTPStatus: status, Status: string(env.Status)},
	}
	if env.Error != nil {
		r.Outcome.ErrorType = env.Error.Type
	}
	if x.decision != nil {
		r.Decision = &audit.Decision{
			ID:            x.decision.ID,
			Allow:         x.decision.Allow,
			Reasons:       x.decision.Reasons,
			NetworkAccess: x.decision.NetworkAccess,
			Limits:        x.limits,
			Egress:        x.decision.Egress.Allow,
		}
		if x.decision.Audit.RecordSource && x.req != nil {
			r.Source = x.req.Source
		}
	}
	if x.decision == nil && x.failedDecisionID != "" {
		r.Decision = &audit.Decision{ID: x.failedDecisionID, Allow: false, Reasons: []string{"policy error: the decision was undefined or failed"}}
	}
	if x.result != nil {
		if env.Error != nil && env.Error.Type == sandbox.ErrSyscallDenied {
			r.Outcome.Syscall = x.result.DeniedSyscall
		}
		r.Usage = x.result.Usage
		r.Egress = x.result.Egress
		r.EgressDropped = x.result.EgressDropped
		r.ToolCalls = x.result.ToolCalls
	}
	if x.bridge != nil {
		r.ToolCallsDropped = x.bridge.Dropped()
	}
	sc := trace.SpanContextFromContext(ctx)
	if x.policySC.IsValid() {
		sc = x.policySC
	}
	if sc.IsValid() {
		r.TraceID, r.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	return r
}

// logExecution writes the one log line of an execute request. It never
// carries the source, args or token.
func (f *Flow) logExecution(x *state, status int, env *Envelope, d time.Duration) {
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelError
	case status >= 400 || env.Status != sandbox.StatusOK:
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String(telemetry.KeyExecutionID, x.id),
		slog.String(telemetry.KeyTenantID, x.principal.TenantID),
		slog.String("status", string(env.Status)),
		slog.Int("http_status", status),
		slog.Int64("wall_ms", env.Usage.WallMS),
		slog.Int64("duration_ms", d.Milliseconds()),
		slog.String(telemetry.KeyTraceID, env.TraceID),
	}
	if env.Error != nil {
		attrs = append(attrs, slog.String("error_type", env.Error.Type))
	}
	if x.decision != nil {
		attrs = append(attrs, slog.String("decision_id", x.decision.ID))
	}
	if x.replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	// Logged without the request context: trace_id is already an attribute,
	// and a trace-aware handler would add it a second time.
	f.log.LogAttrs(context.Background(), level, "execution", attrs...)
}

// Fingerprint identifies a decoded request for idempotency: the same
// execution_id with another request is a conflict, not a replay.
func Fingerprint(req *Request) string {
	if req == nil {
		return ""
	}
	b, _ := json.Marshal(req)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// nopMetrics is used when Deps.Metrics is nil.
type nopMetrics struct{}

func (nopMetrics) Execution(string, string, string) {}
func (nopMetrics) Stage(string, time.Duration)      {}
func (nopMetrics) PolicyEval(time.Duration)         {}
func (nopMetrics) QuotaRefusal(string, string)      {}
func (nopMetrics) SandboxCrash()                    {}
func (nopMetrics) SyscallDenied(string)             {}
func (nopMetrics) EgressDenied(string)              {}
func (nopMetrics) SetQueue(int, int)                {}
