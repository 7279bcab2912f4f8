//go:build !linux

package environments

import (
	"context"
	"errors"
	"runtime"
	"time"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/sandbox"
)

// Observer receives environment events (see the Linux build).
type Observer interface {
	EnvironmentEvent(event string, d time.Duration)
}

// Cache resolves and installs environments; off Linux it cannot.
type Cache struct{}

// New always fails off Linux.
func New(sandbox.Config, Observer) (*Cache, error) {
	return nil, &sandbox.UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}

// NewFor always fails off Linux.
func NewFor(sandbox.Config, string, string, Observer) (*Cache, error) {
	return nil, &sandbox.UnavailableError{Reason: "unsupported operating system", Hint: "run execgate on Linux", Err: errUnsupported}
}

// Target is empty off Linux.
func (*Cache) Target() (string, string) { return "", "" }

// Resolve always fails off Linux.
func (*Cache) Resolve(context.Context, []string) (Environment, *sandbox.ErrorInfo, error) {
	return Environment{}, nil, &sandbox.UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// NewNPM returns environments that cannot resolve off Linux.
func NewNPM(sandbox.Config, Observer) *Cache { return &Cache{} }

// ResolveNPM always fails off Linux.
func (*Cache) ResolveNPM(context.Context, []string) (Environment, *sandbox.ErrorInfo, error) {
	return Environment{}, nil, &sandbox.UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

// FromLock reads a lock into its environment (no Python version known).
func (*Cache) FromLock(lock string) (Environment, error) {
	if npm.IsLock(lock) {
		return NPMFromLock(lock, sandbox.DefaultNPMRegistry)
	}
	pkgs, err := ParseLock(lock)
	if err != nil {
		return Environment{}, err
	}
	return Environment{ID: environmentID("", "", pkgs), Lock: RenderLock(pkgs), Packages: pkgs, Ecosystem: EcosystemPython}, nil
}

// Lookup finds nothing off Linux.
func (*Cache) Lookup(string) (Environment, bool, error) { return Environment{}, false, nil }

// Prepare always fails off Linux.
func (*Cache) Prepare(context.Context, Environment) (string, bool, *sandbox.ErrorInfo, error) {
	return "", false, nil, &sandbox.UnavailableError{Reason: "unsupported operating system", Err: errUnsupported}
}

var errUnsupported = errors.New("environments: installs need Linux, not " + runtime.GOOS)
