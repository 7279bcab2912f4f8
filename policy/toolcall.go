package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/rego"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ToolCallInput is the document one tool call is decided on
// (data.execgate.main.tool_call): the run's tenant and subject as in Input,
// and the call.
type ToolCallInput struct {
	Version int          `json:"version"`
	Tenant  TenantInput  `json:"tenant"`
	Subject SubjectInput `json:"subject"`
	Call    CallInput    `json:"call"`
}

// CallInput describes one tool call of a run; never its arguments.
type CallInput struct {
	Tool       string `json:"tool"`        // "<server>.<name>"
	Server     string `json:"server"`      // the tool server's name
	Name       string `json:"name"`        // the tool's name on its server
	ArgsBytes  int    `json:"args_bytes"`  // size of the JSON arguments
	Index      int    `json:"index"`       // calls the run made before this one
	ElapsedMS  int64  `json:"elapsed_ms"`  // since the run started
	DecisionID string `json:"decision_id"` // the run's decision
	// Counts are the run's earlier calls per tool (allowed or not).
	Counts map[string]int `json:"counts"`
}

// ToolCallDecision is the answer for one call. Deny always carries Reasons.
type ToolCallDecision struct {
	ID      string   `json:"id"`
	Allow   bool     `json:"allow"`
	Reasons []string `json:"reasons"`
}

// DecideToolCall evaluates the tool call policy for in. As with Decide, an
// undefined or malformed answer is an error, never an allow; the returned
// decision carries a fresh ID either way.
func (e *Engine) DecideToolCall(ctx context.Context, in ToolCallInput) (ToolCallDecision, error) {
	s := e.current.Load()
	d := ToolCallDecision{ID: newID()}
	ctx, span := tracer.Start(ctx, "policy.decide_tool_call")
	defer span.End()
	span.SetAttributes(
		attribute.String("execgate.decision.id", d.ID),
		attribute.String("execgate.tool", in.Call.Tool),
	)
	if in.Version == 0 {
		in.Version = InputVersion
	}
	if in.Call.Counts == nil {
		in.Call.Counts = map[string]int{}
	}
	in.Subject.Roles = nonNil(in.Subject.Roles)
	if in.Tenant.Data == nil {
		in.Tenant.Data = map[string]any{}
	}
	return d, e.verdict(ctx, span, s.callQ, in, ToolCallQuery, &d)
}

// verdict evaluates q on in into d (a tool call's or a callback's allow,
// reasons): an undefined or malformed answer is an error, never an allow,
// and either lands on span.
func (e *Engine) verdict(ctx context.Context, span trace.Span, q rego.PreparedEvalQuery, in any, query string, d *ToolCallDecision) error {
	rs, err := q.Eval(ctx, rego.EvalInput(in), rego.EvalTime(e.now()))
	if err == nil && (len(rs) == 0 || len(rs[0].Expressions) == 0) {
		err = ErrUndefined
	}
	if err == nil {
		err = decodeVerdict(rs[0].Expressions[0].Value, query, d)
	}
	if err != nil {
		if err != ErrUndefined {
			err = &EvalError{Err: err}
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		return err
	}
	span.SetAttributes(attribute.Bool("execgate.decision.allow", d.Allow))
	return nil
}

// decodeVerdict decodes an {allow, reasons} answer of query into d.
func decodeVerdict(v any, query string, d *ToolCallDecision) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: %s is %T", ErrMalformed, query, v)
	}
	allow, ok := m["allow"].(bool)
	if !ok {
		return fmt.Errorf("%w: %s.allow is not a boolean", ErrMalformed, query)
	}
	reasons, _ := m["reasons"].([]any)
	for _, r := range reasons {
		s, ok := r.(string)
		if !ok {
			return fmt.Errorf("%w: %s.reasons holds a %T", ErrMalformed, query, r)
		}
		d.Reasons = append(d.Reasons, s)
	}
	if !allow && len(d.Reasons) == 0 {
		d.Reasons = []string{"denied by policy"}
	}
	if allow && len(d.Reasons) > 0 {
		return fmt.Errorf("%w: %s allows with reasons", ErrMalformed, query)
	}
	d.Allow = allow
	if d.Reasons == nil {
		d.Reasons = []string{}
	}
	return nil
}
