package audit

import (
	"time"

	"github.com/execgate/execgate/sandbox"
)

// SchemaVersion is the version of Record; audit/schema/record.v1.json is its
// JSON Schema. Bump it (and add a new schema file) on any breaking change.
const SchemaVersion = 1

// Record is exactly one authenticated execute request: run, refused by policy
// or refused by quota. It is written durably before the response is sent.
type Record struct {
	SchemaVersion int       `json:"schema_version"`
	Time          time.Time `json:"time"`
	ExecutionID   string    `json:"execution_id"`
	TenantID      string    `json:"tenant_id"`
	Subject       string    `json:"subject"`
	Roles         []string  `json:"roles"`
	// Decision is nil when the request was refused before policy ran
	// (e.g. a 400 after authentication).
	Decision *Decision `json:"decision"`
	Quota    Quota     `json:"quota"`
	// Language is the request's language (python, javascript or
	// typescript); empty when the request was refused before its body was
	// decoded.
	Language string `json:"language,omitempty"`
	// EnvironmentID names the run's package environment (the SHA-256 of
	// its lock: every package's version and hashes, the Python version and
	// platform), whether asked for by requirements, a lock or its id;
	// empty for a run without packages.
	EnvironmentID string `json:"environment_id,omitempty"`
	// SourceSHA256 is always set; Source only when the decision says record_source.
	SourceSHA256 string        `json:"source_sha256"`
	Source       string        `json:"source,omitempty"`
	Outcome      Outcome       `json:"outcome"`
	Usage        sandbox.Usage `json:"usage"`
	// Egress is the run's egress attempts: at most sandbox.MaxEgressAttempts,
	// each with its strings clipped (Log.Record enforces both);
	// EgressDropped counts the attempts left out.
	Egress        []sandbox.EgressAttempt `json:"egress"`
	EgressDropped int                     `json:"egress_dropped,omitempty"`
	// ToolCalls are the run's tool calls (code mode); ToolCallsDropped
	// counts those past the recorded ones.
	ToolCalls        []sandbox.ToolCall `json:"tool_calls,omitempty"`
	ToolCallsDropped int                `json:"tool_calls_dropped,omitempty"`
	// Secrets are the names of the brokered secrets the run was given
	// (at most secrets.MaxPerRun; never a value). Absent when none.
	Secrets []string `json:"secrets,omitempty"`
	// Files are the run's input files (path, bytes, SHA-256), at most
	// MaxFiles of them, paths clipped (Log.Record enforces both);
	// FilesDropped counts the files left out.
	Files        []File `json:"files,omitempty"`
	FilesDropped int    `json:"files_dropped,omitempty"`
	// Artifacts are the files collected from the run's /workspace/out
	// (name, bytes, SHA-256, media type), bounded the same way;
	// ArtifactsDropped counts those left out of the record, and
	// ArtifactsRefused the files the run left that were not collected
	// (the envelope's truncated.artifacts_dropped).
	Artifacts        []Artifact `json:"artifacts,omitempty"`
	ArtifactsDropped int        `json:"artifacts_dropped,omitempty"`
	ArtifactsRefused int        `json:"artifacts_refused,omitempty"`
	// RefusalsDropped is set on the record that stands for a subject's
	// requests refused by the refusal limiter (quota kind "refusals"): how
	// many more were answered 429 without a record of their own.
	RefusalsDropped int64 `json:"refusals_dropped,omitempty"`
	// Webhook is set on the record of one delivery attempt of an async
	// execution's callback (one record per attempt, besides the
	// execution's own record); Outcome is then the execution's, as
	// delivered.
	Webhook *Webhook `json:"webhook,omitempty"`
	TraceID string   `json:"trace_id"`
	SpanID  string   `json:"span_id"`
	// Truncated is set when the record, bounded as above, still encoded to
	// more than MaxRecordBytes and was cut further (see Record.shrink).
	Truncated bool `json:"truncated,omitempty"`
}

// Webhook is one delivery attempt of a callback (Standard Webhooks).
type Webhook struct {
	// ID is the webhook-id header: the same for every attempt of one
	// delivery.
	ID string `json:"id"`
	// URL is the callback URL without its query and fragment (they may
	// carry the receiver's tokens), clipped like egress hosts.
	URL     string `json:"url"`
	Attempt int    `json:"attempt"` // 1, 2, …
	// Status is the receiver's HTTP status (0: no answer).
	Status    int  `json:"status,omitempty"`
	Delivered bool `json:"delivered"`
	// Final: no attempt follows (delivered, out of attempts, or refused
	// for good).
	Final bool `json:"final"`
	// Error says why the attempt failed (clipped); empty when delivered.
	Error string `json:"error,omitempty"`
}

// Decision is the policy decision as recorded.
type Decision struct {
	ID            string         `json:"id"`
	Allow         bool           `json:"allow"`
	Reasons       []string       `json:"reasons"`
	NetworkAccess string         `json:"network_access"`
	Limits        sandbox.Limits `json:"limits"`
	Egress        []string       `json:"egress"`
	// Isolation is the decided isolation level, "jail" or "process"
	// (records written before it existed have none).
	Isolation string `json:"isolation,omitempty"`
	// Runtime is the decided Python runtime ("" for other languages and
	// records written before it existed).
	Runtime string `json:"runtime,omitempty"`
}

// Quota outcomes (Quota.Outcome).
const (
	QuotaAdmitted        = "admitted"         // quota admitted the run
	QuotaExceeded        = "exceeded"         // rate or concurrency refused it (429 QuotaExceeded)
	QuotaBudgetExhausted = "budget_exhausted" // the daily CPU budget refused it (429 BudgetExhausted)
	QuotaUnavailable     = "unavailable"      // the backend was down and failed closed (503)
	QuotaSkipped         = "skipped"          // refused before quota ran (bad request, policy)
)

// Quota is the admission outcome: "admitted", "exceeded", "budget_exhausted",
// "unavailable" or "skipped" (refused before quota ran).
type Quota struct {
	Outcome      string `json:"outcome"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// Kind is the dimension that refused the run ("rate", "concurrency",
	// "budget"); empty unless Outcome is "exceeded" or "budget_exhausted".
	Kind string `json:"kind,omitempty"`
}

// Outcome is what the caller was told.
type Outcome struct {
	HTTPStatus int    `json:"http_status"`
	Status     string `json:"status"` // "ok" | "error"
	ErrorType  string `json:"error_type,omitempty"`
	// Syscall names the escape-class syscall a SyscallDenied run was killed
	// for, or the rule: "x32_abi" (a number with the x32 bit set),
	// "foreign_arch" (another architecture's entry, int 0x80); "unknown"
	// when the kernel's audit record was out of reach. Empty for every
	// other outcome.
	Syscall string `json:"syscall,omitempty"`
}

// File is one input file of a run as recorded.
type File struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Artifact is one collected artifact of a run as recorded.
type Artifact struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	MIME   string `json:"mime"`
}

// MaxFiles bounds the input files and the artifacts a record lists (each;
// the rest are counted).
const MaxFiles = 100

// maxPathBytes bounds a recorded path or name (the request decoder allows
// no longer one).
const maxPathBytes = 1024
