//go:build !linux

package sandbox

import (
	"context"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// errUnsupported: nsjail, namespaces and cgroups are Linux-only.
var errUnsupported = unavailable.ErrUnsupported

// Runner runs tools in nsjail; on this OS it cannot.
type Runner struct {
	egress           EgressProxy // set by WithEgress; unused here
	importsUnchecked bool        // set by WithoutImportCheck; unused here
}

// NewRunner always fails off Linux.
func NewRunner(Config, ...Option) (*Runner, error) {
	return nil, &UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}

// Run always fails off Linux.
func (r *Runner) Run(context.Context, Spec) (Result, error) {
	return Result{}, &UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// Warm always fails off Linux.
func (r *Runner) Warm(context.Context, Spec, int) (int, error) {
	return 0, &UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// Close does nothing off Linux.
func (r *Runner) Close() error { return nil }

// Info is empty off Linux.
func (r *Runner) Info() Info { return Info{ProtocolVersion: jaillayout.ProtocolVersion} }

// ProbeCgroups always fails off Linux.
func ProbeCgroups(Config) (cgroups.Probe, error) {
	return cgroups.Probe{}, &UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}
