package audit

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// ErrInvalidRecord is wrapped by every error Validate returns; the message
// names the offending field.
var ErrInvalidRecord = errors.New("invalid audit record")

var (
	sha256Hex  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	traceIDHex = regexp.MustCompile(`^[0-9a-f]{32}$`)
	spanIDHex  = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// Validate checks the invariants that audit/schema/record.v1.json states, so
// a wiring mistake fails loudly at the call site instead of leaving a record
// that pipelines reject later. It reports every problem, each naming its
// field (JSON name).
func (r *Record) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidRecord, field, fmt.Sprintf(format, args...)))
	}
	if r.SchemaVersion != SchemaVersion {
		bad("schema_version", "is %d, want %d", r.SchemaVersion, SchemaVersion)
	}
	if r.Time.IsZero() {
		bad("time", "must be set")
	}
	if r.ExecutionID == "" {
		bad("execution_id", "must not be empty")
	}
	if r.TenantID == "" {
		bad("tenant_id", "must not be empty (records are for authenticated requests)")
	}
	if r.Decision != nil && r.Decision.ID == "" {
		bad("decision.id", "must not be empty when a decision is recorded")
	}
	switch r.Quota.Outcome {
	case QuotaAdmitted, QuotaExceeded, QuotaBudgetExhausted, QuotaUnavailable, QuotaSkipped:
	case "":
		bad("quota.outcome", "must be set (%q when refused before quota ran)", QuotaSkipped)
	default:
		bad("quota.outcome", "%q is not one of admitted, exceeded, budget_exhausted, unavailable, skipped", r.Quota.Outcome)
	}
	if r.Quota.RetryAfterMS < 0 {
		bad("quota.retry_after_ms", "must not be negative")
	}
	switch r.Language {
	case "", sandbox.LanguagePython, sandbox.LanguageJavaScript, sandbox.LanguageTypeScript:
	default:
		bad("language", "%q is not python, javascript or typescript", r.Language)
	}
	if r.EnvironmentID != "" && !sha256Hex.MatchString(r.EnvironmentID) {
		bad("environment_id", "%q is not 64 lowercase hex digits", r.EnvironmentID)
	}
	if r.SourceSHA256 != "" && !sha256Hex.MatchString(r.SourceSHA256) {
		bad("source_sha256", "%q is not 64 lowercase hex digits", r.SourceSHA256)
	}
	if r.Outcome.HTTPStatus < 100 || r.Outcome.HTTPStatus > 599 {
		bad("outcome.http_status", "%d is not an HTTP status", r.Outcome.HTTPStatus)
	}
	switch r.Outcome.Status {
	case "ok":
		if r.Outcome.ErrorType != "" {
			bad("outcome.error_type", "must be empty when status is ok (got %q)", r.Outcome.ErrorType)
		}
	case "error":
		if r.Outcome.ErrorType == "" {
			bad("outcome.error_type", "must be set when status is error")
		}
	default:
		bad("outcome.status", "%q is not ok or error", r.Outcome.Status)
	}
	if r.EgressDropped < 0 {
		bad("egress_dropped", "must not be negative")
	}
	if r.RefusalsDropped < 0 {
		bad("refusals_dropped", "must not be negative")
	}
	if len(r.Secrets) > secrets.MaxPerRun {
		bad("secrets", "has %d names, at most %d", len(r.Secrets), secrets.MaxPerRun)
	}
	for i, name := range r.Secrets {
		if !secrets.ValidName(name) {
			bad(fmt.Sprintf("secrets[%d]", i), "is not a secret name")
		}
	}
	if r.Outcome.Syscall != "" && r.Outcome.ErrorType != sandbox.ErrSyscallDenied {
		bad("outcome.syscall", "must be empty unless error_type is SyscallDenied (got %q)", r.Outcome.ErrorType)
	}
	if r.TraceID != "" && !traceIDHex.MatchString(r.TraceID) {
		bad("trace_id", "%q is not 32 lowercase hex digits", r.TraceID)
	}
	if r.SpanID != "" && !spanIDHex.MatchString(r.SpanID) {
		bad("span_id", "%q is not 16 lowercase hex digits", r.SpanID)
	}
	return errors.Join(errs...)
}

// normalize makes nil lists empty (so the JSON has [] and never null where
// the schema says array), the time UTC, and bounds the egress attempts
// (sandbox.BoundEgress), counting what it leaves out in EgressDropped.
func (r *Record) normalize() {
	r.Time = r.Time.UTC()
	if r.Roles == nil {
		r.Roles = []string{}
	}
	var dropped int
	r.Egress, dropped = sandbox.BoundEgress(r.Egress)
	r.EgressDropped += dropped
	if r.Egress == nil {
		r.Egress = []sandbox.EgressAttempt{}
	}
	r.boundFiles(MaxFiles, maxPathBytes)
	if r.Decision != nil {
		d := *r.Decision
		if d.Reasons == nil {
			d.Reasons = []string{}
		}
		if d.Egress == nil {
			d.Egress = []string{}
		}
		r.Decision = &d
	}
}

// Bounds shrink applies to a record that encodes to more than MaxRecordBytes.
const (
	shrinkStringBytes = 256 // each string field it clips
	shrinkListItems   = 32  // each list it cuts
)

// shrink cuts r so it encodes well under MaxRecordBytes and marks it
// Truncated. It keeps what identifies the request and its outcome whole
// (ids, hashes, statuses, usage) and drops, in this order of harm: the
// source (its SHA-256 stays), the egress attempts (counted in
// EgressDropped), then clips every other string to shrinkStringBytes and
// every list to shrinkListItems. With those bounds the result stays far
// below MaxRecordBytes whatever the input: even if every byte needed a
// 6-byte JSON escape, three lists of 32 strings of 256 bytes and a dozen
// strings come to about 170 KiB.
func (r *Record) shrink() {
	r.Truncated = true
	r.Source = ""
	r.EgressDropped += len(r.Egress)
	r.Egress = []sandbox.EgressAttempt{}
	if len(r.ToolCalls) > shrinkListItems {
		r.ToolCallsDropped += len(r.ToolCalls) - shrinkListItems
		r.ToolCalls = r.ToolCalls[:shrinkListItems]
	}
	calls := make([]sandbox.ToolCall, len(r.ToolCalls))
	clip := func(s string) string {
		if len(s) <= shrinkStringBytes {
			return s
		}
		return strings.ToValidUTF8(s[:shrinkStringBytes], "")
	}
	clipAll := func(ss []string) []string {
		if len(ss) > shrinkListItems {
			ss = ss[:shrinkListItems]
		}
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = clip(s)
		}
		return out
	}
	for i, c := range r.ToolCalls {
		c.Args = nil // recorded arguments (record_args) go first
		c.Tool, c.Server, c.DecisionID, c.Outcome, c.Reason = clip(c.Tool), clip(c.Server), clip(c.DecisionID), clip(c.Outcome), clip(c.Reason)
		c.ArgsSHA256 = clip(c.ArgsSHA256)
		calls[i] = c
	}
	if r.ToolCalls != nil {
		r.ToolCalls = calls
	}
	r.boundFiles(shrinkListItems, shrinkStringBytes)
	r.ExecutionID, r.TenantID, r.Subject = clip(r.ExecutionID), clip(r.TenantID), clip(r.Subject)
	r.Roles = clipAll(r.Roles)
	r.Quota.Kind = clip(r.Quota.Kind)
	r.Outcome.Status, r.Outcome.ErrorType = clip(r.Outcome.Status), clip(r.Outcome.ErrorType)
	r.SourceSHA256, r.TraceID, r.SpanID = clip(r.SourceSHA256), clip(r.TraceID), clip(r.SpanID)
	r.Language, r.EnvironmentID = clip(r.Language), clip(r.EnvironmentID)
	if r.Decision != nil {
		d := *r.Decision
		d.ID, d.NetworkAccess, d.Isolation = clip(d.ID), clip(d.NetworkAccess), clip(d.Isolation)
		d.Reasons, d.Egress = clipAll(d.Reasons), clipAll(d.Egress)
		r.Decision = &d
	}
}

// boundFiles keeps at most items input files and artifacts, counting
// the rest, with their strings clipped to n bytes.
func (r *Record) boundFiles(items, n int) {
	if len(r.Files) > items {
		r.FilesDropped += len(r.Files) - items
		r.Files = r.Files[:items]
	}
	if len(r.Artifacts) > items {
		r.ArtifactsDropped += len(r.Artifacts) - items
		r.Artifacts = r.Artifacts[:items]
	}
	r.Files = clipFiles(r.Files, n)
	r.Artifacts = clipArtifacts(r.Artifacts, n)
}

// clipString cuts s to at most n bytes of valid UTF-8.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// clipFiles returns fs with every string clipped to n bytes.
func clipFiles(fs []File, n int) []File {
	return clipEach(fs, func(f File) File {
		return File{Path: clipString(f.Path, n), Bytes: f.Bytes, SHA256: clipString(f.SHA256, 64)}
	})
}

// clipArtifacts is clipFiles for artifacts.
func clipArtifacts(as []Artifact, n int) []Artifact {
	return clipEach(as, func(a Artifact) Artifact {
		return Artifact{Name: clipString(a.Name, n), Bytes: a.Bytes, SHA256: clipString(a.SHA256, 64), MIME: clipString(a.MIME, 127)}
	})
}

// clipEach returns xs with clip applied to each, a copy when it changed
// one (the caller's slice is never written).
func clipEach[T comparable](xs []T, clip func(T) T) []T {
	var out []T
	for i, x := range xs {
		c := clip(x)
		if c != x && out == nil {
			out = append([]T(nil), xs...)
		}
		if out != nil {
			out[i] = c
		}
	}
	if out == nil {
		return xs
	}
	return out
}
