package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

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
	body, err := readBody(c.Request, c.Writer, s.caps.body)
	if err != nil {
		s.fail(c, err)
		return
	}
	cfg, err := decodeToolServer(name, body)
	if err != nil {
		s.fail(c, err)
		return
	}
	// A reference that does not resolve here would only fail later, on
	// every run: refuse it now (the message names the header, never a
	// value). Other replicas report such a server in GET .../tools.
	if err := s.d.Tools.CheckServer(cfg); err != nil {
		s.fail(c, fieldError(err))
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

// decodeToolServer decodes and checks a PUT body; errors name the field.
func decodeToolServer(name string, body []byte) (toolconfig.Server, error) {
	cfg := toolconfig.Server{Name: name}
	if err := toolconfig.ValidateAPIName(name); err != nil {
		return cfg, badRequest("name", "%v", err)
	}
	if err := checkJSON(body, DefaultMaxJSONDepth); err != nil {
		return cfg, err
	}
	refused := func(why string) func(string, json.RawMessage) error {
		return func(p string, _ json.RawMessage) error { return badRequest(p, "%s", why) }
	}
	err := decodeObject("", body, fieldFuncs{
		"name": func(p string, r json.RawMessage) error {
			var n string
			if err := decodeString(p, r, &n); err != nil {
				return err
			}
			if n != name {
				return badRequest(p, "%q differs from the path's %q", n, name)
			}
			return nil
		},
		"url":     func(p string, r json.RawMessage) error { return decodeString(p, r, &cfg.URL) },
		"command": refused("stdio servers are config-only; the API takes a url (the gateway never launches a program for an API caller)"),
		"env":     refused("stdio servers are config-only; the API takes a url"),
		"headers": func(p string, r json.RawMessage) error {
			var hs map[string]json.RawMessage
			if err := json.Unmarshal(r, &hs); err != nil || kindOf(r) != "an object" {
				return badRequest(p, "must be an object of header name → {file} or {env}, got %s", kindOf(r))
			}
			if len(hs) > toolconfig.MaxHeaders {
				return badRequest(p, "has %d headers; at most %d", len(hs), toolconfig.MaxHeaders)
			}
			cfg.Headers = make(map[string]toolconfig.Secret, len(hs))
			for h, raw := range hs {
				at := join(p, h)
				if kindOf(raw) != "an object" {
					// Never echo the value: it may be the secret itself.
					return badRequest(at, "must be {\"file\": path} or {\"env\": variable} naming where the gateway reads the value; a literal value is refused (%s given)", kindOf(raw))
				}
				var sec toolconfig.Secret
				err := decodeObject(at, raw, fieldFuncs{
					"file": func(p string, r json.RawMessage) error { return decodeString(p, r, &sec.File) },
					"env":  func(p string, r json.RawMessage) error { return decodeString(p, r, &sec.Env) },
				})
				if err != nil {
					return err
				}
				cfg.Headers[h] = sec
			}
			return nil
		},
		"allow": func(p string, r json.RawMessage) error { return decodeStrings(p, r, &cfg.Allow) },
		"timeout_ms": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxTimeoutMS, &cfg.TimeoutMS)
		},
		"max_result_bytes": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxResultBytesCap, &cfg.MaxResultBytes)
		},
		"tools_ttl_ms": func(p string, r json.RawMessage) error {
			return decodeInt(p, r, toolconfig.MaxToolsTTLMS, &cfg.ToolsTTLMS)
		},
	})
	if err != nil {
		return cfg, err
	}
	if err := cfg.ValidateAPI(); err != nil {
		return cfg, fieldError(err)
	}
	return cfg, nil
}

// fieldError is a 400 of the first problem of err ("field: why", as
// toolconfig and the Hub word them).
func fieldError(err error) *apiError {
	msg := strings.SplitN(err.Error(), "\n", 2)[0]
	field, why, _ := strings.Cut(msg, ": ")
	return badRequest(field, "%s", why)
}

// writeTenantTools answers with the tenant's effective servers.
func (s *Server) writeTenantTools(c *gin.Context, tenant string) {
	resp := TenantToolsResponse{TenantID: tenant, Limits: toolconfig.DefaultLimits}
	resp.Servers, resp.Limits, resp.RecordArgs = s.d.Tools.Status(c.Request.Context(), tenant)
	writeJSON(c, http.StatusOK, resp)
}
