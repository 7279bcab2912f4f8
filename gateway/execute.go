package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"time"

	"github.com/gin-gonic/gin"
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

// execution is the state of one POST /v1/execute as it goes through the
// flow of DESIGN §1; what it holds at the end becomes the audit record.
type execution struct {
	id        string
	principal tenancy.Principal
	req       *ExecuteRequest
	srcSHA    string
	decision  *policy.Decision
	limits    sandbox.Limits // the decided limits with the runner's defaults
	policySC  trace.SpanContext
	quota     audit.Quota
	result    *sandbox.Result
	replayed  bool
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

// expected5xx are the 5xx answers that describe the host's state, not a
// bug; they are not logged as errors per request (metrics count them).
func expected5xx(typ string) bool {
	return typ == TypeSandboxUnavailable || typ == TypeOverloaded || typ == TypeQuotaUnavailable
}

// executeCall is one execute request as it enters the flow: from POST
// /v1/execute, or from an MCP tool call (mcp.go), which share everything
// after the transport.
type executeCall struct {
	principal tenancy.Principal
	// grants are who may run (the /v1/execute access row).
	grants []tenancy.Grant
	// id is the execution id until the body names one.
	id string
	// body returns the request body, read under the body cap.
	body func() ([]byte, error)
}

// executeOutcome is what the flow answers: the HTTP status, the envelope
// (encoded once), and the Retry-After of a refusal (0: none).
type executeOutcome struct {
	status     int
	env        *Envelope
	body       *encodedEnvelope
	retryAfter time.Duration
	// release gives back the run's output memory; call it once the answer
	// is sent. Never nil.
	release func()
}

// handleExecute is POST /v1/execute: runExecute, then the response.
func (s *Server) handleExecute(c *gin.Context) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	a, _ := c.Value(keyAccess).(Access) // no row: no grants, refused
	out := s.runExecute(c.Request.Context(), executeCall{
		principal: p, grants: a.Grants, id: c.GetString(keyExecutionID),
		body: func() ([]byte, error) { return readBody(c.Request, c.Writer, s.caps.body) },
	})
	defer out.release()
	c.Set(keyExecutionID, out.env.ExecutionID)
	if out.retryAfter > 0 {
		c.Header("Retry-After", retryAfterSeconds(out.retryAfter))
	}
	c.Header("X-Execution-Id", out.env.ExecutionID)
	c.Header("X-Execution-Status", executionStatus(out.env))
	writeEnvelope(c, out.status, out.body)
}

// runExecute is the execute flow of DESIGN §1: decode → tenancy →
// idempotency → policy → queue → quota → run → settle → audit. Every call
// that got past authentication leaves exactly one audit record, written
// before the answer; if that write fails the answer is 500 AuditError.
func (s *Server) runExecute(ctx context.Context, call executeCall) *executeOutcome {
	start := time.Now()
	p := call.principal
	x := &execution{id: call.id, principal: p, quota: audit.Quota{Outcome: audit.QuotaSkipped}}
	out := &executeOutcome{release: func() {
		if x.releaseOutput != nil {
			x.releaseOutput()
		}
	}}

	var claimed *IdempotencyKey
	status, env, err := s.execute(ctx, call, x, &claimed)
	if err != nil {
		ae := toAPIError(err)
		if ae.Status >= 500 && !expected5xx(ae.Type) {
			s.log.ErrorContext(ctx, "execute failed", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, p.TenantID,
				"error_type", ae.Type, "decision_id", x.failedDecisionID, "err", err)
		}
		out.retryAfter = ae.RetryAfter
		status, env = ae.Status, s.refusalEnvelope(ctx, x, ae)
		if x.decision != nil {
			env.Decision = envelopeDecision(x.decision, x.limits)
		}
	}

	actx, span := s.tracer.Start(ctx, telemetry.StageAudit)
	astart := time.Now()
	aerr := s.d.Audit.Record(actx, s.auditRecord(ctx, x, status, env))
	s.d.Metrics.Stage(telemetry.StageAudit, time.Since(astart))
	if aerr != nil {
		span.RecordError(aerr)
		span.SetStatus(codes.Error, "audit write failed")
		ae := toAPIError(fmt.Errorf("%w: %w", errAudit, aerr))
		s.log.ErrorContext(ctx, "audit write failed", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, p.TenantID, "err", aerr)
		out.retryAfter = 0
		status, env = ae.Status, s.refusalEnvelope(ctx, x, ae)
	}
	span.End()

	if env.Logs == nil { // a remembered response from before logs existed
		env.Logs = []sandbox.LogLine{}
	}
	body, err := encodeEnvelope(env)
	if err != nil { // cannot happen for these types; keep the contract anyway
		body = &encodedEnvelope{head: []byte(`{"status":"error"}`), size: len(`{"status":"error"}`)}
	}
	if claimed != nil {
		// Remember runs only; a refusal leaves the id free for a retry.
		bg := context.WithoutCancel(ctx)
		var ierr error
		if status == http.StatusOK && !x.replayed {
			ierr = s.idem.Complete(bg, *claimed, StoredResponse{Fingerprint: fingerprint(x.req), Status: status, Outcome: executionStatus(env), Body: body.bytes()})
		} else {
			ierr = s.idem.Abandon(bg, *claimed)
		}
		if ierr != nil {
			s.log.WarnContext(ctx, "idempotency store", telemetry.KeyExecutionID, x.id, "err", ierr)
		}
	}

	errType := ""
	if env.Error != nil {
		errType = env.Error.Type
	}
	s.d.Metrics.Execution(p.TenantID, string(env.Status), errType)
	s.d.Metrics.Stage(telemetry.StageTotal, time.Since(start))
	if errType == sandbox.ErrSandboxCrashed {
		s.d.Metrics.SandboxCrash()
	}
	s.logExecution(x, status, env, time.Since(start))
	out.status, out.env, out.body = status, env, body
	return out
}

// refusalEnvelope is the envelope of a call refused before (or instead of)
// a run.
func (s *Server) refusalEnvelope(ctx context.Context, x *execution, ae *apiError) *Envelope {
	body := ae.body()
	return &Envelope{
		ExecutionID: x.id,
		TenantID:    x.principal.TenantID,
		Status:      sandbox.StatusError,
		Error:       &body,
		Logs:        []sandbox.LogLine{},
		TraceID:     traceID(ctx),
	}
}

// execute runs the flow up to the response. It returns the 200 envelope of
// a run (or replay) or the error that refused the request. *claimed is set
// when this request holds an idempotency claim the caller must settle.
func (s *Server) execute(ctx context.Context, call executeCall, x *execution, claimed **IdempotencyKey) (int, *Envelope, error) {
	dstart := time.Now()
	body, err := call.body()
	if err != nil {
		return 0, nil, err
	}
	req, err := decodeExecute(body, s.caps)
	s.d.Metrics.Stage(telemetry.StageDecode, time.Since(dstart))
	if err != nil {
		return 0, nil, err
	}
	x.req = req
	sum := sha256.Sum256([]byte(req.Source))
	x.srcSHA = hex.EncodeToString(sum[:])
	if req.ExecutionID != "" {
		x.id = req.ExecutionID
	}

	tenant, err := s.d.Tenants.Authorize(x.principal, req.TenantID, call.grants)
	if err != nil {
		return 0, nil, err
	}

	if req.ExecutionID != "" {
		key := IdempotencyKey{TenantID: tenant.ID, ExecutionID: req.ExecutionID}
		stored, ok, err := s.idem.Claim(ctx, key, fingerprint(req))
		switch {
		case errors.Is(err, ErrIdempotencyConflict):
			return 0, nil, badRequest("execution_id", "%q was already used for a different request within the idempotency window", req.ExecutionID)
		case err != nil:
			return 0, nil, err
		case ok:
			*claimed = &key
		default:
			if x.releaseOutput, err = s.output.acquireReplay(ctx, len(stored.Body)); err != nil {
				return 0, nil, err
			}
			var env Envelope
			if err := json.Unmarshal(stored.Body, &env); err != nil {
				return 0, nil, fmt.Errorf("decoding remembered response: %w", err)
			}
			x.replayed = true
			if env.Decision != nil {
				x.decision = &policy.Decision{ID: env.Decision.ID, Allow: true, NetworkAccess: env.Decision.NetworkAccess,
					Limits: policy.Limits(env.Decision.Limits), Egress: env.Decision.Egress, Isolation: env.Decision.Isolation}
				x.limits = env.Decision.Limits
			}
			return stored.Status, &env, nil
		}
	}

	pkgs, failure, err := s.environment(ctx, req.Requirements, req.RequirementsLock, req.EnvironmentID)
	if err != nil {
		return 0, nil, err
	}
	if failure != nil { // the requirements cannot be resolved: nothing to decide or run
		return http.StatusOK, s.dependencyEnvelope(ctx, x, tenant, failure), nil
	}
	x.env = pkgs

	dec, err := s.decide(ctx, x, tenant)
	if err != nil {
		return 0, nil, err
	}

	tk := s.queue.enter(tenant.ID)
	if tk == nil {
		return 0, nil, errOverloaded
	}
	defer tk.release()

	adm, err := s.admit(ctx, x, tenant)
	if err != nil {
		return 0, nil, err
	}
	if x.releaseOutput, err = s.output.acquire(ctx, x.limits); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		return 0, nil, err
	}
	if err := tk.acquire(ctx); err != nil {
		_ = adm.Release(context.WithoutCancel(ctx))
		return 0, nil, err
	}

	res, err := s.runAdmitted(ctx, x, tenant, dec, adm)
	tk.release()
	if err != nil {
		return 0, nil, err
	}
	x.result = &res
	if res.Status == sandbox.StatusOK {
		s.ready.succeeded(s.now())
	}
	for _, a := range res.Egress {
		if !a.Allowed {
			s.d.Metrics.EgressDenied(tenant.ID)
		}
	}
	if res.ErrorType() == sandbox.ErrSyscallDenied {
		s.d.Metrics.SyscallDenied(res.DeniedSyscall)
	}

	sctx, span := s.tracer.Start(ctx, telemetry.StageSettle)
	sstart := time.Now()
	// The run happened and its answer stands; if the backend is down the
	// charge is retried in the background (settle.go).
	if err := s.settle.settle(sctx, adm, res.Usage.CPUMS); err != nil {
		span.RecordError(err)
	}
	s.d.Metrics.Stage(telemetry.StageSettle, time.Since(sstart))
	span.End()

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
		TraceID:     traceID(ctx),
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
	return http.StatusOK, env, nil
}

// decide asks the policy. Any error is a PolicyError; a deny carries the
// policy's reasons.
func (s *Server) decide(ctx context.Context, x *execution, tenant tenancy.Tenant) (policy.Decision, error) {
	req := x.req
	preq := policyRequest(req)
	preq.Packages = policyPackages(x.env)
	in := policy.BuildInput(tenant, x.principal, preq)

	pctx, span := s.tracer.Start(ctx, telemetry.StagePolicy)
	defer span.End()
	x.policySC = span.SpanContext()
	start := time.Now()
	dec, err := s.d.Policy.Decide(pctx, in)
	d := time.Since(start)
	s.d.Metrics.PolicyEval(d)
	s.d.Metrics.Stage(telemetry.StagePolicy, d)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		x.failedDecisionID = dec.ID
		return policy.Decision{}, fmt.Errorf("%w: %w", errPolicy, err)
	}
	if dec.ID == "" {
		dec.ID = newID()
	}
	x.decision = &dec
	x.limits = sandbox.Limits(dec.Limits).WithDefaults()
	span.SetAttributes(
		attribute.String("execgate.decision_id", dec.ID),
		attribute.Bool("execgate.allow", dec.Allow),
		attribute.String("execgate.network_access", dec.NetworkAccess),
	)
	if !dec.Allow {
		reasons := dec.Reasons
		if len(reasons) == 0 {
			reasons = []string{"denied by policy"}
		}
		return dec, &policyDenied{reasons: reasons}
	}
	if x.env != nil && !dec.RequirementsAllowed {
		// The policy allowed the run but not its requirements: never install
		// what was not granted.
		return dec, &policyDenied{reasons: []string{"requirements are not allowed for this tenant"}}
	}
	if req.Mode == "test" {
		// Capability testing never reaches the network (DESIGN §12.6).
		x.decision.NetworkAccess = string(sandbox.NetworkNone)
		x.decision.Egress = policy.Egress{Allow: []string{}}
	}
	return *x.decision, nil
}

// policyRequest is what the policy sees of req (BuildInput hashes and
// measures the source and args; they never enter the input).
func policyRequest(req *ExecuteRequest) policy.Request {
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
		Isolation:     req.Isolation,
	}
	if req.Egress != nil {
		preq.EgressAllow = req.Egress.Allow
	}
	return preq
}

// admit asks the quota backend for this run.
func (s *Server) admit(ctx context.Context, x *execution, tenant tenancy.Tenant) (*quota.Admission, error) {
	qctx, span := s.tracer.Start(ctx, telemetry.StageQuota)
	defer span.End()
	start := time.Now()
	adm, err := s.d.Quota.Admit(qctx, quota.AdmitRequest{
		TenantID:     tenant.ID,
		ExecutionID:  x.id,
		Limits:       tenant.Quota,
		CPUReserveMS: x.limits.CPUMS,
	})
	s.d.Metrics.Stage(telemetry.StageQuota, time.Since(start))
	if err == nil {
		x.quota = audit.Quota{Outcome: audit.QuotaAdmitted}
		return adm, nil
	}
	span.RecordError(err)
	var ex *quota.ExceededError
	switch {
	case errors.As(err, &ex):
		x.quota = audit.Quota{Outcome: audit.QuotaExceeded, Kind: string(ex.Kind), RetryAfterMS: ex.RetryAfter.Milliseconds()}
		if ex.Kind == quota.KindBudget {
			x.quota.Outcome = audit.QuotaBudgetExhausted
		}
		s.d.Metrics.QuotaRefusal(tenant.ID, string(ex.Kind))
	case errors.Is(err, quota.ErrUnavailable):
		x.quota = audit.Quota{Outcome: audit.QuotaUnavailable}
		s.d.Metrics.QuotaRefusal(tenant.ID, "unavailable")
	default:
		x.quota = audit.Quota{Outcome: audit.QuotaUnavailable}
	}
	return nil, err
}

// runAdmitted runs the tool in the sandbox. A lost quota lease (the slot
// may be someone else's now) cancels the run.
func (s *Server) runAdmitted(ctx context.Context, x *execution, tenant tenancy.Tenant, dec policy.Decision, adm *quota.Admission) (sandbox.Result, error) {
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
		Isolation:   dec.Isolation,
	}
	if spec.Network == "" {
		spec.Network = sandbox.NetworkNone
	}
	if dec.RequirementsAllowed && x.env != nil {
		// Installed here (once per environment; a hit when prepared), so
		// the runner only finds it.
		_, _, failure, err := s.d.Environments.Prepare(ctx, *x.env)
		if err != nil {
			return sandbox.Result{}, err
		}
		if failure != nil {
			return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: failure}, nil
		}
		spec.Lock = x.env.Lock
	}
	if x.bridge = s.toolBridge(x, tenant, dec); x.bridge != nil {
		spec.Bridge = x.bridge
	}
	if req.Fixtures != nil {
		spec.Variables = req.Fixtures.Variables
		if len(req.Fixtures.Tools) > 0 {
			b, err := json.Marshal(req.Fixtures.Tools)
			if err != nil {
				return sandbox.Result{}, fmt.Errorf("encoding tool fixtures: %w", err)
			}
			spec.ToolFixtures = b
		}
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

	runCtx, span := s.tracer.Start(rctx, telemetry.StageRun)
	defer span.End()
	start := time.Now()
	res, err := s.d.Runner.Run(runCtx, spec)
	s.d.Metrics.Stage(telemetry.StageRun, time.Since(start))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "sandbox unavailable")
		if rerr := adm.Release(context.WithoutCancel(ctx)); rerr != nil {
			s.log.WarnContext(ctx, "quota release failed", telemetry.KeyExecutionID, x.id, "err", rerr)
		}
		return sandbox.Result{}, err
	}
	select {
	case <-lost:
		s.log.ErrorContext(ctx, "quota lease lost during the run; the run was cancelled", telemetry.KeyExecutionID, x.id, telemetry.KeyTenantID, tenant.ID)
	default:
	}
	span.SetAttributes(attribute.String("execgate.status", string(res.Status)), attribute.String("execgate.error_type", res.ErrorType()))
	if res.Status != sandbox.StatusOK {
		span.SetStatus(codes.Error, res.ErrorType())
	}
	return res, nil
}

func envelopeDecision(d *policy.Decision, limits sandbox.Limits) *EnvelopeDecision {
	if d == nil {
		return nil
	}
	eg := d.Egress
	if eg.Allow == nil {
		eg.Allow = []string{}
	}
	iso := d.Isolation
	if iso == "" {
		iso = sandbox.IsolationJail
	}
	return &EnvelopeDecision{ID: d.ID, NetworkAccess: d.NetworkAccess, Limits: limits, Egress: eg, Isolation: iso}
}

// auditRecord is the one audit record of this request.
func (s *Server) auditRecord(ctx context.Context, x *execution, status int, env *Envelope) audit.Record {
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
func (s *Server) logExecution(x *execution, status int, env *Envelope, d time.Duration) {
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
	s.log.LogAttrs(context.Background(), level, "execution", attrs...)
}

// fingerprint identifies a decoded request for idempotency: the same
// execution_id with another request is a conflict, not a replay.
func fingerprint(req *ExecuteRequest) string {
	if req == nil {
		return ""
	}
	b, _ := json.Marshal(req)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// dependencyEnvelope is the answer to requirements that cannot be
// resolved: a run outcome (200, DependencyError with uv's output), though
// nothing was decided or run.
func (s *Server) dependencyEnvelope(ctx context.Context, x *execution, tenant tenancy.Tenant, failure *sandbox.ErrorInfo) *Envelope {
	return &Envelope{
		ExecutionID: x.id,
		TenantID:    tenant.ID,
		Status:      sandbox.StatusError,
		Error:       &ErrorBody{Type: failure.Type, Message: failure.Message, Traceback: failure.Traceback},
		Logs:        []sandbox.LogLine{},
		TraceID:     traceID(ctx),
	}
}
