package gateway

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/tenancy"
)

// handleExecute is POST /v1/execute: the execute flow (package execution)
// on the request's body, then the response with its execution headers.
func (s *Server) handleExecute(c *gin.Context) {
	if eventStreamWanted(c) { // live output (events.go)
		s.executeEvents(c)
		return
	}
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	a, _ := c.Value(keyAccess).(Access) // no row: no grants, refused
	out := s.flow.Run(c.Request.Context(), execution.Call{
		Principal: p, Grants: a.Grants, ID: c.GetString(keyExecutionID),
		Body:   func() ([]byte, error) { return readBody(c.Request, c.Writer, s.caps.Body) },
		Decode: s.decodeExecute,
	})
	defer out.Release()
	c.Set(keyExecutionID, out.Envelope.ExecutionID)
	if out.RetryAfter > 0 {
		c.Header("Retry-After", execution.RetryAfterSeconds(out.RetryAfter))
	}
	c.Header("X-Execution-Id", out.Envelope.ExecutionID)
	c.Header("X-Execution-Status", out.Envelope.ExecutionStatus())
	writeEnvelope(c, out.Status, out.Body)
}

// decodeExecute is the strict decoder of an execute body under the
// server's caps, for every route that takes one.
func (s *Server) decodeExecute(body []byte) (*ExecuteRequest, error) {
	return decode.Execute(body, s.caps)
}

// handleValidate is POST /v1/validate: {source, entrypoint} → {valid,
// errors}. It goes through the run queue and quota like a run (it is one).
func (s *Server) handleValidate(c *gin.Context) {
	ctx := c.Request.Context()
	p, _ := tenancy.PrincipalFrom(ctx)
	tenant, err := s.authorizeTenant(c, p, "")
	if err != nil {
		s.fail(c, err)
		return
	}
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	if err != nil {
		s.fail(c, err)
		return
	}
	req, err := decode.Validate(body, s.caps)
	if err != nil {
		s.fail(c, err)
		return
	}
	resp, err := s.flow.Validate(ctx, tenant, req)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, resp)
}
