package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/sandbox"
)

// Environments are a gateway's package environments (the execute flow's
// and POST /v1/prepare's; the execution.Environments interface). The
// gateway resolves requirements with uv (it has the index; no privilege
// needed) for the Python version and platform its executors announce, and
// the tenant's policy judges the resolved packages there, as in role all.
// Nothing is installed on the gateway: the run carries the lock
// (Spec.Lock, hashes) and the executor installs it into its own
// environment cache before the run. Prepared locks are kept in the
// dispatch Redis (P:dispatch:env:ID, envTTL, renewed on use), so an
// environment_id prepared on one gateway runs through any other.
type Environments struct {
	d   *Dispatcher
	cfg sandbox.Config
	obs environments.Observer
	// npm resolves npm requirements (they do not depend on the executors'
	// Python; the platform of optional dependencies is this host's).
	npm *environments.Cache

	mu sync.Mutex                     // guards by
	by map[string]*environments.Cache // runtime+python+platform → its resolver
}

// envTTL is how long a prepared environment's lock is kept unused.
const envTTL = 7 * 24 * time.Hour

// maxTargets bounds the resolvers kept (one per runtime, Python and
// platform the fleet has announced).
const maxTargets = 8

// lookupTimeout bounds the Redis round trips of FromLock and Lookup (which
// take no context).
const lookupTimeout = 2 * time.Second

// NewEnvironments returns the environments of a gateway dispatching with
// d; cfg is the gateway's sandbox section (deps_dir keeps uv's resolve
// cache; package_index, python_platform are not used: the executors
// announce their platform). obs may be nil.
func NewEnvironments(d *Dispatcher, cfg sandbox.Config, obs environments.Observer) *Environments {
	return &Environments{d: d, cfg: cfg, obs: obs, npm: environments.NewNPM(cfg, obs), by: map[string]*environments.Cache{}}
}

// For returns the environments of runtime name: resolved for the Python
// and platform the live executors serving it announce.
func (e *Environments) For(name string) *RuntimeEnvironments {
	return &RuntimeEnvironments{e: e, runtime: name}
}

// RuntimeEnvironments are a gateway's environments of one runtime (the
// execution.RuntimeEnvironments interface).
type RuntimeEnvironments struct {
	e       *Environments
	runtime string
}

// target is the resolver for the Python and platform of the live
// executors serving the runtime. Executors announcing different ones for
// it (a rootfs upgrade half rolled out) are refused: a lock resolved for
// one may not install on the other.
func (r *RuntimeEnvironments) target(ctx context.Context) (*environments.Cache, error) {
	e := r.e
	fleet, err := e.d.Executors(ctx)
	if err != nil {
		return nil, noExecutor("the dispatch Redis is unreachable", err)
	}
	var py, plat string
	served := false
	for _, a := range fleet {
		for _, rt := range a.Runtimes {
			if rt.Name != r.runtime || !rt.Available {
				continue
			}
			served = true
			switch {
			case rt.Platform == "":
			case py == "":
				py, plat = rt.PythonVersion, rt.Platform
			case rt.PythonVersion != py || rt.Platform != plat:
				return nil, &sandbox.UnavailableError{Reason: fmt.Sprintf("the executors announce different Pythons for runtime %s (%s %s and %s %s); runs with packages wait until they agree",
					r.runtime, clip(py, 32), clip(plat, 64), clip(rt.PythonVersion, 32), clip(rt.Platform, 64)), Hint: "finish rolling out one rootfs to every executor"}
			}
		}
	}
	if !served {
		return nil, &sandbox.UnavailableError{Reason: fmt.Sprintf("no executor serves runtime %q (the live executors serve %s)", r.runtime, strings.Join(fleetTargets(fleet), ", ")),
			Hint: "start an executor whose sandbox.runtimes lists it"}
	}
	if py == "" {
		return nil, noExecutor("no live executor serving runtime "+r.runtime+" announces a Python to resolve packages for (start executors with its rootfs)", nil)
	}
	key := r.runtime + " " + py + " " + plat
	e.mu.Lock()
	defer e.mu.Unlock()
	if res := e.by[key]; res != nil {
		return res, nil
	}
	res, err := environments.NewFor(e.cfg, py, plat, e.obs)
	if err != nil {
		return nil, &sandbox.UnavailableError{Reason: "an executor's announcement: " + err.Error()}
	}
	if len(e.by) >= maxTargets {
		clear(e.by)
	}
	e.by[key] = res
	return res, nil
}

// Resolve resolves reqs for the runtime's executors' Python and platform.
func (r *RuntimeEnvironments) Resolve(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error) {
	res, err := r.target(ctx)
	if err != nil {
		return environments.Environment{}, nil, err
	}
	return res.Resolve(ctx, reqs)
}

// ResolveNPM resolves npm requirements (JavaScript and TypeScript runs) on
// this gateway, whatever the runtime: the executors install the lock.
func (r *RuntimeEnvironments) ResolveNPM(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error) {
	return r.e.npm.ResolveNPM(ctx, reqs)
}

// FromLock reads a caller's lock: an npm lock on this gateway (it does
// not depend on the executors), a Python one for the runtime's executors.
// Without a live executor serving the runtime a Python lock is only
// parsed (no environment id; the run is refused for want of an executor,
// or, in a run of another language, for holding Python packages).
func (r *RuntimeEnvironments) FromLock(lock string) (environments.Environment, error) {
	if npm.IsLock(lock) {
		return r.e.npm.FromLock(lock)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	if res, err := r.target(ctx); err == nil {
		return res.FromLock(lock)
	}
	return parsedLock(lock)
}

// parsedLock is the Python lock parsed, without an environment id (no
// executor says what Python it is for).
func parsedLock(lock string) (environments.Environment, error) {
	pkgs, err := environments.ParseLock(lock)
	if err != nil {
		return environments.Environment{}, err
	}
	return environments.Environment{Lock: environments.RenderLock(pkgs), Packages: pkgs, Ecosystem: environments.EcosystemPython}, nil
}

// Lookup finds an environment prepared (or run) through any gateway, for
// the runtime's executors' current Python and platform.
func (r *RuntimeEnvironments) Lookup(id string) (environments.Environment, bool, error) {
	e := r.e
	if !environments.ValidID(id) {
		return environments.Environment{}, false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	lock, err := e.d.rdb.GetEx(ctx, e.d.k.env(id), envTTL).Result()
	if errors.Is(err, redis.Nil) {
		return environments.Environment{}, false, nil
	}
	if err != nil {
		return environments.Environment{}, false, noExecutor("the dispatch Redis is unreachable", fmt.Errorf("reading environment %s: %w", id, err))
	}
	var res *environments.Cache
	if npm.IsLock(lock) {
		res = e.npm
	} else if r.runtime == "" {
		// A run of a language without a runtime (JavaScript, TypeScript)
		// named a Python environment: its packages say so (the flow
		// refuses it naming environment_id).
		env, err := parsedLock(lock)
		return env, err == nil, nil
	} else if res, err = r.target(ctx); err != nil {
		return environments.Environment{}, false, err
	}
	env, err := res.FromLock(lock)
	if err != nil || env.ID != id {
		// Resolved for another Python or platform (the executors' rootfs changed).
		return environments.Environment{}, false, nil
	}
	return env, true, nil
}

// Prepare keeps env's lock for Lookup; the executors install it when a
// run needs it (dir is empty: nothing is installed here).
func (r *RuntimeEnvironments) Prepare(ctx context.Context, env environments.Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error) {
	e := r.e
	if env.ID == "" {
		return "", false, nil, nil
	}
	if err := e.d.rdb.Set(ctx, e.d.k.env(env.ID), env.Lock, envTTL).Err(); err != nil {
		return "", false, nil, noExecutor("the dispatch Redis is unreachable", fmt.Errorf("keeping environment %s: %w", env.ID, err))
	}
	return "", false, nil, nil
}
