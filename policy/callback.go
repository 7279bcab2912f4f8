package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/rego"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// CallbackInput is the document a callback URL is decided on
// (data.execgate.main.callback): the tenant and subject as in Input, and
// the callback.
type CallbackInput struct {
	Version  int           `json:"version"`
	Tenant   TenantInput   `json:"tenant"`
	Subject  SubjectInput  `json:"subject"`
	Callback CallbackField `json:"callback"`
}

// CallbackField is a parsed callback URL: Host lower-case, Port explicit.
type CallbackField struct {
	URL    string `json:"url"`
	Scheme string `json:"scheme"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
}

// CallbackDecision is the answer for one callback URL. Deny always carries
// Reasons.
type CallbackDecision = ToolCallDecision

// DecideCallback evaluates the callback policy for in. As with Decide, an
// undefined or malformed answer is an error, never an allow; the returned
// decision carries a fresh ID either way.
func (e *Engine) DecideCallback(ctx context.Context, in CallbackInput) (CallbackDecision, error) {
	s := e.current.Load()
	d := CallbackDecision{ID: newID()}
	ctx, span := tracer.Start(ctx, "policy.decide_callback")
	defer span.End()
	span.SetAttributes(attribute.String("execgate.decision.id", d.ID), attribute.String("execgate.callback_host", in.Callback.Host))
	if in.Version == 0 {
		in.Version = InputVersion
	}
	in.Subject.Roles = nonNil(in.Subject.Roles)
	if in.Tenant.Data == nil {
		in.Tenant.Data = map[string]any{}
	}
	rs, err := s.cbQ.Eval(ctx, rego.EvalInput(in), rego.EvalTime(e.now()))
	if err == nil && (len(rs) == 0 || len(rs[0].Expressions) == 0) {
		err = ErrUndefined
	}
	if err == nil {
		err = decodeVerdict(rs[0].Expressions[0].Value, CallbackQuery, &d)
	}
	if err != nil {
		if err != ErrUndefined {
			err = &EvalError{Err: err}
		}
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		return d, err
	}
	span.SetAttributes(attribute.Bool("execgate.decision.allow", d.Allow))
	return d, nil
}
