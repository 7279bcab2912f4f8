package dispatch

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/secrets"
)

// WireVersion is the version of the Job and Reply formats. An executor
// refuses a job of another version (gateways and executors of one release
// share it). 2: starts are confirmed by the gateway, and tool calls and
// output chunks are signed frames of the run (frames.go). 3: a job carries
// the run's input files and stdin, a reply its artifacts. 4: runs carry
// their runtime and go to the stream of their target (a runtime, or Deno),
// and a run's brokered secrets travel sealed to the executor confirmed
// (secrets.go).
const WireVersion = 4

// Bounds on what crosses Redis.
const (
	// maxIDBytes bounds run and executor ids.
	maxIDBytes = 128
	// replyOverhead is what a reply may hold beyond the run's three
	// output_bytes caps (logs, egress attempts, tool calls, error).
	replyOverhead = 4 << 20
	// maxReasonBytes bounds a refusal reason.
	maxReasonBytes = 256
)

// maxJobBytes bounds an encoded job: the source and args are capped by
// the gateway's server.max_source_bytes / max_args_bytes (256 KiB each by
// default, 1 MiB body), fixtures and lock likewise (4 MiB for them); and
// the input files by the platform's files and files_bytes (base64 in the
// job, with their paths).
var maxJobBytes = 4<<20 + int(limits.Max.FilesBytes/3*4+4+limits.Max.Files*(workspace.MaxPathBytes+64))

// sigSep separates the hex signature from the payload in a signed value.
const sigSep = "."

// Job is a decided run as it crosses the stream. It carries everything
// the executor needs to run it and nothing else: no principal, no tenant
// policy, no tool credential (tool calls go back to the gateway).
type Job struct {
	V       int    `json:"v"`
	RunID   string `json:"run_id"`
	Gateway string `json:"gateway"`
	// IssuedMS and ExpiresMS (unix ms): not started by ExpiresMS, the job
	// is refused and never run.
	IssuedMS  int64    `json:"issued_ms"`
	ExpiresMS int64    `json:"expires_ms"`
	Spec      WireSpec `json:"spec"`
	// Bridge: the run's tool calls are served by the gateway over the
	// run's bridge list.
	Bridge bool `json:"bridge,omitempty"`
	// Output: the run's stdout and stderr chunks go to the gateway as
	// they come, over the run's output list (live output).
	Output bool `json:"output,omitempty"`
	// Trace carries the gateway's trace context (W3C traceparent,
	// tracestate) so the executor's span joins the request's trace.
	Trace map[string]string `json:"trace,omitempty"`
}

// maxTraceBytes bounds each trace header taken from a job.
const maxTraceBytes = 512

// WireSpec is sandbox.Spec without its Bridge (a live object) and Deps (a
// directory of the gateway's host: the executor installs the Lock), and
// with its secrets' names only (their values are sealed for the executor
// confirmed: secrets.go).
type WireSpec struct {
	ExecutionID  string          `json:"execution_id"`
	TenantID     string          `json:"tenant_id"`
	Language     string          `json:"language,omitempty"`
	Source       string          `json:"source"`
	Entrypoint   string          `json:"entrypoint,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
	Mode         string          `json:"mode,omitempty"`
	Variables    json.RawMessage `json:"variables,omitempty"`
	ToolFixtures json.RawMessage `json:"tool_fixtures,omitempty"`
	Network      sandbox.Network `json:"network"`
	Limits       sandbox.Limits  `json:"limits"`
	Lock         string          `json:"lock,omitempty"`
	EgressAllow  []string        `json:"egress_allow,omitempty"`
	Isolation    string          `json:"isolation,omitempty"`
	Runtime      string          `json:"runtime,omitempty"`
	Files        []sandbox.File  `json:"files,omitempty"`
	Stdin        string          `json:"stdin,omitempty"`
	// Secrets are the names of the run's brokered secrets.
	Secrets []string `json:"secrets,omitempty"`
}

func wireSpec(s sandbox.Spec) WireSpec {
	return WireSpec{
		ExecutionID: s.ExecutionID, TenantID: s.TenantID, Language: s.Language, Source: s.Source,
		Entrypoint: s.Entrypoint, Args: s.Args, Mode: s.Mode, Variables: s.Variables,
		ToolFixtures: s.ToolFixtures, Network: s.Network, Limits: s.Limits,
		Lock: s.Lock, EgressAllow: s.EgressAllow,
		Isolation: s.Isolation, Runtime: s.Runtime, Files: s.Files, Stdin: s.Stdin,
		Secrets: secretNames(s.Secrets),
	}
}

// secretNames are vals' names (nil for none).
func secretNames(vals []secrets.Value) []string {
	if len(vals) == 0 {
		return nil
	}
	return secrets.Names(vals)
}

func (w WireSpec) spec() sandbox.Spec {
	return sandbox.Spec{
		ExecutionID: w.ExecutionID, TenantID: w.TenantID, Language: w.Language, Source: w.Source,
		Entrypoint: w.Entrypoint, Args: w.Args, Mode: w.Mode, Variables: w.Variables,
		ToolFixtures: w.ToolFixtures, Network: w.Network, Limits: w.Limits,
		Lock: w.Lock, EgressAllow: w.EgressAllow,
		Isolation: w.Isolation, Runtime: w.Runtime, Files: w.Files, Stdin: w.Stdin,
	}
}

// Reply is an executor's answer to a job: the run's result, or why its
// sandbox could not run it (nothing ran).
type Reply struct {
	V        int             `json:"v"`
	RunID    string          `json:"run_id"`
	Executor string          `json:"executor"`
	Result   *sandbox.Result `json:"result,omitempty"`
	// DeniedSyscall is Result.DeniedSyscall (not in the envelope's JSON).
	DeniedSyscall string       `json:"denied_syscall,omitempty"`
	Unavailable   *Unavailable `json:"unavailable,omitempty"`
}

// Unavailable is a sandbox.UnavailableError across the wire.
type Unavailable struct {
	Reason string   `json:"reason"`
	Hint   string   `json:"hint,omitempty"`
	Log    []string `json:"log,omitempty"`
}

// signer signs and verifies values with the spec key. Domain strings keep
// a signed job from passing as a reply and back.
type signer struct{ key []byte }

const (
	domainJob   = "execgate-dispatch-job-v1\n"
	domainReply = "execgate-dispatch-reply-v1\n"
)

func (s signer) mac(domain string, payload []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(domain))
	m.Write(payload)
	return m.Sum(nil)
}

// seal returns hex(mac) "." payload.
func (s signer) seal(domain string, payload []byte) string {
	return hex.EncodeToString(s.mac(domain, payload)) + sigSep + string(payload)
}

var errBadSignature = errors.New("bad signature")

// open checks a sealed value and returns its payload.
func (s signer) open(domain, sealed string) ([]byte, error) {
	sig, payload, ok := strings.Cut(sealed, sigSep)
	if !ok {
		return nil, errors.New("not a signed value")
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return nil, errBadSignature
	}
	if !hmac.Equal(got, s.mac(domain, []byte(payload))) {
		return nil, errBadSignature
	}
	return []byte(payload), nil
}

func decodeHex(s string) ([]byte, error) { return hex.DecodeString(s) }

// validID: ids become parts of Redis keys and log lines.
func validID(id string) error {
	if id == "" || len(id) > maxIDBytes || strings.ContainsAny(id, " \t\r\n{}") {
		return fmt.Errorf("bad id (1..%d bytes, no spaces or braces)", maxIDBytes)
	}
	return nil
}

// maxReplyBytes bounds the reply of a run with these limits: its output,
// and its artifacts (base64, each with its name, media type and digest).
func maxReplyBytes(l sandbox.Limits) int64 {
	return 3*l.OutputBytes + replyOverhead + l.ArtifactsBytes/3*4 + 4 + l.Artifacts*1024
}

// clip bounds s for logs and the refusal stream.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
