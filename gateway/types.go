package gateway

import (
	"encoding/json"

	"github.com/execgate/execgate/execution"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
)

// The execute request and its envelope are the execution flow's types
// (package execution); these names are the HTTP API's for them.
type (
	// ExecuteRequest is the decoded body of POST /v1/execute (DESIGN §4).
	ExecuteRequest = execution.Request
	// EgressRequest is the requested egress allow-list.
	EgressRequest = execution.EgressRequest
	// Fixtures are test-mode inputs.
	Fixtures = execution.Fixtures
	// Envelope is every /v1/execute response, run or refused.
	Envelope = execution.Envelope
	// EnvelopeToolCall is one tool call as the caller sees it.
	EnvelopeToolCall = execution.EnvelopeToolCall
	// ErrorBody is the error object of an envelope or an error response.
	ErrorBody = execution.ErrorBody
	// EnvelopeDecision is the part of the policy decision the caller sees.
	EnvelopeDecision = execution.EnvelopeDecision
	// ErrorResponse is the body of an error on every route but
	// /v1/execute (which answers with an Envelope).
	ErrorResponse = execution.ErrorResponse
)

// EvaluateRequest is the body of POST /v1/admin/policy/evaluate.
type EvaluateRequest struct {
	TenantID string          `json:"tenant_id"`
	Roles    []string        `json:"roles,omitempty"`
	Request  json.RawMessage `json:"request"`
}

// EvaluateResponse is the dry-run decision and the input it was made on.
type EvaluateResponse struct {
	Decision policy.Decision `json:"decision"`
	Input    policy.Input    `json:"input"`
}

// TenantInfo is one entry of GET /v1/admin/tenants.
type TenantInfo struct {
	ID     string         `json:"id"`
	Plan   string         `json:"plan"`
	Quota  quota.Limits   `json:"quota"` // effective (override if set)
	Policy map[string]any `json:"policy"`
	// Override is true when an admin override replaces the configured quota.
	Override bool `json:"override"`
}

// TenantsResponse is GET /v1/admin/tenants.
type TenantsResponse struct {
	Tenants []TenantInfo `json:"tenants"`
}

// QuotaResponse is GET|PUT /v1/admin/tenants/{id}/quota.
type QuotaResponse struct {
	TenantID   string        `json:"tenant_id"`
	Configured quota.Limits  `json:"configured"` // from the config file
	Override   *quota.Limits `json:"override"`   // the admin override, or null
	Effective  quota.Limits  `json:"effective"`  // what admission uses
}

// ReadyResponse is GET /readyz.
type ReadyResponse struct {
	Ready  bool          `json:"ready"`
	Checks []CheckResult `json:"checks"`
}

// CheckResult is one readiness check.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Detail says what a passing check found (e.g. the live executors).
	Detail string `json:"detail,omitempty"`
	// AgeMS is how old a cached result is (the sandbox check is cached).
	AgeMS int64 `json:"age_ms"`
	// Optional: a failure here does not make the gateway unready.
	Optional bool `json:"optional,omitempty"`
}
