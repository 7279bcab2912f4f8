package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/tenancy"
)

// AuditSearcher finds audit records (*audit.Log, whose file sink it reads
// backwards, bounded).
type AuditSearcher interface {
	Search(ctx context.Context, q audit.Query) (audit.SearchResult, error)
}

// AuditResponse is GET /v1/admin/audit.
type AuditResponse struct {
	audit.SearchResult
	// Tenant is the tenant searched; "" when an admin searched every tenant.
	Tenant string `json:"tenant"`
}

// handleAudit is GET /v1/admin/audit?tenant=&status=&error_type=&execution_id=&since=&limit=.
// tenant defaults to the caller's own; an admin without tenant searches
// every tenant. The access row (TenantFromQuery) says who reaches which.
func (s *Server) handleAudit(c *gin.Context) {
	if s.d.AuditSearch == nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "audit search is not available (no audit file)"})
		return
	}
	for key := range c.Request.URL.Query() {
		switch key {
		case "tenant", "status", "error_type", "execution_id", "since", "limit":
		default:
			s.fail(c, badRequest(key, "unknown query parameter (tenant, status, error_type, execution_id, since, limit)"))
			return
		}
	}
	q := audit.Query{ErrorType: c.Query("error_type"), ExecutionID: c.Query("execution_id"), Status: c.Query("status")}
	if q.Status != "" && q.Status != "ok" && q.Status != "error" {
		s.fail(c, badRequest("status", "must be ok or error"))
		return
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > audit.MaxSearchLimit {
			s.fail(c, badRequest("limit", "must be an integer from 1 to %d", audit.MaxSearchLimit))
			return
		}
		q.Limit = n
	}
	if v := c.Query("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			s.fail(c, badRequest("since", "must be an RFC 3339 time (2026-12-01T15:00:00Z)"))
			return
		}
		q.Since = t
	}

	target, err := s.queryTenant(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if target != "" {
		q.Tenants = []string{target}
	}
	res, err := s.d.AuditSearch.Search(c.Request.Context(), q)
	if err != nil {
		if errors.Is(err, audit.ErrNoFile) {
			s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "audit search is not available: " + err.Error()})
			return
		}
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, AuditResponse{SearchResult: res, Tenant: target})
}

// queryTenant is the tenant a TenantFromQuery route reads for the caller:
// the tenant query parameter, else the caller's own, or "" (every tenant)
// for a role that reaches all of them. The error is a refusal to render:
// the route's access row does not reach that tenant (403), or an admin
// named one that is not configured (404).
func (s *Server) queryTenant(c *gin.Context) (string, error) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	target := c.Query("tenant")
	a, _ := c.Value(keyAccess).(Access)
	if target == "" {
		if _, err := s.d.Tenants.AuthorizeAll(p, a.Grants); err == nil {
			return "", nil
		}
		target = p.TenantID // a tenant-scoped role: its own tenant
	}
	if _, err := s.authorizeTenant(c, p, target); err != nil {
		return "", err
	}
	if _, err := s.d.Tenants.Lookup(target); err != nil {
		return "", &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "tenant " + quoteID(target) + " is not configured", Err: err}
	}
	return target, nil
}
