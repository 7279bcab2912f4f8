package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
)

// SandboxOptions say how NewSandbox assembles a sandbox. Every command that
// runs jails (serve, run, diagnose, bench) goes through it, so the runner,
// its egress proxy and its package environments are put together one way.
type SandboxOptions struct {
	// Sandbox is the sandbox section of the config (callers may set
	// WarmPool: 0 for a one-shot runner).
	Sandbox sandbox.Config
	// Egress, when set, serves network mode proxy through an egress proxy
	// made from it; nil: proxy runs are refused as SandboxUnavailable.
	Egress *egress.Config
	// EgressResolver resolves the hosts tools reach through the proxy. Nil:
	// the system resolver.
	EgressResolver egress.Resolver
	// EgressOptional keeps a runner that cannot serve network mode proxy
	// (Sandbox.EgressErr says why) instead of failing: the gateway still
	// serves every other run.
	EgressOptional bool
	// EnsureRootfs builds the rootfs first when it is missing or stale,
	// reporting to Progress (nil: io.Discard). Without it the rootfs must
	// be there.
	EnsureRootfs bool
	Progress     io.Writer
	// Metrics observe the package environments. Nil: none.
	Metrics *telemetry.Metrics
	// Logger gets the egress fallback warning. Nil: slog.Default().
	Logger *slog.Logger
}

// Sandbox is an assembled sandbox: the runner and the collaborators wired
// into it. Close releases the runner.
type Sandbox struct {
	Runner *sandbox.Runner
	// Environments is the package environment cache runs' packages are
	// installed in before they reach the runner (which binds them); the
	// flow and the gateway's prepare share it.
	Environments *environments.Cache
	// Proxy is the egress proxy (nil without SandboxOptions.Egress).
	Proxy *egress.Proxy
	// EgressErr is why the runner serves no network mode proxy although
	// Egress was given (EgressOptional); nil when it does.
	EgressErr error
}

// NewSandbox assembles a sandbox from o, in order: the egress proxy, the
// rootfs (EnsureRootfs), the package environments, the runner. A bad egress
// config is an error and a nil Sandbox. Past that step the Sandbox is never
// nil, even with an error (a host that cannot jail gets a
// *sandbox.UnavailableError): it holds what could be made, the Proxy and,
// when the rootfs is there, the Environments, so the gateway can still
// report on egress and resolve packages without a jail.
func NewSandbox(ctx context.Context, o SandboxOptions) (*Sandbox, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sandbox{}
	if o.Egress != nil {
		p, err := egress.New(*o.Egress, egress.Options{Resolver: o.EgressResolver})
		if err != nil {
			return nil, fmt.Errorf("egress proxy: %w", err)
		}
		s.Proxy = p
	}
	if o.EnsureRootfs {
		progress := o.Progress
		if progress == nil {
			progress = io.Discard
		}
		if _, err := rootfs.Ensure(ctx, rootfs.Options{Dir: o.Sandbox.RootfsDir, PythonPath: o.Sandbox.PythonPath, Progress: progress}); err != nil {
			return s, &sandbox.UnavailableError{
				Reason: "the rootfs at " + o.Sandbox.RootfsDir + " could not be built",
				Hint:   "run `execgate rootfs build --out " + o.Sandbox.RootfsDir + "` to see why; it needs " + o.Sandbox.PythonPath,
				Err:    err,
			}
		}
	}
	envs, err := newEnvironments(o.Sandbox, o.Metrics)
	if err != nil {
		return s, err
	}
	s.Environments = envs
	var opts []sandbox.Option
	if s.Proxy != nil {
		opts = append(opts, sandbox.WithEgress(s.Proxy))
	}
	r, err := sandbox.NewRunner(o.Sandbox, opts...)
	if err != nil && s.Proxy != nil && o.EgressOptional {
		// A host that cannot serve network mode proxy (e.g. a work dir the
		// jail user cannot reach) can still run everything else: proxy runs
		// are refused as SandboxUnavailable and /readyz names the reason.
		if plain, perr := sandbox.NewRunner(o.Sandbox); perr == nil {
			s.EgressErr = err
			log.Warn("network mode proxy is unavailable; runs asking for it are refused", "err", err)
			r, err = plain, nil
		}
	}
	if err != nil {
		return s, err
	}
	s.Runner = r
	return s, nil
}

// newEnvironments is the package environment cache of sc, observed by
// metrics (nil: none): the one NewSandbox assembles, and the one an App
// with an injected Runner still prepares through.
func newEnvironments(sc sandbox.Config, metrics *telemetry.Metrics) (*environments.Cache, error) {
	var obs environments.Observer
	if metrics != nil {
		obs = metrics
	}
	return environments.New(sc, obs)
}

// Close stops the runner's warm jails.
func (s *Sandbox) Close() error {
	if s.Runner == nil {
		return nil
	}
	return s.Runner.Close()
}

// asUnavailable is err as the *sandbox.UnavailableError the gateway answers
// with (SandboxUnavailable).
func asUnavailable(err error) *sandbox.UnavailableError {
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) {
		ue = &sandbox.UnavailableError{Reason: "the sandbox could not be set up", Err: err}
	}
	return ue
}
