package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

// Admin API. Who may call each route, for which tenants, is the access
// table (access.go): admins are platform-wide; tenant-admin, auditor and
// policy-author reach their own tenant only and are refused (403) for any
// other before anything of it is looked up.

func (s *Server) tenantParam(c *gin.Context) (tenancy.Tenant, bool) {
	t, err := s.d.Tenants.Lookup(c.Param("id"))
	if err != nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "tenant " + quoteID(c.Param("id")) + " is not configured", Err: err})
		return tenancy.Tenant{}, false
	}
	return t, true
}

func quoteID(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + s + `"`
}

// handleListTenants is GET /v1/admin/tenants.
func (s *Server) handleListTenants(c *gin.Context) {
	ctx := c.Request.Context()
	resp := TenantsResponse{Tenants: []TenantInfo{}}
	for _, t := range s.d.Tenants.List() {
		eff, err := s.d.Quota.Effective(ctx, t.ID, t.Quota)
		if err != nil {
			s.fail(c, err)
			return
		}
		_, over, err := s.d.Quota.Override(ctx, t.ID)
		if err != nil {
			s.fail(c, err)
			return
		}
		pol := t.Policy
		if pol == nil {
			pol = map[string]any{}
		}
		resp.Tenants = append(resp.Tenants, TenantInfo{ID: t.ID, Plan: t.Plan, Quota: eff, Policy: pol, Override: over})
	}
	writeJSON(c, http.StatusOK, resp)
}

func (s *Server) quotaResponse(ctx context.Context, t tenancy.Tenant) (*QuotaResponse, error) {
	resp := &QuotaResponse{TenantID: t.ID, Configured: t.Quota}
	o, ok, err := s.d.Quota.Override(ctx, t.ID)
	if err != nil {
		return nil, err
	}
	if ok {
		resp.Override = &o
	}
	if resp.Effective, err = s.d.Quota.Effective(ctx, t.ID, t.Quota); err != nil {
		return nil, err
	}
	return resp, nil
}

// handleGetQuota is GET /v1/admin/tenants/{id}/quota.
func (s *Server) handleGetQuota(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok {
		return
	}
	resp, err := s.quotaResponse(c.Request.Context(), t)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, resp)
}

// handlePutQuota is PUT /v1/admin/tenants/{id}/quota: the body is the
// tenant's quota object (DESIGN §13); it becomes the override.
func (s *Server) handlePutQuota(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok {
		return
	}
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	if err != nil {
		s.fail(c, err)
		return
	}
	l, err := decode.Quota(body)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	if err := s.d.Quota.SetOverride(ctx, t.ID, l); err != nil {
		if errors.Is(err, quota.ErrInvalid) {
			s.fail(c, badRequest("body", "%v", err))
			return
		}
		s.fail(c, err)
		return
	}
	s.log.InfoContext(ctx, "quota override set", "tenant_id", t.ID, "by", subject(ctx))
	resp, err := s.quotaResponse(ctx, t)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, resp)
}

// handleDeleteQuota is DELETE /v1/admin/tenants/{id}/quota: drop the
// override, back to the configured quota.
func (s *Server) handleDeleteQuota(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	if err := s.d.Quota.ClearOverride(ctx, t.ID); err != nil {
		s.fail(c, err)
		return
	}
	s.log.InfoContext(ctx, "quota override cleared", "tenant_id", t.ID, "by", subject(ctx))
	resp, err := s.quotaResponse(ctx, t)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, resp)
}

// handleUsage is GET /v1/admin/tenants/{id}/usage.
func (s *Server) handleUsage(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok {
		return
	}
	u, err := s.d.Quota.Usage(c.Request.Context(), t.ID, t.Quota)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeJSON(c, http.StatusOK, u)
}

// handleEvaluate is POST /v1/admin/policy/evaluate: the decision for an
// execute request as tenant_id with roles (default [executor]), and the
// input it was made on. Nothing is run, nothing is admitted.
func (s *Server) handleEvaluate(c *gin.Context) {
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	if err != nil {
		s.fail(c, err)
		return
	}
	tenantID, roles, req, err := decode.Evaluate(body, s.caps)
	if err != nil {
		s.fail(c, err)
		return
	}
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	if _, err := s.authorizeTenant(c, p, tenantID); err != nil {
		s.fail(c, err)
		return
	}
	t, err := s.d.Tenants.Lookup(tenantID)
	if err != nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "tenant " + quoteID(tenantID) + " is not configured", Err: err})
		return
	}
	if roles == nil {
		roles = []string{tenancy.RoleExecutor}
	}
	ctx := c.Request.Context()
	caller := tenancy.Principal{TenantID: t.ID, Subject: subject(ctx), Roles: roles}
	in, dec, err := s.flow.Decide(ctx, caller, t, req)
	if err != nil {
		var denied *execution.PolicyDeniedError
		if !errors.As(err, &denied) {
			s.fail(c, err)
			return
		}
	}
	// The document has the decision's shape: lists are lists, never null.
	if dec.Reasons == nil {
		dec.Reasons = []string{}
	}
	if dec.Egress.Allow == nil {
		dec.Egress.Allow = []string{}
	}
	if dec.Tools == nil {
		dec.Tools = []string{}
	}
	writeJSON(c, http.StatusOK, EvaluateResponse{Decision: dec, Input: in})
}

func subject(ctx context.Context) string {
	p, _ := tenancy.PrincipalFrom(ctx)
	return p.Subject
}
