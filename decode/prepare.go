package decode

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
)

// PrepareRequest is the body of POST /v1/prepare: one of requirements
// (resolved) and requirements_lock (used as is), and how many jails to
// keep warm for the environment (0 to maxPrepareWarm).
type PrepareRequest struct {
	TenantID         string   `json:"tenant_id,omitempty"`
	Requirements     []string `json:"requirements,omitempty"`
	RequirementsLock string   `json:"requirements_lock,omitempty"`
	Warm             int64    `json:"warm,omitempty"`
	// Runtime is the Python runtime the environment is for; "": the
	// tenant's default. Environment ids are per runtime.
	Runtime string `json:"runtime,omitempty"`
}

// maxPrepareWarm bounds "warm" in a prepare request. The pool bounds it
// further (at most sandbox.warm_pool jails per profile, and the tenant's
// share of its places).
const maxPrepareWarm = 2

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
			if _, err := environments.NormalizeSpecs([]string{r}); err != nil {
				return execution.BadRequest(fmt.Sprintf("%s[%d]", p, i), "%q is not a requirement like requests>=2.31 or six==1.16.0 (no URLs, paths, markers or options)", r)
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
			return execution.TooLarge(p, int64(len(*dst)), maxLockField)
		}
		if _, err := environments.ParseLock(*dst); err != nil {
			return execution.BadRequest(p, "%s", strings.TrimPrefix(err.Error(), environments.ErrInvalidLock.Error()+": "))
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
	return req, nil
}

// prepareFields decodes and validates each field of a prepare request
// into req.
func prepareFields(req *PrepareRequest) fieldFuncs {
	return fieldFuncs{
		"tenant_id":         tenantIDField(&req.TenantID),
		"requirements":      requirementsField(&req.Requirements),
		"requirements_lock": lockField(&req.RequirementsLock),
		"warm": func(p string, raw json.RawMessage) error {
			return decodeInt(p, raw, maxPrepareWarm, &req.Warm)
		},
		"runtime": runtimeField(&req.Runtime),
	}
}
