package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
)

// SandboxOptions say how NewSandbox assembles a sandbox. Every command that
// runs jails (serve, run, diagnose, bench) goes through it, so the runners,
// their egress proxy and their package environments are put together one
// way.
type SandboxOptions struct {
	// Sandbox is the sandbox section of the config (callers may set
	// WarmPool: 0 for a one-shot runner).
	Sandbox sandbox.Config
	// Runtimes are the runtimes to open. Empty: Sandbox.Runtimes (default
	// python3.11 and python3.13).
	Runtimes []string
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
	// EnsureRootfs builds each runtime's rootfs first when it is missing
	// or stale, reporting to Progress (nil: io.Discard). Without it the
	// rootfs must be there.
	EnsureRootfs bool
	Progress     io.Writer
	// Metrics observe the package environments. Nil: none.
	Metrics *telemetry.Metrics
	// Logger gets the egress fallback warning. Nil: slog.Default().
	Logger *slog.Logger
}

// Sandbox is an assembled sandbox: one runner and one package environment
// cache per runtime (package runtimes), and their egress proxy. Close
// releases the runners.
type Sandbox struct {
	// Runtimes routes runs and environments to their runtime. Nil when no
	// runtime could be opened at all.
	Runtimes *runtimes.Set
	// Proxy is the egress proxy (nil without SandboxOptions.Egress).
	Proxy *egress.Proxy
	// EgressErr is why the runners serve no network mode proxy although
	// Egress was given (EgressOptional); nil when they do.
	EgressErr error
}

// NewSandbox assembles a sandbox from o: the egress proxy, then for each
// runtime its rootfs (EnsureRootfs), its package environments and its
// runner. A bad egress config is an error and a nil Sandbox. Past that
// step the Sandbox is never nil. A runtime that cannot be opened (its
// rootfs cannot be built, the host cannot jail) keeps its error in the
// Set, and its runs are refused with it; the error is non-nil (an
// *sandbox.UnavailableError) only when no runtime has a runner, and even
// then Runtimes holds the environments of those with a rootfs, so the
// gateway can still report on egress and resolve packages without a jail.
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
	names := o.Runtimes
	if len(names) == 0 {
		names = o.Sandbox.Runtimes
	}
	if len(names) == 0 {
		names = sandbox.DefaultRuntimes
	}
	var rts []*runtimes.Runtime
	var firstErr error
	for _, name := range names {
		rt := s.openRuntime(ctx, o, name, log)
		if rt.Err != nil {
			if firstErr == nil {
				firstErr = rt.Err
			}
			if len(names) > 1 {
				log.Warn("runtime unavailable; runs asking for it are refused", "runtime", name, "err", rt.Err)
			}
		}
		rts = append(rts, rt)
	}
	set, err := runtimes.New(rts...)
	if err != nil {
		return s, err
	}
	s.Runtimes = set
	if !set.Usable() {
		return s, asUnavailable(firstErr)
	}
	return s, nil
}

// openRuntime builds (EnsureRootfs) and opens one runtime. Its Err says
// why it has no runner.
func (s *Sandbox) openRuntime(ctx context.Context, o SandboxOptions, name string, log *slog.Logger) *runtimes.Runtime {
	cfg := o.Sandbox.ForRuntime(name)
	rt := &runtimes.Runtime{Name: name, Dir: cfg.RootfsDir}
	if !limits.KnownRuntime(name) {
		rt.Err = &sandbox.UnavailableError{Reason: fmt.Sprintf("runtime %q is not one of %s", name, strings.Join(limits.Runtimes, ", "))}
		return rt
	}
	if o.EnsureRootfs {
		progress := o.Progress
		if progress == nil {
			progress = io.Discard
		}
		ro := rootfs.Options{Dir: cfg.RootfsDir, Runtime: name, PythonPath: cfg.PythonPath,
			DebianMirror: cfg.DebianMirror, Progress: progress}
		if _, err := rootfs.Ensure(ctx, ro); err != nil {
			hint := "run `execgate rootfs build --runtime " + name + "` to see why"
			if name == limits.HostRuntime {
				hint += "; it needs " + cfg.PythonPath
			} else {
				hint += "; it needs the Debian archive (or sandbox.debian_mirror) once, then its cached packages"
			}
			rt.Err = &sandbox.UnavailableError{Reason: "the rootfs of runtime " + name + " at " + cfg.RootfsDir + " could not be built", Hint: hint, Err: err}
			return rt
		}
	}
	if m, err := jaillayout.ReadManifest(cfg.RootfsDir); err == nil {
		rt.Manifest = m
	}
	envs, err := newEnvironments(cfg, o.Metrics)
	if err != nil {
		rt.Err = err
		return rt
	}
	rt.Envs = envs
	var opts []sandbox.Option
	if s.Proxy != nil {
		opts = append(opts, sandbox.WithEgress(s.Proxy))
	}
	r, err := sandbox.NewRunner(cfg, opts...)
	if err != nil && s.Proxy != nil && o.EgressOptional {
		// A host that cannot serve network mode proxy (e.g. a work dir the
		// jail user cannot reach) can still run everything else: proxy runs
		// are refused as SandboxUnavailable and /readyz names the reason.
		if plain, perr := sandbox.NewRunner(cfg); perr == nil {
			s.EgressErr = err
			log.Warn("network mode proxy is unavailable; runs asking for it are refused", "runtime", name, "err", err)
			r, err = plain, nil
		}
	}
	if err != nil {
		rt.Err = err
		return rt
	}
	rt.Runner = r
	return rt
}

// newEnvironments is the package environment cache of sc (one runtime's
// rootfs), observed by metrics (nil: none): runs' packages are installed
// in it before they reach the runner (which binds them).
func newEnvironments(sc sandbox.Config, metrics *telemetry.Metrics) (*environments.Cache, error) {
	var obs environments.Observer
	if metrics != nil {
		obs = metrics
	}
	return environments.New(sc, obs)
}

// Environments are the package environments of every runtime of the
// Sandbox (the execute flow's and the prepare route's); nil when there
// are none.
func (s *Sandbox) Environments() execution.Environments {
	if s.Runtimes == nil {
		return nil
	}
	return setEnvironments{s.Runtimes}
}

// setEnvironments gives the flow each runtime's environments.
type setEnvironments struct{ set *runtimes.Set }

func (e setEnvironments) For(language, runtime string) (execution.RuntimeEnvironments, error) {
	envs, err := e.set.Environments(language, runtime)
	if err != nil {
		return nil, err
	}
	return envs, nil
}

// Close stops the runners' warm jails.
func (s *Sandbox) Close() error {
	if s.Runtimes == nil {
		return nil
	}
	return s.Runtimes.Close()
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
