package gateway

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/telemetry"
)

// Traces keeps the recent spans of each tenant's traces (*telemetry.SpanRing,
// when no OTLP endpoint takes them).
type Traces interface {
	Trace(id trace.TraceID, tenants []string) (telemetry.Trace, bool)
}

// TraceResponse is GET /v1/admin/traces/{trace_id}.
type TraceResponse struct {
	TraceID string `json:"trace_id"`
	// Tenant is the tenant whose spans these are; "" when an admin asked
	// for every tenant's.
	Tenant string `json:"tenant"`
	telemetry.Trace
}

// handleTraces is GET /v1/admin/traces/{trace_id}?tenant=: the spans this
// gateway kept of a trace (an audit record's or an envelope's trace_id),
// only those of the tenants the caller reaches. tenant defaults to the
// caller's own; an admin without tenant sees every tenant's spans.
func (s *Server) handleTraces(c *gin.Context) {
	for key := range c.Request.URL.Query() {
		if key != "tenant" {
			s.fail(c, badRequest(key, "unknown query parameter (tenant)"))
			return
		}
	}
	id, idErr := trace.TraceIDFromHex(c.Param("trace_id"))
	if idErr != nil || id.String() != c.Param("trace_id") {
		s.fail(c, badRequest("trace_id", "must be 32 lowercase hex digits (an envelope's or audit record's trace_id)"))
		return
	}
	target, err := s.queryTenant(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	var tenants []string // nil: every tenant
	if target != "" {
		tenants = []string{target}
	}
	if s.d.Traces == nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound,
			Message: "this gateway keeps no spans: they go to the OTLP collector (OTEL_EXPORTER_OTLP_ENDPOINT); look the trace up there"})
		return
	}
	t, ok := s.d.Traces.Trace(id, tenants)
	if !ok {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound,
			Message: "no spans of trace " + id.String() + " are kept for this tenant (only the recent traces of each tenant are, on the gateway that served them)"})
		return
	}
	writeJSON(c, http.StatusOK, TraceResponse{TraceID: id.String(), Tenant: target, Trace: t})
}
