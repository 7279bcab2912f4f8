package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// Environments resolves requirements into locked environments and installs
// them (*sandbox.Environments). Resolve and Prepare report what cannot be
// built as a DependencyError (*sandbox.ErrorInfo); their error is an
// *sandbox.UnavailableError (no uv, an unusable deps dir) or a bad
// requirement string.
type Environments interface {
	Resolve(ctx context.Context, reqs []string) (sandbox.Environment, *sandbox.ErrorInfo, error)
	FromLock(lock string) (sandbox.Environment, error)
	Lookup(id string) (sandbox.Environment, bool, error)
	Prepare(ctx context.Context, env sandbox.Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error)
}

// PrepareRequest is the body of POST /v1/prepare: one of requirements
// (resolved) and requirements_lock (used as is).
type PrepareRequest struct {
	TenantID         string   `json:"tenant_id,omitempty"`
	Requirements     []string `json:"requirements,omitempty"`
	RequirementsLock string   `json:"requirements_lock,omitempty"`
}

// PrepareResponse describes a prepared environment: run with
// "environment_id" (or the same requirements) and nothing is installed.
type PrepareResponse struct {
	EnvironmentID string                  `json:"environment_id"`
	Lock          string                  `json:"lock"`
	Packages      []sandbox.LockedPackage `json:"packages"`
	// Cached says the environment was already installed.
	Cached bool  `json:"cached"`
	MS     int64 `json:"ms"`
}

// maxLockField bounds requirements_lock in a request body.
const maxLockField = 256 << 10

// requirementsField decodes "requirements": PEP 508 strings without URLs,
// paths, markers or options.
func requirementsField(dst *[]string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeStrings(p, raw, dst); err != nil {
			return err
		}
		for i, r := range *dst {
			if _, err := sandbox.NormalizeSpecs([]string{r}); err != nil {
				return badRequest(fmt.Sprintf("%s[%d]", p, i), "%q is not a requirement like requests>=2.31 or six==1.16.0 (no URLs, paths, markers or options)", r)
			}
		}
		return nil
	}
}

// lockField decodes "requirements_lock": a lock in pip's hashes format.
func lockField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if len(*dst) > maxLockField {
			return tooLarge(p, int64(len(*dst)), maxLockField)
		}
		if _, err := sandbox.ParseLock(*dst); err != nil {
			return badRequest(p, "%s", strings.TrimPrefix(err.Error(), sandbox.ErrInvalidLock.Error()+": "))
		}
		return nil
	}
}

// environmentIDField decodes "environment_id".
func environmentIDField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if !sandbox.ValidEnvironmentID(*dst) {
			return badRequest(p, "must be the 64 hex digits POST /v1/prepare returned")
		}
		return nil
	}
}

// checkDepsChoice allows at most one way of naming the packages.
func checkDepsChoice(reqs []string, lock, envID string) error {
	n := 0
	for _, set := range []bool{len(reqs) > 0, lock != "", envID != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return badRequest("requirements", "give at most one of requirements, requirements_lock and environment_id")
	}
	return nil
}

// errNoEnvironments: requirements asked of a gateway without environments.
var errNoEnvironments = &sandbox.UnavailableError{Reason: "requirements need the sandbox's environments (uv and a rootfs), which this gateway has not got"}

// environment finds the environment a request names (nil when it names
// none). A list that cannot be resolved is a DependencyError.
func (s *Server) environment(ctx context.Context, reqs []string, lock, envID string) (*sandbox.Environment, *sandbox.ErrorInfo, error) {
	if len(reqs) == 0 && lock == "" && envID == "" {
		return nil, nil, nil
	}
	if s.d.Environments == nil {
		return nil, nil, errNoEnvironments
	}
	switch {
	case len(reqs) > 0:
		env, failure, err := s.d.Environments.Resolve(ctx, reqs)
		if err != nil {
			var u *sandbox.UnavailableError
			if errors.As(err, &u) {
				return nil, nil, err
			}
			return nil, nil, badRequest("requirements", "%v", err)
		}
		if failure != nil {
			return nil, failure, nil
		}
		return &env, nil, nil
	case lock != "":
		env, err := s.d.Environments.FromLock(lock)
		if err != nil {
			return nil, nil, badRequest("requirements_lock", "%v", err)
		}
		return &env, nil, nil
	default:
		env, ok, err := s.d.Environments.Lookup(envID)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, badRequest("environment_id", "%s is not an environment this gateway prepared (POST /v1/prepare makes one)", envID)
		}
		return &env, nil, nil
	}
}

// policyPackages is the resolved set as the policy sees it.
func policyPackages(env *sandbox.Environment) []policy.Package {
	if env == nil {
		return nil
	}
	out := make([]policy.Package, len(env.Packages))
	for i, p := range env.Packages {
		out[i] = policy.Package{Name: p.Name, Version: p.Version, Index: p.Index, Via: p.Via}
	}
	return out
}

// decodePrepare decodes a POST /v1/prepare body strictly.
func decodePrepare(body []byte, c caps) (*PrepareRequest, error) {
	if err := checkJSON(body, c.depth); err != nil {
		return nil, err
	}
	req := &PrepareRequest{}
	err := decodeObject("", body, fieldFuncs{
		"tenant_id": func(p string, raw json.RawMessage) error {
			if err := decodeString(p, raw, &req.TenantID); err != nil {
				return err
			}
			if req.TenantID == "" || len(req.TenantID) > maxIDLen {
				return badRequest(p, "must be 1-%d characters", maxIDLen)
			}
			return nil
		},
		"requirements":      requirementsField(&req.Requirements),
		"requirements_lock": lockField(&req.RequirementsLock),
	})
	if err != nil {
		return nil, err
	}
	if len(req.Requirements) == 0 && req.RequirementsLock == "" {
		return nil, badRequest("requirements", "give requirements or requirements_lock")
	}
	if err := checkDepsChoice(req.Requirements, req.RequirementsLock, ""); err != nil {
		return nil, err
	}
	return req, nil
}

// handlePrepare is POST /v1/prepare: resolve (or read the lock), check
// every package with the tenant's policy (as a run asking for them would
// be), install once, and answer {environment_id, lock, packages, ms}.
func (s *Server) handlePrepare(c *gin.Context) {
	ctx := c.Request.Context()
	start := time.Now()
	p, _ := tenancy.PrincipalFrom(ctx)
	body, err := readBody(c.Request, c.Writer, s.caps.body)
	if err != nil {
		s.fail(c, err)
		return
	}
	req, err := decodePrepare(body, s.caps)
	if err != nil {
		s.fail(c, err)
		return
	}
	tenant, err := s.authorizeTenant(c, p, req.TenantID)
	if err != nil {
		s.fail(c, err)
		return
	}
	env, failure, err := s.environment(ctx, req.Requirements, req.RequirementsLock, "")
	if err == nil && failure == nil {
		err = s.preparePolicy(ctx, tenant, p, req.Requirements, env)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	var hit bool
	if failure == nil {
		// An install is work done for the tenant: it takes a rate token and
		// a concurrency slot while it lasts (no CPU is charged).
		adm, err := s.d.Quota.Admit(ctx, quota.AdmitRequest{TenantID: tenant.ID, ExecutionID: "prepare-" + newID(), Limits: tenant.Quota})
		if err != nil {
			s.fail(c, err)
			return
		}
		_, hit, failure, err = s.d.Environments.Prepare(ctx, *env)
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
	writeJSON(c, http.StatusOK, PrepareResponse{EnvironmentID: env.ID, Lock: env.Lock, Packages: env.Packages,
		Cached: hit, MS: time.Since(start).Milliseconds()})
}

// preparePolicy asks the policy whether tenant may install env, as a plain
// run (network none, default limits) asking for it would be asked.
func (s *Server) preparePolicy(ctx context.Context, tenant tenancy.Tenant, p tenancy.Principal, reqs []string, env *sandbox.Environment) error {
	in := policy.BuildInput(tenant, p, policy.Request{Requirements: reqs, Packages: policyPackages(env)})
	dec, err := s.d.Policy.Decide(ctx, in)
	if err != nil {
		return fmt.Errorf("%w: %w", errPolicy, err)
	}
	if !dec.Allow {
		reasons := dec.Reasons
		if len(reasons) == 0 {
			reasons = []string{"denied by policy"}
		}
		return &policyDenied{reasons: reasons}
	}
	if !dec.RequirementsAllowed {
		return &policyDenied{reasons: []string{"requirements are not allowed for this tenant"}}
	}
	return nil
}
