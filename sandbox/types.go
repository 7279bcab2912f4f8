// Package sandbox runs one tool, once, inside nsjail and reports what happened.
//
// The runner renders an nsjail config from a typed Spec, starts nsjail with an
// argv built in Go (never a shell), feeds the embedded Python harness its
// request on stdin, collects capped stdout/stderr, reads the harness's result
// envelope from its own file descriptor, and classifies the outcome into one
// of the run outcome types below. Usage numbers come from the kernel (cgroups
// and rusage), never from the harness.
//
//	r, err := sandbox.NewRunner(cfg, sandbox.WithEgress(proxy))
//	res, err := r.Run(ctx, sandbox.Spec{Source: src, Entrypoint: "run", ...})
//
// Run returns a non-nil error only when the jail could not be created at all
// (an *UnavailableError); everything that happened to the tool is in Result.
//
// Limits hold for the jail as a whole: memory and pids through the run's
// cgroups, CPU time through the run's CPU accounting cgroup, which the
// runner watches while the tool runs (RLIMIT_CPU only backs it up per
// process). Network mode proxy needs an EgressProxy (WithEgress): the run's
// session listens on a unix socket in the jail's own host directory, bound
// into the jail, and the harness relays 127.0.0.1:3128 to it. Packages are
// installed by package environments into Config.DepsDir before the run;
// the runner binds the run's directory (Spec.Deps) read-only and installs
// nothing.
package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/internal/unavailable"
	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/secrets"
)

// Network is the network mode of a run.
type Network string

// Network modes (DESIGN §10).
const (
	NetworkNone  Network = "none"  // own net namespace, nothing reachable
	NetworkProxy Network = "proxy" // own net namespace, only the egress proxy
	NetworkHost  Network = "host"  // the host network, admin-granted only
)

// Limits bound one run (package limits). Every field must be set: the
// runner refuses a Spec whose limits do not pass limits.Validate rather
// than filling them in; callers that do not ask the policy complete theirs
// with limits.Default.
type Limits = limits.Limits

// Spec is everything the runner needs for one run. Inputs will grow, so it is a
// struct; zero values are safe (network none, mode run) except Limits, which
// the caller must set (a zero limit is refused, never defaulted).
type Spec struct {
	ExecutionID string
	TenantID    string
	Language    string          // "python" (default); "javascript" later
	Source      string          // the tool's source code
	Entrypoint  string          // default "run"
	Args        json.RawMessage // any JSON; nil means null
	Mode        string          // "run" (default) or "test"
	// Variables are the fixture variables offered as context.variables.
	Variables json.RawMessage
	// ToolFixtures maps a tool name to the value a call to it returns (test mode).
	ToolFixtures json.RawMessage
	Network      Network
	Limits       Limits
	// Deps is the directory of the run's package environment, installed
	// below Config.DepsDir by package environments before the run, bound
	// read-only at /opt/execgate/deps; "" for none. The runner installs
	// nothing.
	Deps string
	// Lock is the lock of the run's environment (pip's hashes format), for
	// a runner that installs it on another host (dispatch: the executor
	// prepares it there and sets Deps). The sandbox runner refuses a Lock
	// without Deps rather than run without the packages.
	Lock        string
	EgressAllow []string // host[:port] globs, enforced by the egress proxy in proxy mode
	// Isolation is the run's isolation level, IsolationJail ("" too) or
	// IsolationProcess (zygote.go), as policy decided.
	Isolation string
	// Runtime is the Python runtime the run was decided for
	// ("python3.13"); "" for other languages. A runner serves one runtime
	// (its rootfs): the service routes a spec to the runner of its runtime
	// (package runtimes), which leaves this field alone.
	Runtime string
	// Bridge answers the run's tool requests (context.tools.search,
	// describe, run) for its lifetime; nil grants no tools. Test-mode runs
	// ignore it and answer from ToolFixtures (FixtureBridge).
	Bridge Bridge
	// Output, if set, sees the tool's stdout and stderr as they are
	// captured (live output, issue #15). Nil: nobody watches.
	Output OutputFunc
	// Secrets are the brokered secrets granted to the run (package
	// secrets). They reach the run's harness in its request only (never
	// nsjail's argv, environment or config, nor a file on the host): the
	// tool reads them as context.secrets and as files of mode 0400 on the
	// run's own tmpfs at jaillayout.SecretsDir. Run masks them out of the
	// Result and the live output (MaskResult, secrets.Stream).
	Secrets []secrets.Value
	// Files are the run's input files, written read-only under
	// jaillayout.WorkspaceDir (the tool's working directory) before the
	// hand-off: at most Limits.Files of them and Limits.FilesBytes in all,
	// each path as workspace.CheckPath wants it (the runner refuses a spec
	// that breaks either: InvalidInput).
	Files []File
	// Stdin is what the tool reads on its standard input (sys.stdin,
	// Deno.stdin); empty: end of file at once.
	Stdin string
}

// File is one input file of a run (package workspace).
type File = workspace.File

// Artifact is one file a run left in jaillayout.WorkspaceOutDir, collected
// by the runner within the run's limits.artifacts and artifacts_bytes
// (package workspace).
type Artifact = workspace.Artifact

// DroppedArtifact is a file of jaillayout.WorkspaceOutDir that was not
// collected, and why.
type DroppedArtifact = workspace.Dropped

// OutputFunc receives a chunk of a run's stdout or stderr (stream is
// StreamStdout or StreamStderr) as soon as the capture kept it: only bytes
// the capture keeps, so the output cap counts the same bytes whether
// anyone watches or not, in order per stream, each chunk whole UTF-8
// characters (invalid bytes as they came) of at most 32 KiB. It is called
// from the stream's reader: it must not block (a slow consumer drops or
// coalesces, never stalls the run) and must not keep p after it returns.
type OutputFunc func(stream string, p []byte)

// The streams an OutputFunc sees.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// Status is the envelope status.
type Status string

// Envelope statuses.
const (
	StatusOK    Status = "ok"
	StatusError Status = "error"
)

// Run outcome types (DESIGN §4). Every Result with StatusError carries one.
//
// How to add one:
//  1. Add the constant here with a comment saying when it is used.
//  2. Teach the classifier (classify.go) or the harness to produce it.
//  3. Add a classifier table case and, where it can be provoked, a containment test.
//  4. Add it to the OpenAPI enum in gateway.
const (
	ErrToolError          = "ToolError"          // the tool raised; traceback holds user frames only
	ErrInvalidSource      = "InvalidSource"      // syntax or import-time error, with line
	ErrEntrypointNotFound = "EntrypointNotFound" // no callable with the entrypoint's name
	ErrInvalidResult      = "InvalidResult"      // return value not JSON-serialisable
	ErrInvalidInput       = "InvalidInput"       // the tool rejected its args on purpose (execgate_runtime)
	ErrTimeout            = "Timeout"            // wall-clock limit reached
	ErrCPULimit           = "CPULimit"           // CPU-time limit reached
	ErrMemoryLimit        = "MemoryLimit"        // memory cgroup OOM
	ErrOutputLimit        = "OutputLimit"        // result larger than the output cap
	ErrSyscallDenied      = "SyscallDenied"      // killed by seccomp
	ErrDependencyError    = "DependencyError"    // requirements could not be installed
	ErrSandboxCrashed     = "SandboxCrashed"     // jail died without an envelope
	ErrProtocolMismatch   = "ProtocolMismatch"   // harness and gateway disagree on the protocol version
	ErrExecutorLost       = "ExecutorLost"       // the executor running it died or stopped answering (server.role gateway); never run again
	ErrCancelled          = "Cancelled"          // the caller cancelled the run or went away; it was stopped
)

// ErrCancelledByCaller is the cause (context.WithCancelCause) a caller
// gives when it cancels a run on purpose (DELETE /v1/executions/{id}); the
// run ends Cancelled saying so. A context that ends with any cause other
// than a deadline is Cancelled too (the caller went away).
var ErrCancelledByCaller = errors.New("cancelled by its caller")

// ErrorInfo describes why a run ended in error.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Traceback string `json:"traceback,omitempty"`
	Line      int    `json:"line,omitempty"` // source line for InvalidSource
	// Column is the 1-based column of a SyntaxError (InvalidSource); 0 when
	// unknown (an import-time exception has a line only).
	Column int `json:"column,omitempty"`
}

// Truncated says which streams were cut at the output cap, and which
// artifacts were dropped.
type Truncated struct {
	Stdout bool `json:"stdout"`
	Stderr bool `json:"stderr"`
	// Artifacts are the files of /workspace/out that were not collected
	// (at most workspace.MaxDropped of them, each with its reason);
	// ArtifactsDropped counts all of them. Absent when none was dropped.
	Artifacts        []DroppedArtifact `json:"artifacts,omitempty"`
	ArtifactsDropped int               `json:"artifacts_dropped,omitempty"`
}

// Usage is measured by the kernel for the whole jail.
type Usage struct {
	WallMS       int64 `json:"wall_ms"`
	CPUMS        int64 `json:"cpu_ms"`
	PeakMemoryKB int64 `json:"peak_memory_kb"`
	// Warm says the run was handed a pre-started jail from the warm pool
	// (absent: the jail was started for this run).
	Warm bool `json:"warm,omitempty"`
	// Isolation is the level the run ran at: "jail" or "process". A run
	// asked for at level process runs at level jail when no zygote place
	// is free (never the other way round); absent when nothing ran.
	Isolation string `json:"isolation,omitempty"`
	// Runtime is what ran the tool: the Python runtime ("python3.13") or
	// "deno" (JavaScript, TypeScript). Set by the service's router
	// (package runtimes); absent when nothing ran.
	Runtime string `json:"runtime,omitempty"`
	// BridgeCPUMS is the gateway CPU charged for the run's tool bridge
	// requests (code mode: search, describe and run; toolbridge/charge.go),
	// charged to the tenant's daily budget with CPUMS. The gateway sets it
	// (the sandbox never does); absent when the run made none.
	BridgeCPUMS int64 `json:"bridge_cpu_ms,omitempty"`
}

// LogLine is one line logged by the tool through context.log.
type LogLine struct {
	Level   string `json:"level"`
	Message string `json:"message"`
}

// EgressAttempt is one connection attempt seen by the egress proxy. Host is
// what the tool asked for (clipped, see Bounded); IP is the address that was
// checked (and dialled, when Allowed).
type EgressAttempt struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	IP      string `json:"ip,omitempty"`
}

// Result is what happened to one run.
type Result struct {
	Status    Status          `json:"status"`
	Result    json.RawMessage `json:"result"`
	Stdout    string          `json:"stdout"`
	Stderr    string          `json:"stderr"`
	Truncated Truncated       `json:"truncated"`
	Error     *ErrorInfo      `json:"error,omitempty"`
	Usage     Usage           `json:"usage"`
	Logs      []LogLine       `json:"logs,omitempty"`
	Egress    []EgressAttempt `json:"egress,omitempty"`
	// EgressDropped counts the attempts beyond the MaxEgressAttempts kept in
	// Egress (proxy mode only).
	EgressDropped int `json:"egress_dropped,omitempty"`
	// ToolCalls are the run's tool calls as recorded by its Bridge (when
	// it is a ToolCallRecorder), in order.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Artifacts are the files the run left in /workspace/out, collected
	// after its processes were gone, in name order, within its
	// limits.artifacts and artifacts_bytes (Truncated.Artifacts lists what
	// was dropped).
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// NsjailLog holds nsjail's own log lines (not user output); kept for
	// diagnosis and SandboxCrashed tracebacks.
	NsjailLog []string `json:"-"`
	// DeniedSyscall is set on a SyscallDenied outcome: the escape-class
	// syscall the kernel's audit record named (package seccomp, e.g.
	// "unshare"), the ABI rule that killed it ("x32_abi", "foreign_arch"),
	// or "unknown". A bounded set: metrics may use it as a
	// label.
	DeniedSyscall string `json:"-"`
}

// MaskResult masks what m masks (secret values, and their common forms)
// in everything of r a tool controls: stdout, stderr, the result (each
// JSON string), logs, the error, egress attempts, tool calls and the
// artifacts (maskArtifacts: names, media types, content). Nothing of r is
// changed in place: a masked field gets a new value (r's slices may be
// shared with a caller). A nil m masks nothing. Every runner path (the
// sandbox's Run, a split mode executor's reply, the flow before the
// envelope, the artifact store and the audit record) goes through it.
//
// How to add a field a tool controls: mask it here (text with m.String,
// JSON with m.JSON, bytes with m.Bytes); the
// TestMaskResultCoversEveryToolControlledField case fails until it is.
func MaskResult(r *Result, m *secrets.Masker) {
	if m == nil {
		return
	}
	r.Stdout = m.String(r.Stdout)
	r.Stderr = m.String(r.Stderr)
	r.Result = m.JSON(r.Result)
	if r.Logs != nil {
		logs := make([]LogLine, len(r.Logs))
		for i, l := range r.Logs {
			logs[i] = LogLine{Level: m.String(l.Level), Message: m.String(l.Message)}
		}
		r.Logs = logs
	}
	if r.Error != nil {
		e := *r.Error
		e.Message, e.Traceback = m.String(e.Message), m.String(e.Traceback)
		r.Error = &e
	}
	if r.Egress != nil {
		eg := make([]EgressAttempt, len(r.Egress))
		for i, a := range r.Egress {
			a.Host, a.Reason = m.String(a.Host), m.String(a.Reason)
			eg[i] = a
		}
		r.Egress = eg
	}
	if r.ToolCalls != nil {
		calls := make([]ToolCall, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			c.Tool, c.Server, c.Outcome, c.Reason = m.String(c.Tool), m.String(c.Server), m.String(c.Outcome), m.String(c.Reason)
			c.Args = m.JSON(c.Args)
			calls[i] = c
		}
		r.ToolCalls = calls
	}
	maskArtifacts(r, m)
}

// ReasonMaskedName is why an artifact is dropped whose name, once a
// secret in it is masked, is the name of an artifact before it (the
// artifacts of a run are kept and fetched by name).
const ReasonMaskedName = "its name, with a secret masked, is another artifact's"

// maskArtifacts masks r's artifacts for MaskResult: each name, media type
// (one that held a match becomes the one its masked name gives) and
// content; an artifact whose content was masked gets its new size and
// SHA-256 (masking only shrinks: a match of at least 4 bytes becomes
// secrets.Mask, so the run's artifact bounds still hold). An artifact
// whose masked name repeats an earlier one is dropped (ReasonMaskedName).
// The names of the files not collected are masked too.
func maskArtifacts(r *Result, m *secrets.Masker) {
	if r.Truncated.Artifacts != nil {
		dropped := make([]DroppedArtifact, len(r.Truncated.Artifacts))
		for i, d := range r.Truncated.Artifacts {
			dropped[i] = DroppedArtifact{Name: m.String(d.Name), Reason: m.String(d.Reason)}
		}
		r.Truncated.Artifacts = dropped
	}
	if r.Artifacts == nil {
		return
	}
	arts := make([]Artifact, 0, len(r.Artifacts))
	seen := make(map[string]bool, len(r.Artifacts))
	for _, a := range r.Artifacts {
		name := m.String(a.Name)
		if mime := m.String(a.MIME); mime != a.MIME {
			a.MIME = workspace.MIMEOf(name, "")
		}
		if data := m.Bytes(a.Data); len(data) != len(a.Data) {
			sum := sha256.Sum256(data)
			a.Data, a.Bytes, a.SHA256 = data, int64(len(data)), hex.EncodeToString(sum[:])
		}
		if seen[name] {
			r.Truncated.ArtifactsDropped++
			if len(r.Truncated.Artifacts) < workspace.MaxDropped {
				r.Truncated.Artifacts = append(r.Truncated.Artifacts, DroppedArtifact{Name: name, Reason: ReasonMaskedName})
			}
			continue
		}
		seen[name] = true
		a.Name = name
		arts = append(arts, a)
	}
	r.Artifacts = arts
}

// ErrorType returns the outcome type, or "" when the run was ok.
func (r *Result) ErrorType() string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Type
}

// UnavailableError means the jail could not be created: nsjail is missing, or
// the host refused namespaces, mounts, cgroups or seccomp. Nothing was run.
// The gateway maps it to 503 SandboxUnavailable. Its fields are Reason (one
// line: what failed), Log (nsjail's own log lines, if it ran), Hint (what
// the operator can do) and Err (the underlying error); Detail renders Log
// and Hint. The sandbox's rooms (cgroups, seccomp, zygote, uids, view)
// return the same type.
type UnavailableError = unavailable.Error
