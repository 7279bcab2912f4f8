package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/tenancy"
)

// RuntimeLister lists the runtimes the service runs (*runtimes.Set; in
// the gateway role, *dispatch.Dispatcher: the ones its executors serve).
type RuntimeLister interface {
	Runtimes(ctx context.Context) ([]runtimes.Info, error)
}

// RuntimesResponse is the body of GET /v1/runtimes: the runtimes the
// service runs, what each is and has, and for the tenant which it may use
// and which a Python run naming none gets.
type RuntimesResponse struct {
	TenantID string `json:"tenant_id"`
	// Default is the runtime a Python run of the tenant that names none
	// gets (the first of its policy data "runtimes").
	Default  string        `json:"default"`
	Runtimes []RuntimeInfo `json:"runtimes"`
}

// RuntimeInfo is one runtime and whether the tenant's policy allows a
// run on it.
type RuntimeInfo struct {
	runtimes.Info
	Granted bool `json:"granted"`
}

// handleRuntimes is GET /v1/runtimes: the runtimes the service runs, and
// for the tenant (the caller's own; ?tenant= for an admin) whether its
// policy allows each, asked as a plain Python run on it would be.
func (s *Server) handleRuntimes(c *gin.Context) {
	ctx := c.Request.Context()
	p, _ := tenancy.PrincipalFrom(ctx)
	tenant, err := s.authorizeTenant(c, p, c.Query("tenant"))
	if err != nil {
		s.fail(c, err)
		return
	}
	var list []runtimes.Info
	if s.d.Runtimes != nil {
		if list, err = s.d.Runtimes.Runtimes(ctx); err != nil {
			s.fail(c, err)
			return
		}
	}
	resp := RuntimesResponse{TenantID: tenant.ID, Runtimes: make([]RuntimeInfo, 0, len(list))}
	dec, err := s.d.Policy.Decide(ctx, policy.BuildInput(tenant, p, policy.Request{Language: "python", Mode: "run"}))
	if err != nil {
		s.fail(c, fmt.Errorf("%w: %w", execution.ErrPolicy, err))
		return
	}
	resp.Default = policy.RuntimeFor(tenant, "python", "")
	if dec.Allow {
		resp.Default = dec.Runtime
	}
	for _, rt := range list {
		d, err := s.d.Policy.Decide(ctx, policy.BuildInput(tenant, p, policy.Request{Language: "python", Mode: "run", Runtime: rt.Name}))
		if err != nil {
			s.fail(c, fmt.Errorf("%w: %w", execution.ErrPolicy, err))
			return
		}
		resp.Runtimes = append(resp.Runtimes, RuntimeInfo{Info: rt, Granted: d.Allow && d.Runtime == rt.Name})
	}
	writeJSON(c, http.StatusOK, resp)
}
