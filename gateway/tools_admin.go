package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// ToolServerStore keeps the tool servers added over the admin API
// (quota.ToolServerStore: the quota backend, so every replica sees them).
type ToolServerStore interface {
	SetToolServer(ctx context.Context, tenant, name string, doc []byte) error
	DeleteToolServer(ctx context.Context, tenant, name string) (bool, error)
}

var _ ToolServerStore = quota.ToolServerStore(nil)

// toolServersAvailable answers 404 when the gateway has no tool hub or no
// store for API servers.
func (s *Server) toolServersAvailable(c *gin.Context) bool {
	if s.d.Tools == nil || s.d.ToolServers == nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "tool servers cannot be changed over the API on this gateway"})
		return false
	}
	return true
}

// handlePutToolServer is PUT /v1/admin/tenants/{id}/tools/servers/{name}:
// the body is one server object as in the config (tenants[].tools.servers[])
// without name (the path's) and restricted to what an API caller may ask
// of the gateway: a url (no command), header values that are references
// to a secret file or variable of the gateway (never a literal). It adds
// the server, or replaces an API server or a config server of that name.
func (s *Server) handlePutToolServer(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok || !s.toolServersAvailable(c) {
		return
	}
	name := c.Param("name")
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	if err != nil {
		s.fail(c, err)
		return
	}
	cfg, err := decode.ToolServer(name, body)
	if err != nil {
		s.fail(c, err)
		return
	}
	// A reference that does not resolve here would only fail later, on
	// every run: refuse it now (the message names the header, never a
	// value). Other replicas report such a server in GET .../tools.
	if err := s.d.Tools.CheckServer(cfg); err != nil {
		s.fail(c, decode.FieldError(err))
		return
	}
	doc, err := json.Marshal(cfg)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	if err := s.d.ToolServers.SetToolServer(ctx, t.ID, name, doc); err != nil {
		if errors.Is(err, quota.ErrTooManyToolServers) {
			s.fail(c, badRequest("name", "tenant %s already has %d tool servers added over the API; delete one first", quoteID(t.ID), quota.MaxToolServers))
			return
		}
		if errors.Is(err, quota.ErrInvalid) {
			s.fail(c, badRequest("body", "%v", err))
			return
		}
		s.fail(c, err)
		return
	}
	s.log.InfoContext(ctx, "tool server set", "tenant_id", t.ID, "tool_server", name, "by", subject(ctx))
	s.d.Tools.Refresh(ctx, t.ID)
	s.writeTenantTools(c, t.ID)
}

// handleDeleteToolServer is DELETE
// /v1/admin/tenants/{id}/tools/servers/{name}: removes an API server; a
// config server it replaced applies again. 404 when the API has no server
// of that name (config servers cannot be deleted over the API).
func (s *Server) handleDeleteToolServer(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok || !s.toolServersAvailable(c) {
		return
	}
	name := c.Param("name")
	ctx := c.Request.Context()
	found, err := s.d.ToolServers.DeleteToolServer(ctx, t.ID, name)
	if err != nil {
		if errors.Is(err, quota.ErrInvalid) {
			s.fail(c, badRequest("name", "%v", err))
			return
		}
		s.fail(c, err)
		return
	}
	if !found {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: fmt.Sprintf("tenant %s has no tool server %s added over the API", quoteID(t.ID), quoteID(name))})
		return
	}
	s.log.InfoContext(ctx, "tool server deleted", "tenant_id", t.ID, "tool_server", name, "by", subject(ctx))
	s.d.Tools.Refresh(ctx, t.ID)
	s.writeTenantTools(c, t.ID)
}

// writeTenantTools answers with the tenant's effective servers.
func (s *Server) writeTenantTools(c *gin.Context, tenant string) {
	resp := TenantToolsResponse{TenantID: tenant, Limits: toolconfig.DefaultLimits}
	resp.Servers, resp.Limits, resp.RecordArgs = s.d.Tools.Status(c.Request.Context(), tenant)
	writeJSON(c, http.StatusOK, resp)
}
