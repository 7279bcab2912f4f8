package dispatch

import (
	"context"
	"errors"
	"fmt"
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
	by map[string]*environments.Cache // python+platform → its resolver
}

// envTTL is how long a prepared environment's lock is kept unused.
const envTTL = 7 * 24 * time.Hour

// maxTargets bounds the resolvers kept (one per Python and platform the
// fleet has announced).
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

// ResolveNPM resolves npm requirements (JavaScript and TypeScript runs) on
// this gateway: the executors install the lock.
func (e *Environments) ResolveNPM(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error) {
	return e.npm.ResolveNPM(ctx, reqs)
}

// target is the resolver for the live executors' Python and platform.
// Executors announcing different ones (a rootfs upgrade half rolled out)
// are refused: a lock resolved for one may not install on the other.
func (e *Environments) target(ctx context.Context) (*environments.Cache, error) {
	fleet, err := e.d.Executors(ctx)
	if err != nil {
		return nil, noExecutor("the dispatch Redis is unreachable", err)
	}
	var py, plat string
	for _, a := range fleet {
		switch {
		case a.Python == "":
		case py == "":
			py, plat = a.Python, a.Platform
		case a.Python != py || a.Platform != plat:
			return nil, &sandbox.UnavailableError{Reason: fmt.Sprintf("the executors announce different Pythons (%s %s and %s %s); runs with packages wait until they agree",
				clip(py, 32), clip(plat, 64), clip(a.Python, 32), clip(a.Platform, 64)), Hint: "finish rolling out one rootfs to every executor"}
		}
	}
	if py == "" {
		return nil, noExecutor("no live executor announces a Python to resolve packages for (start executors with a rootfs)", nil)
	}
	key := py + " " + plat
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.by[key]; r != nil {
		return r, nil
	}
	r, err := environments.NewFor(e.cfg, py, plat, e.obs)
	if err != nil {
		return nil, &sandbox.UnavailableError{Reason: "an executor's announcement: " + err.Error()}
	}
	if len(e.by) >= maxTargets {
		clear(e.by)
	}
	e.by[key] = r
	return r, nil
}

// Resolve resolves reqs for the executors' Python and platform.
func (e *Environments) Resolve(ctx context.Context, reqs []string) (environments.Environment, *sandbox.ErrorInfo, error) {
	r, err := e.target(ctx)
	if err != nil {
		return environments.Environment{}, nil, err
	}
	return r.Resolve(ctx, reqs)
}

// FromLock reads a caller's lock. Without a live executor it is only
// parsed (no environment id; the run is refused for want of an executor).
func (e *Environments) FromLock(lock string) (environments.Environment, error) {
	if npm.IsLock(lock) {
		return e.npm.FromLock(lock)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	if r, err := e.target(ctx); err == nil {
		return r.FromLock(lock)
	}
	pkgs, err := environments.ParseLock(lock)
	if err != nil {
		return environments.Environment{}, err
	}
	return environments.Environment{Lock: environments.RenderLock(pkgs), Packages: pkgs, Ecosystem: environments.EcosystemPython}, nil
}

// Lookup finds an environment prepared (or run) through any gateway, for
// the executors' current Python and platform.
func (e *Environments) Lookup(id string) (environments.Environment, bool, error) {
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
	r := e.npm
	if !npm.IsLock(lock) {
		if r, err = e.target(ctx); err != nil {
			return environments.Environment{}, false, err
		}
	}
	env, err := r.FromLock(lock)
	if err != nil || env.ID != id {
		// Resolved for another Python or platform (the executors' rootfs changed).
		return environments.Environment{}, false, nil
	}
	return env, true, nil
}

// Prepare keeps env's lock for Lookup; the executors install it when a
// run needs it (dir is empty: nothing is installed here).
func (e *Environments) Prepare(ctx context.Context, env environments.Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error) {
	if env.ID == "" {
		return "", false, nil, nil
	}
	if err := e.d.rdb.Set(ctx, e.d.k.env(env.ID), env.Lock, envTTL).Err(); err != nil {
		return "", false, nil, noExecutor("the dispatch Redis is unreachable", fmt.Errorf("keeping environment %s: %w", env.ID, err))
	}
	return "", false, nil, nil
}
