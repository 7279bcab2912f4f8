//go:build !linux

package sandbox

import (
	"context"
	"time"
)

// EnvObserver receives environment events (see the Linux build).
type EnvObserver interface {
	EnvironmentEvent(event string, d time.Duration)
}

// Environments resolves and installs environments; off Linux it cannot.
type Environments struct{}

// NewEnvironments always fails off Linux.
func NewEnvironments(Config, EnvObserver) (*Environments, error) {
	return nil, &UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}

// NewEnvironmentsFor always fails off Linux.
func NewEnvironmentsFor(Config, string, string, EnvObserver) (*Environments, error) {
	return nil, &UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}

// Target is empty off Linux.
func (*Environments) Target() (string, string) { return "", "" }

// Resolve always fails off Linux.
func (*Environments) Resolve(context.Context, []string) (Environment, *ErrorInfo, error) {
	return Environment{}, nil, &UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// FromLock reads a lock into its environment (no Python version known).
func (*Environments) FromLock(lock string) (Environment, error) {
	pkgs, err := ParseLock(lock)
	if err != nil {
		return Environment{}, err
	}
	return Environment{ID: environmentID("", "", pkgs), Lock: RenderLock(pkgs), Packages: pkgs}, nil
}

// Lookup finds nothing off Linux.
func (*Environments) Lookup(string) (Environment, bool, error) { return Environment{}, false, nil }

// Prepare always fails off Linux.
func (*Environments) Prepare(context.Context, Environment) (string, bool, *ErrorInfo, error) {
	return "", false, nil, &UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// WithEnvironments does nothing off Linux.
func WithEnvironments(*Environments) Option { return func(*Runner) {} }
