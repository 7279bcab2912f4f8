package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// Environments resolves requirements into locked environments and installs
// them (*environments.Cache); the execute flow and POST /v1/prepare share
// it.
type Environments = execution.Environments

// Warmer keeps warm jails for a package environment's profile
// (*sandbox.Runner): the spec's tenant, environment (Lock), network and
// limits. It returns how many jails it keeps (0 without a warm pool).
type Warmer interface {
	Warm(ctx context.Context, spec sandbox.Spec, n int) (int, error)
}

// PrepareRequest is the body of POST /v1/prepare (package decode's).
type PrepareRequest = decode.PrepareRequest

// PrepareResponse describes a prepared environment: run with
// "environment_id" (or the same requirements) and nothing is installed.
type PrepareResponse struct {
	EnvironmentID string `json:"environment_id"`
	// Runtime is the Python runtime the environment is for (the one
	// asked for, or the tenant's default): a run names the environment
	// with the same runtime. Empty (absent) for an npm environment: a
	// JavaScript or TypeScript run names no runtime.
	Runtime  string                       `json:"runtime,omitempty"`
	Lock     string                       `json:"lock"`
	Packages []environments.LockedPackage `json:"packages"`
	// Cached says the environment was already installed.
	Cached bool `json:"cached"`
	// Warm is how many jails the gateway keeps waiting for runs of the
	// environment with the limits and network the tenant's policy decided
	// for this request (Limits, NetworkAccess): at most the requested
	// "warm" and sandbox.warm_pool; 0 when none were asked or the gateway
	// has no warm pool.
	Warm          int            `json:"warm"`
	Limits        sandbox.Limits `json:"limits"`
	NetworkAccess string         `json:"network_access"`
	MS            int64          `json:"ms"`
}

// handlePrepare is POST /v1/prepare: resolve (or read the lock), check
// every package with the tenant's policy (as a run asking for them would
// be), install once, optionally keep jails warm for it, and answer
// {environment_id, lock, packages, cached, warm, limits, network_access,
// ms}. The warm jails are for the profile a run naming the environment and
// nothing else would be decided: the tenant's decision for this request
// (its default limits and network).
func (s *Server) handlePrepare(c *gin.Context) {
	ctx := c.Request.Context()
	start := time.Now()
	p, _ := tenancy.PrincipalFrom(ctx)
	body, err := readBody(c.Request, c.Writer, s.caps.Body)
	if err != nil {
		s.fail(c, err)
		return
	}
	req, err := decode.Prepare(body, s.caps)
	if err != nil {
		s.fail(c, err)
		return
	}
	tenant, err := s.authorizeTenant(c, p, req.TenantID)
	if err != nil {
		s.fail(c, err)
		return
	}
	runtime := policy.RuntimeFor(tenant, req.Language, req.Runtime)
	env, failure, err := s.flow.Environment(ctx, tenant.ID, req.Language, runtime, req.Requirements, req.RequirementsLock, "")
	var dec policy.Decision
	switch {
	case err == nil && failure == nil:
		dec, err = s.preparePolicy(ctx, tenant, p, req.Language, runtime, req.Requirements, env)
	case execution.IsUnavailable(err):
		// As for a run: the policy's refusal (a runtime the tenant is not
		// granted) comes before this gateway's 503.
		if _, perr := s.preparePolicy(ctx, tenant, p, req.Language, runtime, req.Requirements, nil); perr != nil {
			err = perr
		}
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	var hit bool
	var dir string // where the environment is installed (none on a dispatching gateway)
	if failure == nil {
		// An install is work done for the tenant: it takes a rate token and
		// a concurrency slot while it lasts (no CPU is charged).
		adm, err := s.d.Quota.Admit(ctx, quota.AdmitRequest{TenantID: tenant.ID, ExecutionID: "prepare-" + execution.NewID(), Limits: tenant.Quota})
		if err != nil {
			s.fail(c, err)
			return
		}
		var envs execution.RuntimeEnvironments
		if envs, err = s.d.Environments.For(req.Language, runtime); err == nil {
			dir, hit, failure, err = envs.Prepare(ctx, *env)
		}
		_ = adm.Release(context.WithoutCancel(ctx))
		if err != nil {
			s.fail(c, err)
			return
		}
	}
	if failure != nil {
		// Nothing to run, so no envelope: the installer's answer is a 422.
		writeJSON(c, http.StatusUnprocessableEntity, ErrorResponse{Status: "error",
			Error: ErrorBody{Type: sandbox.ErrDependencyError, Message: failure.Message, Traceback: failure.Traceback}})
		return
	}
	resp := PrepareResponse{EnvironmentID: env.ID, Runtime: runtime, Lock: env.Lock, Packages: env.Packages, Cached: hit,
		Limits: dec.Limits, NetworkAccess: dec.NetworkAccess}
	if resp.NetworkAccess == "" {
		resp.NetworkAccess = string(sandbox.NetworkNone)
	}
	if req.Warm > 0 && s.d.Warmer != nil {
		spec := sandbox.Spec{TenantID: tenant.ID, Language: req.Language, Deps: dir, Lock: env.Lock, Network: sandbox.Network(resp.NetworkAccess), Limits: resp.Limits, Runtime: runtime}
		if resp.Warm, err = s.d.Warmer.Warm(ctx, spec, int(req.Warm)); err != nil {
			s.fail(c, err)
			return
		}
	}
	resp.MS = time.Since(start).Milliseconds()
	writeJSON(c, http.StatusOK, resp)
}

// preparePolicy asks the policy whether tenant may install env, as a plain
// run (no limits or network asked) needing it would be asked, and returns
// the decision: its limits and network are those of the jails warmed for
// env.
func (s *Server) preparePolicy(ctx context.Context, tenant tenancy.Tenant, p tenancy.Principal, language, runtime string, reqs []string, env *environments.Environment) (policy.Decision, error) {
	in := policy.BuildInput(tenant, p, policy.Request{Language: language, Requirements: reqs, Packages: execution.PolicyPackages(env), Runtime: runtime})
	dec, err := s.d.Policy.Decide(ctx, in)
	if err != nil {
		return dec, fmt.Errorf("%w: %w", execution.ErrPolicy, err)
	}
	if !dec.Allow {
		return dec, execution.Denied(dec.Reasons)
	}
	if !dec.RequirementsAllowed {
		return dec, execution.Denied([]string{"requirements are not allowed for this tenant"})
	}
	return dec, nil
}
