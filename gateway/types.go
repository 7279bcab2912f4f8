package gateway

import (
	"encoding/json"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
)

// ExecuteRequest is the body of POST /v1/execute (DESIGN §4). Decoding is
// strict (see decode.go): unknown fields and wrong types are 400s naming the
// field.
type ExecuteRequest struct {
	ExecutionID  string          `json:"execution_id,omitempty"`
	TenantID     string          `json:"tenant_id,omitempty"`
	Language     string          `json:"language,omitempty"`
	Source       string          `json:"source"`
	Entrypoint   string          `json:"entrypoint,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	Requirements []string        `json:"requirements,omitempty"`
	// RequirementsLock is a lock to install as is (pip's hashes format);
	// EnvironmentID names one made by POST /v1/prepare. At most one of
	// requirements, requirements_lock and environment_id.
	RequirementsLock string         `json:"requirements_lock,omitempty"`
	EnvironmentID    string         `json:"environment_id,omitempty"`
	NetworkAccess    string         `json:"network_access,omitempty"`
	Egress           *EgressRequest `json:"egress,omitempty"`
	Limits           policy.Limits  `json:"limits"`
	Mode             string         `json:"mode,omitempty"`
	// Tools narrows the run's granted tools (names or globs over
	// "<server>.<tool>"); absent or empty: every tool the tenant has.
	Tools    []string  `json:"tools,omitempty"`
	Fixtures *Fixtures `json:"fixtures,omitempty"`
	// Isolation asks for an isolation level, "jail" (default) or
	// "process"; policy decides (DESIGN §14).
	Isolation string `json:"isolation,omitempty"`
}

// EgressRequest is the requested egress allow-list (host[:port] globs).
type EgressRequest struct {
	Allow []string `json:"allow"`
}

// Fixtures are test-mode inputs: context.variables and canned tool returns.
type Fixtures struct {
	Variables json.RawMessage            `json:"variables,omitempty"`
	Tools     map[string]json.RawMessage `json:"tools,omitempty"`
}

// Envelope is every /v1/execute response, run or refused (DESIGN §4).
type Envelope struct {
	ExecutionID string            `json:"execution_id"`
	TenantID    string            `json:"tenant_id"`
	Status      sandbox.Status    `json:"status"`
	Result      json.RawMessage   `json:"result"`
	Stdout      string            `json:"stdout"`
	Stderr      string            `json:"stderr"`
	Truncated   sandbox.Truncated `json:"truncated"`
	Error       *ErrorBody        `json:"error,omitempty"`
	Usage       sandbox.Usage     `json:"usage"`
	// Logs are the lines the tool logged through context.log or the
	// execgate_runtime logger, in order; always an array (empty when none,
	// and on refusals).
	Logs []sandbox.LogLine `json:"logs"`
	// ToolCalls are the run's tool calls through the bridge, in order
	// (absent when it made none).
	ToolCalls []EnvelopeToolCall `json:"tool_calls,omitempty"`
	// Decision is null when the request was refused before policy decided.
	Decision *EnvelopeDecision `json:"decision"`
	// Egress lists a proxy-mode run's connection attempts, allowed or
	// denied, in order: at most sandbox.MaxEgressAttempts, strings clipped;
	// EgressDropped counts the attempts left out. Absent when there were none.
	Egress        []sandbox.EgressAttempt `json:"egress,omitempty"`
	EgressDropped int                     `json:"egress_dropped,omitempty"`
	TraceID       string                  `json:"trace_id"`
}

// EnvelopeToolCall is one tool call as the caller sees it; the audit
// record has the rest (sizes, digest, reason).
type EnvelopeToolCall struct {
	Tool       string `json:"tool"`
	Server     string `json:"server"`
	DecisionID string `json:"decision_id"`
	MS         int64  `json:"ms"`
	Outcome    string `json:"outcome"`
}

// ErrorBody is the error object of an envelope or an error response.
type ErrorBody struct {
	Type      string   `json:"type"`
	Message   string   `json:"message"`
	Traceback string   `json:"traceback,omitempty"`
	Reasons   []string `json:"reasons,omitempty"`
	// Line and Column locate an InvalidSource error in the source (1-based;
	// absent when unknown: an import-time exception has a line only).
	Line   int `json:"line,omitempty"`
	Column int `json:"column,omitempty"`
	// OriginalStatus is set on 409 ResultExpired: the X-Execution-Status
	// (ok or error:<Type>) of the run whose stored response was dropped.
	OriginalStatus string `json:"original_status,omitempty"`
}

// EnvelopeDecision is the part of the policy decision the caller sees.
type EnvelopeDecision struct {
	ID            string         `json:"id"`
	NetworkAccess string         `json:"network_access"`
	Limits        sandbox.Limits `json:"limits"`
	Egress        policy.Egress  `json:"egress"`
	// Isolation is the decided isolation level: "jail" or "process".
	Isolation string `json:"isolation"`
}

// ErrorResponse is the body of an error on every route but /v1/execute
// (which answers with an Envelope).
type ErrorResponse struct {
	Status string    `json:"status"` // always "error"
	Error  ErrorBody `json:"error"`
}

// ValidateRequest is the body of POST /v1/validate.
type ValidateRequest struct {
	Source     string `json:"source"`
	Entrypoint string `json:"entrypoint,omitempty"`
	Language   string `json:"language,omitempty"` // python (default), javascript, typescript
}

// ValidateResponse says whether the source compiles and defines the
// entrypoint. Nothing of the tool is run.
type ValidateResponse struct {
	Valid  bool            `json:"valid"`
	Errors []SourceProblem `json:"errors"`
}

// SourceProblem is one problem found in a source; Line and Col are 1-based,
// 0 when the problem is not tied to a position.
type SourceProblem struct {
	Line    int    `json:"line"`
	Col     int    `json:"col"`
	Message string `json:"message"`
}

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
	// AgeMS is how old a cached result is (the sandbox check is cached).
	AgeMS int64 `json:"age_ms"`
	// Optional: a failure here does not make the gateway unready.
	Optional bool `json:"optional,omitempty"`
}
