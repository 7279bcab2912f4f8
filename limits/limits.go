// Package limits is the one description of what bounds a run: the Limits
// type the policy decides and the sandbox enforces, the platform's default
// and maximum sets, Validate, and what a request that names no language,
// entrypoint, network access, mode or isolation is given. It imports nothing of execgate's, so the
// policy (which carries OPA) and the sandbox (which must stay light) share
// it without importing each other.
//
// The policy owns the values: policies/platform.rego's limits_default and
// limits_max. Default and Max repeat them for the paths that do not ask the
// policy (`execgate run`, the benchmarks, rootfs verify, the sandbox's warm
// pool); a test in package policy fails when the two drift apart. The
// sandbox never fills in a missing limit: it refuses one (Validate).
package limits

import (
	"errors"
	"fmt"
)

// The request defaults. The policy applies them to a request
// (policy.Request.WithDefaults); the sandbox reads an empty Spec field as
// the same value, so a caller of the runner that skips the policy (execgate
// run, diagnose, the benchmarks) gets what a request would.
const (
	DefaultLanguage      = "python"
	DefaultEntrypoint    = "run"
	DefaultNetworkAccess = "none"
	DefaultMode          = "run"
	DefaultIsolation     = "jail"
	// DefaultRuntime is the Python runtime of a run that names none, for
	// a tenant whose policy data lists no runtimes (platform.rego's
	// runtime_default). A tenant that lists some gets the first.
	DefaultRuntime = "python3.11"
	// HostRuntime names the fallback runtime copied from the host's
	// interpreter (off unless sandbox.runtimes lists it).
	HostRuntime = "host"
)

// Runtimes are the Python runtimes a request may name (platform.rego's
// runtimes): the two built from pinned Debian packages
// (rootfs/runtimes.lock.json) and the host fallback. A name outside this
// list is a bad request; one the tenant is not granted is a policy denial;
// one the service does not serve is SandboxUnavailable.
var Runtimes = []string{"python3.11", "python3.13", HostRuntime}

// KnownRuntime reports whether name is one of Runtimes.
func KnownRuntime(name string) bool {
	for _, r := range Runtimes {
		if r == name {
			return true
		}
	}
	return false
}

// Limits bound one run. Every field is positive in a run; in a request
// (policy input), zero means "not requested".
type Limits struct {
	TimeoutMS   int64 `json:"timeout_ms"`   // wall-clock limit, milliseconds
	CPUMS       int64 `json:"cpu_ms"`       // CPU time limit, milliseconds
	MemoryMB    int64 `json:"memory_mb"`    // memory cgroup limit, MiB
	Pids        int64 `json:"pids"`         // pids cgroup limit
	OutputBytes int64 `json:"output_bytes"` // cap on each of stdout, stderr and the result
	TmpMB       int64 `json:"tmp_mb"`       // size of the /tmp (and /dev/shm) tmpfs, MiB
	// Files and FilesBytes bound the input files a request carries (read
	// only under /workspace): their number and their total size in bytes.
	Files      int64 `json:"files"`
	FilesBytes int64 `json:"files_bytes"`
	// Artifacts and ArtifactsBytes bound what is collected from
	// /workspace/out after the run: how many files and how many bytes in
	// all; the rest is dropped (truncated.artifacts says which and why).
	Artifacts      int64 `json:"artifacts"`
	ArtifactsBytes int64 `json:"artifacts_bytes"`
}

// Default is the platform's default set (platform.rego limits_default):
// what the policy decides for a limit the request did not ask for.
var Default = Limits{
	TimeoutMS:   5000,
	CPUMS:       5000,
	MemoryMB:    256,
	Pids:        32,
	OutputBytes: 1 << 20,
	TmpMB:       64,

	Files:          32,
	FilesBytes:     8 << 20,
	Artifacts:      32,
	ArtifactsBytes: 8 << 20,
}

// Max is the platform's maximum set (platform.rego limits_max): no
// decision exceeds it, and the sandbox refuses a run that does.
var Max = Limits{
	TimeoutMS:   60000,
	CPUMS:       60000,
	MemoryMB:    2048,
	Pids:        256,
	OutputBytes: 16 << 20,
	TmpMB:       1024,

	Files:          1000,
	FilesBytes:     64 << 20,
	Artifacts:      1000,
	ArtifactsBytes: 64 << 20,
}

// Or returns l with every zero field taken from d: how a caller that does
// not ask the policy (a CLI flag set, a benchmark) completes the few limits
// it chose, usually with Default.
func (l Limits) Or(d Limits) Limits {
	for _, f := range l.Fields() {
		if *f.V == 0 {
			*f.V = *d.field(f.Key)
		}
	}
	return l
}

// Validate checks that every limit is positive and at most Max. The error
// names each bad field (limits.<key>).
func (l Limits) Validate() error {
	var errs []error
	for _, f := range l.Fields() {
		limit := *Max.field(f.Key)
		switch v := *f.V; {
		case v <= 0:
			errs = append(errs, fmt.Errorf("limits.%s: %d is not positive (every limit must be set)", f.Key, v))
		case v > limit:
			errs = append(errs, fmt.Errorf("limits.%s: %d is above the platform maximum of %d", f.Key, v, limit))
		}
	}
	return errors.Join(errs...)
}

// Field is one limit of a Limits: its JSON key and a pointer to its value.
type Field struct {
	Key string
	V   *int64
}

// Fields lists l's limits with their JSON keys, in declaration order: the
// one enumeration the policy's input and decision codecs, its memo key and
// Validate share, so a new limit is added here once.
func (l *Limits) Fields() []Field {
	return []Field{
		{"timeout_ms", &l.TimeoutMS},
		{"cpu_ms", &l.CPUMS},
		{"memory_mb", &l.MemoryMB},
		{"pids", &l.Pids},
		{"output_bytes", &l.OutputBytes},
		{"tmp_mb", &l.TmpMB},
		{"files", &l.Files},
		{"files_bytes", &l.FilesBytes},
		{"artifacts", &l.Artifacts},
		{"artifacts_bytes", &l.ArtifactsBytes},
	}
}

// Keys are the limits' JSON keys, in declaration order.
var Keys = func() []string {
	var l Limits
	var keys []string
	for _, f := range l.Fields() {
		keys = append(keys, f.Key)
	}
	return keys
}()

func (l *Limits) field(key string) *int64 {
	for _, f := range l.Fields() {
		if f.Key == key {
			return f.V
		}
	}
	panic("limits: no field " + key)
}
