package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/stubs"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// ToolHub serves code mode: a governed bridge for each run, and the list of
// granted tools (toolbridge.Hub).
type ToolHub interface {
	NewRun(info toolbridge.RunInfo) *toolbridge.Run
	Granted(ctx context.Context, tenant string, granted []string) ([]toolbridge.Tool, []toolbridge.ServerProblem)
	Status(ctx context.Context, tenant string) ([]toolbridge.ServerStatus, toolconfig.Limits, bool)
	// Refresh applies the API servers of tenant now (after a change).
	Refresh(ctx context.Context, tenant string)
	// CheckServer resolves a server's secret references on this gateway.
	CheckServer(cfg toolconfig.Server) error
}

var _ ToolHub = (*toolbridge.Hub)(nil)

// ToolsResponse is GET /v1/tools: the caller's granted tools, ready for a
// model's code-mode prompt.
type ToolsResponse struct {
	TenantID   string            `json:"tenant_id"`
	DecisionID string            `json:"decision_id"`
	Tools      []toolbridge.Tool `json:"tools"`
	// Unavailable lists granted servers whose tools could not be listed.
	Unavailable []toolbridge.ServerProblem `json:"unavailable"`
	// PythonStub is a typed stub of context.tools for the granted tools.
	PythonStub string `json:"python_stub"`
	// TypeScriptStub declares context (and context.tools) for the granted
	// tools, for JavaScript and TypeScript tools.
	TypeScriptStub string `json:"typescript_stub"`
	// Prompt explains code mode and lists the tools, for a system prompt.
	Prompt string `json:"prompt"`
}

// handleTools is GET /v1/tools[?tools=a.*,b.c]: the policy decides the
// tools a run of the caller would get (as for an execute request naming
// those tools), and the tool servers describe them.
func (s *Server) handleTools(c *gin.Context) {
	ctx := c.Request.Context()
	p, _ := tenancy.PrincipalFrom(ctx)
	tenant, err := s.authorizeTenant(c, p, "")
	if err != nil {
		s.fail(c, err)
		return
	}
	asked, err := decode.ToolsQuery(c.Query("tools"))
	if err != nil {
		s.fail(c, err)
		return
	}
	dec, err := s.d.Policy.Decide(ctx, policy.BuildInput(tenant, p, policy.Request{Mode: "run", Tools: asked}))
	if err != nil {
		s.fail(c, fmt.Errorf("%w: %w", execution.ErrPolicy, err))
		return
	}
	if !dec.Allow {
		s.fail(c, &execution.PolicyDeniedError{Reasons: dec.Reasons})
		return
	}
	resp := ToolsResponse{TenantID: tenant.ID, DecisionID: dec.ID, Tools: []toolbridge.Tool{}, Unavailable: []toolbridge.ServerProblem{}}
	if s.d.Tools != nil && len(dec.Tools) > 0 {
		tools, problems := s.d.Tools.Granted(ctx, tenant.ID, dec.Tools)
		if tools != nil {
			resp.Tools = tools
		}
		if problems != nil {
			resp.Unavailable = problems
		}
	}
	resp.PythonStub = stubs.Python(resp.Tools)
	resp.TypeScriptStub = stubs.TypeScript(resp.Tools)
	resp.Prompt = stubs.Prompt(resp.Tools, resp.PythonStub)
	writeJSON(c, http.StatusOK, resp)
}

// TenantToolsResponse is GET /v1/admin/tenants/{id}/tools.
type TenantToolsResponse struct {
	TenantID   string                    `json:"tenant_id"`
	Servers    []toolbridge.ServerStatus `json:"servers"`
	Limits     toolconfig.Limits         `json:"limits"`
	RecordArgs bool                      `json:"record_args"`
}

// handleTenantTools is GET /v1/admin/tenants/{id}/tools: the tenant's
// effective tool servers (config file and API, each with its source; header
// names, never values or where they come from) and their live state.
func (s *Server) handleTenantTools(c *gin.Context) {
	t, ok := s.tenantParam(c)
	if !ok {
		return
	}
	resp := TenantToolsResponse{TenantID: t.ID, Servers: []toolbridge.ServerStatus{}, Limits: toolconfig.DefaultLimits}
	if s.d.Tools != nil {
		resp.Servers, resp.Limits, resp.RecordArgs = s.d.Tools.Status(c.Request.Context(), t.ID)
	}
	writeJSON(c, http.StatusOK, resp)
}
