package decode

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/limits"
)

// PrepareRequest is the body of POST /v1/prepare: one of requirements
// (resolved) and requirements_lock (used as is), the language whose
// packages they are (python, the default: PyPI; javascript or
// typescript: npm), and how many jails to keep warm for the environment
// (0 to maxPrepareWarm).
type PrepareRequest struct {
	TenantID         string   `json:"tenant_id,omitempty"`
	Language         string   `json:"language,omitempty"`
	Requirements     []string `json:"requirements,omitempty"`
	RequirementsLock string   `json:"requirements_lock,omitempty"`
	Warm             int64    `json:"warm,omitempty"`
	// Runtime is the Python runtime the environment is for; "": the
	// tenant's default. Environment ids are per runtime. A javascript or
	// typescript environment names none (npm packages do not depend on
	// it).
	Runtime string `json:"runtime,omitempty"`
}

// maxPrepareWarm bounds "warm" in a prepare request. The pool bounds it
// further (at most sandbox.warm_pool jails per profile, and the tenant's
// share of its places).
const maxPrepareWarm = 2

// maxRequirementLen bounds one requirement in a request body.
const maxRequirementLen = 200

// maxLockField bounds requirements_lock in a request body.
const maxLockField = 256 << 10

// requirementsField decodes "requirements": strings, checked against the
// request's language once every field is read (checkPackages).
func requirementsField(dst *[]string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		return decodeStrings(p, raw, dst)
	}
}

// lockField decodes "requirements_lock", checked against the request's
// language once every field is read (checkPackages).
func lockField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if len(*dst) > maxLockField {
			return execution.TooLarge(p, int64(len(*dst)), maxLockField)
		}
		return nil
	}
}

// checkPackages checks requirements and requirements_lock for language:
// npm packages with exact versions ("left-pad@1.3.0") and an npm lock for
// javascript and typescript; PEP 508 requirements without URLs, paths,
// markers or options and a lock in pip's hashes format for python.
func checkPackages(language string, reqs []string, lock string) error {
	npmRun := environments.EcosystemOf(language) == environments.EcosystemNPM
	for i, r := range reqs {
		p := fmt.Sprintf("requirements[%d]", i)
		if len(r) > maxRequirementLen {
			return execution.BadRequest(p, "is %d bytes; at most %d", len(r), maxRequirementLen)
		}
		if npmRun {
			if _, err := npm.ParseRequirement(r); err != nil {
				return execution.BadRequest(p, "%q is not an npm package with an exact version like left-pad@1.3.0 (a %s run's requirements are npm packages): %v", clipField(r), language, err)
			}
			continue
		}
		if _, err := environments.NormalizeSpecs([]string{r}); err != nil {
			return execution.BadRequest(p, "%q is not a requirement like requests>=2.31 or six==1.16.0 (no URLs, paths, markers or options)", clipField(r))
		}
	}
	if npmRun && len(reqs) > npm.MaxRequirements {
		return execution.BadRequest("requirements", "%d entries, at most %d are allowed", len(reqs), npm.MaxRequirements)
	}
	if lock == "" {
		return nil
	}
	switch {
	case npmRun && !npm.IsLock(lock):
		return execution.BadRequest("requirements_lock", "a %s run takes an npm lock (starting %q, as POST /v1/prepare returns for its language), not a Python one", language, npm.LockHeader)
	case npmRun:
		if _, err := npm.ParseLock(lock); err != nil {
			return execution.BadRequest("requirements_lock", "%s", strings.TrimPrefix(err.Error(), npm.ErrInvalidLock.Error()+": "))
		}
	case npm.IsLock(lock):
		return execution.BadRequest("requirements_lock", "an npm lock is for javascript and typescript runs, not %s", language)
	default:
		if _, err := environments.ParseLock(lock); err != nil {
			return execution.BadRequest("requirements_lock", "%s", strings.TrimPrefix(err.Error(), environments.ErrInvalidLock.Error()+": "))
		}
	}
	return nil
}

// clipField cuts a string quoted in an error to 120 bytes.
func clipField(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// environmentIDField decodes "environment_id".
func environmentIDField(dst *string) func(string, json.RawMessage) error {
	return func(p string, raw json.RawMessage) error {
		if err := decodeString(p, raw, dst); err != nil {
			return err
		}
		if !environments.ValidID(*dst) {
			return execution.BadRequest(p, "must be the 64 hex digits POST /v1/prepare returned")
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
		return execution.BadRequest("requirements", "give at most one of requirements, requirements_lock and environment_id")
	}
	return nil
}

// Prepare decodes a POST /v1/prepare body strictly.
func Prepare(body []byte, c Caps) (*PrepareRequest, error) {
	if err := CheckJSON(body, c.Depth); err != nil {
		return nil, err
	}
	req := &PrepareRequest{}
	if err := decodeObject("", body, prepareFields(req)); err != nil {
		return nil, err
	}
	if len(req.Requirements) == 0 && req.RequirementsLock == "" {
		return nil, execution.BadRequest("requirements", "give requirements or requirements_lock")
	}
	if err := checkDepsChoice(req.Requirements, req.RequirementsLock, ""); err != nil {
		return nil, err
	}
	if req.Language == "" {
		req.Language = limits.DefaultLanguage
	}
	if err := checkRuntime(req.Language, req.Runtime); err != nil {
		return nil, err
	}
	if err := checkPackages(req.Language, req.Requirements, req.RequirementsLock); err != nil {
		return nil, err
	}
	return req, nil
}

// prepareFields decodes and validates each field of a prepare request
// into req.
func prepareFields(req *PrepareRequest) fieldFuncs {
	return fieldFuncs{
		"tenant_id":         tenantIDField(&req.TenantID),
		"language":          languageField(&req.Language),
		"requirements":      requirementsField(&req.Requirements),
		"requirements_lock": lockField(&req.RequirementsLock),
		"warm": func(p string, raw json.RawMessage) error {
			return decodeInt(p, raw, maxPrepareWarm, &req.Warm)
		},
		"runtime": runtimeField(&req.Runtime),
	}
}
