package execution

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
)

// Request is one execute request as decoded from POST /v1/execute (DESIGN
// §4) or an MCP tool call; the transport decodes it strictly
// (package decode): unknown fields and wrong types are 400s naming the
// field.
type Request struct {
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
	// Runtime asks for a Python runtime ("python3.11", "python3.13");
	// empty: the tenant's default. Policy decides (DESIGN §15).
	Runtime string `json:"runtime,omitempty"`
	// Secrets names the brokered secrets the run asks for; each must be
	// granted by policy (else 403 PolicyDenied naming it). Absent: none.
	// In test mode their values come from Fixtures.Secrets.
	Secrets []string `json:"secrets,omitempty"`
	// Files are the run's input files (decoded: their content's bytes),
	// read-only under /workspace; within the decided limits.files and
	// limits.files_bytes (FilesWithin).
	Files []sandbox.File `json:"files,omitempty"`
	// Stdin is the tool's standard input.
	Stdin string `json:"stdin,omitempty"`
}

// EgressRequest is the requested egress allow-list (host[:port] globs).
type EgressRequest struct {
	Allow []string `json:"allow"`
}

// Fixtures are test-mode inputs: context.variables, canned tool returns
// and stand-in values of the secrets the run asks for (never real ones).
type Fixtures struct {
	Variables json.RawMessage            `json:"variables,omitempty"`
	Tools     map[string]json.RawMessage `json:"tools,omitempty"`
	Secrets   map[string]string          `json:"secrets,omitempty"`
}

// Envelope is the answer to every execute request, run or refused
// (DESIGN §4): the body of a /v1/execute response, an MCP tool result.
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
	// Artifacts are the files the run left in /workspace/out, collected
	// within its limits.artifacts and artifacts_bytes (truncated.artifacts
	// lists what was dropped), in name order; absent when there were none.
	Artifacts []EnvelopeArtifact `json:"artifacts,omitempty"`
	TraceID   string             `json:"trace_id"`
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

// ErrorResponse is the body of an error that is not an envelope: on every
// HTTP route but /v1/execute, and as an MCP tool's structured result.
type ErrorResponse struct {
	Status string    `json:"status"` // always "error"
	Error  ErrorBody `json:"error"`
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
	// Runtime is the decided Python runtime ("python3.13"); absent for
	// other languages.
	Runtime string `json:"runtime,omitempty"`
	// Secrets are the brokered secrets granted to the run, by name
	// (absent when none).
	Secrets []string `json:"secrets,omitempty"`
}

// ExecutionStatus is the X-Execution-Status value of e: ok or
// error:<Type>. The idempotency store keeps it as a run's outcome.
func (e *Envelope) ExecutionStatus() string {
	if e.Status == sandbox.StatusOK {
		return "ok"
	}
	if e.Error != nil {
		return "error:" + e.Error.Type
	}
	return "error"
}

// envelopeToolCalls is what the caller sees of the run's tool calls.
func envelopeToolCalls(calls []sandbox.ToolCall) []EnvelopeToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]EnvelopeToolCall, len(calls))
	for i, c := range calls {
		out[i] = EnvelopeToolCall{Tool: c.Tool, Server: c.Server, DecisionID: c.DecisionID, MS: c.MS, Outcome: c.Outcome}
	}
	return out
}

func envelopeDecision(d *policy.Decision, limits sandbox.Limits) *EnvelopeDecision {
	if d == nil {
		return nil
	}
	eg := d.Egress
	if eg.Allow == nil {
		eg.Allow = []string{}
	}
	iso := d.Isolation
	if iso == "" {
		iso = sandbox.IsolationJail
	}
	var granted []string
	if len(d.Secrets) > 0 {
		granted = d.Secrets
	}
	return &EnvelopeDecision{ID: d.ID, NetworkAccess: d.NetworkAccess, Limits: limits, Egress: eg, Isolation: iso, Runtime: d.Runtime, Secrets: granted}
}

// TraceID is the trace id of ctx's span ("" without one).
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// NewID returns a random execution id (32 hex digits).
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the kernel's RNG failing is not recoverable
	}
	return hex.EncodeToString(b[:])
}

// EncodeJSON encodes v without HTML escaping: tool output and messages
// keep their <, > and & readable.
func EncodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
