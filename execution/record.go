package execution

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// The last stage of Run: what every request leaves behind, whatever its
// answer, and the envelopes it answers with.

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
// (or of a run that may have run: OutcomeUnknown) is kept for the window; a
// refusal leaves the id free for a retry.
func (f *Flow) remember(ctx context.Context, x *state, status int, env *Envelope, body *EncodedEnvelope) {
	if x.claimed == nil {
		return
	}
	bg := context.WithoutCancel(ctx)
	var err error
	keep := status == http.StatusOK || env.Error != nil && keepsClaim(env.Error.Type)
	if keep && !x.replayed {
		err = f.idem.Complete(bg, *x.claimed, StoredResponse{Fingerprint: Fingerprint(x.req), Status: status, Outcome: env.ExecutionStatus(), Body: body.Bytes()})
	} else {
		err = f.idem.Abandon(bg, *x.claimed)
	}
	if err != nil {
		f.log.WarnContext(ctx, "idempotency store", telemetry.KeyExecutionID, x.id, "err", err)
	}
}

// runEnvelope is the answer of a run that happened: RunEnvelope with the
// decision and the trace.
func runEnvelope(ctx context.Context, x *state, tenant tenancy.Tenant, res sandbox.Result) *Envelope {
	env := RunEnvelope(x.id, tenant.ID, res)
	env.Decision = envelopeDecision(x.decision, x.limits)
	env.TraceID = TraceID(ctx)
	return env
}

// RunEnvelope is the envelope of a run that happened: res as the caller
// sees it (egress attempts bounded, logs always an array, an error status
// always with an error, no result unless ok). Decision and TraceID are left
// for the caller: the flow sets them, `execgate run` has neither.
func RunEnvelope(executionID, tenantID string, res sandbox.Result) *Envelope {
	env := &Envelope{
		ExecutionID: executionID,
		TenantID:    tenantID,
		Status:      res.Status,
		Result:      res.Result,
		Stdout:      res.Stdout,
		Stderr:      res.Stderr,
		Truncated:   res.Truncated,
		Usage:       res.Usage,
		Logs:        res.Logs,
		ToolCalls:   envelopeToolCalls(res.ToolCalls),
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
	return RefusalEnvelope(ctx, x.id, x.principal.TenantID, e)
}

// RefusalEnvelope is the envelope of execution id of tenant (empty when
// not known yet) refused with e before a run: status error, no result, no
// decision, an empty log list.
func RefusalEnvelope(ctx context.Context, id, tenant string, e *Error) *Envelope {
	body := e.Body()
	return &Envelope{
		ExecutionID: id,
		TenantID:    tenant,
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
	if x.req != nil {
		r.Language = x.req.Language
	}
	if x.env != nil {
		r.EnvironmentID = x.env.ID
	}
	if x.decision != nil {
		r.Decision = &audit.Decision{
			ID:            x.decision.ID,
			Allow:         x.decision.Allow,
			Reasons:       x.decision.Reasons,
			NetworkAccess: x.decision.NetworkAccess,
			Limits:        x.limits,
			Egress:        x.decision.Egress.Allow,
			Isolation:     envelopeDecision(x.decision, x.limits).Isolation,
			Runtime:       x.decision.Runtime,
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
		r.Artifacts = auditArtifacts(x.result.Artifacts)
		r.ArtifactsRefused = x.result.Truncated.ArtifactsDropped
	}
	if x.req != nil {
		r.Files = auditFiles(x.req.Files)
	}
	r.Secrets = x.secrets
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
