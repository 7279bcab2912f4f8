package policy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
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
	return d, e.verdict(ctx, span, s.cbQ, in, CallbackQuery, &d)
}
