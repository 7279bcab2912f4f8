package gateway

import "github.com/execgate/execgate/sandbox"

// RunEnvelope is the envelope of a run that happened: res as the caller
// sees it (egress attempts bounded, logs always an array, an error status
// always with an error, no result unless ok). Decision and TraceID are left
// for the caller: the gateway sets them, `execgate run` has neither.
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
