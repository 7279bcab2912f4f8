package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
)

// EnvObserver receives what operators graph about environments (the
// telemetry package implements it): event is one of
//
//	resolved        uv resolved a requirement list (d: how long)
//	resolve_cached  a recent resolution of the same list was reused
//	hit             an environment was already installed
//	built           an environment was installed (d: how long)
//	build_failed    an install failed (d: how long)
//	evicted         an idle environment was removed for the cache cap
//
// Calls must be cheap and must not block.
type EnvObserver interface {
	EnvironmentEvent(event string, d time.Duration)
}

// Environments resolves requirement lists into locks and installs locks
// into the deps cache (deps_env.go). It is safe for concurrent use; several
// Environments (and processes) may share one DepsDir: installs are
// serialised per environment by a lock file, resolutions are single-flight
// within the process.
type Environments struct {
	d          *depsInstaller
	platform   string
	resolveTTL time.Duration // <0: never reuse a resolution
	cacheMax   int64         // bytes; <0: no cap
	obs        EnvObserver
	now        func() time.Time
	resolving  singleflight.Group
}

// evictIdle is how long an environment must have gone unused before the
// cache cap may remove it: longer than any run (queue + install + the
// platform's longest timeout), so a jail never loses its bound directory.
const evictIdle = 15 * time.Minute

// NewEnvironments reads the rootfs manifest (for the Python version) and
// returns the environments of cfg.DepsDir. It needs no root; uv is looked
// up when first needed. obs may be nil.
func NewEnvironments(cfg Config, obs EnvObserver) (*Environments, error) {
	m, err := checkRootfs(cfg.RootfsDir)
	if err != nil {
		return nil, err
	}
	if cfg.PythonPlatform == "" {
		cfg.PythonPlatform = m.Platform // a runtime's own; the host runtime's is the default
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := newEnvironments(cfg, m.PythonVersion, obs)
	if err := e.d.forRuntime(cfg.RootfsDir, m); err != nil {
		return nil, &UnavailableError{Reason: "preparing package installs for runtime " + m.Runtime, Err: err}
	}
	if m.Loader != "" {
		e.d.platform = e.platform
	}
	return e, nil
}

// NewEnvironmentsFor returns environments that resolve for another host's
// jails: Python pythonVersion ("3.11.2") on uv's platform ("x86_64-
// manylinux_2_28"), as a gateway resolves for its executors (which install
// the lock themselves). It reads no rootfs; cfg.DepsDir keeps the resolve
// cache.
func NewEnvironmentsFor(cfg Config, pythonVersion, platform string, obs EnvObserver) (*Environments, error) {
	if !pythonVersionRE.MatchString(pythonVersion) {
		return nil, fmt.Errorf("python version %q is not like 3.11.2", clip(pythonVersion, 32))
	}
	if !platformRE.MatchString(platform) {
		return nil, fmt.Errorf("python platform %q is not a uv platform like x86_64-manylinux_2_28", clip(platform, 64))
	}
	cfg = cfg.withDefaults()
	cfg.PythonPlatform = platform
	return newEnvironments(cfg, pythonVersion, obs), nil
}

func newEnvironments(cfg Config, pyVersion string, obs EnvObserver) *Environments {
	ttl := time.Duration(cfg.ResolveCacheSeconds) * time.Second
	return &Environments{
		d: &depsInstaller{
			dir:       cfg.DepsDir,
			check:     func() error { return checkBindSource(cfg.DepsDir) },
			python:    cfg.PythonPath,
			pyVersion: pyVersion,
			timeout:   time.Duration(cfg.DepsTimeoutMS) * time.Millisecond,
			index:     cfg.PackageIndex,
			maxBytes:  cfg.DepsMaxMB << 20,
			findUV:    func() (string, error) { return FindUV(cfg) },
			getenv:    os.Getenv,
			inflight:  map[string]*depsCall{},
		},
		platform:   cfg.PythonPlatform,
		resolveTTL: ttl,
		cacheMax:   cfg.DepsCacheMaxMB << 20,
		obs:        obs,
		now:        time.Now,
	}
}

// Target is the Python version and uv platform e resolves for (an
// executor announces them to its gateways).
func (e *Environments) Target() (pythonVersion, platform string) { return e.d.pyVersion, e.platform }

func (e *Environments) event(ev string, d time.Duration) {
	if e.obs != nil {
		e.obs.EnvironmentEvent(ev, d)
	}
}

// indexID describes the configured index (without credentials) for keys.
func (e *Environments) indexID() string {
	i := e.d.index
	return fmt.Sprintf("url=%s find_links=%s no_index=%t", redactURL(i.URL), strings.Join(i.FindLinks, ","), i.NoIndex)
}

// Resolve resolves requirement strings (see NormalizeSpecs) to the complete
// locked set for this rootfs's Python and platform, wheels only. A list
// that cannot be resolved (no such package or version, no wheel for this
// platform, conflicts, the index unreachable) is a DependencyError with
// uv's output; bad strings are a plain error (wrapping ErrInvalidLock is not
// used here: the caller names the field).
func (e *Environments) Resolve(ctx context.Context, reqs []string) (Environment, *ErrorInfo, error) {
	specs, err := NormalizeSpecs(reqs)
	if err != nil {
		return Environment{}, nil, err
	}
	key := resolveKey(e.d.pyVersion, e.platform, e.indexID(), specs)
	cached := filepath.Join(e.d.dir, ".resolved", key+".txt")
	if e.resolveTTL >= 0 {
		if fi, err := os.Stat(cached); err == nil && e.now().Sub(fi.ModTime()) < e.resolveTTL {
			if b, err := os.ReadFile(cached); err == nil {
				if env, err := e.FromLock(string(b)); err == nil {
					e.event("resolve_cached", 0)
					return env, nil, nil
				}
			}
		}
	}
	type answer struct {
		env     Environment
		failure *ErrorInfo
	}
	v, err, _ := e.resolving.Do(key, func() (any, error) {
		start := e.now()
		env, failure, err := e.resolve(context.WithoutCancel(ctx), specs)
		if err == nil && failure == nil {
			e.event("resolved", e.now().Sub(start))
			if e.resolveTTL >= 0 {
				_ = writeFileAtomic(cached, []byte(env.Lock))
			}
		}
		return answer{env, failure}, err
	})
	if err != nil {
		return Environment{}, nil, err
	}
	a := v.(answer)
	return a.env, a.failure, nil
}

func (e *Environments) resolve(ctx context.Context, specs []string) (Environment, *ErrorInfo, error) {
	if err := os.MkdirAll(e.d.dir, 0o755); err != nil {
		return Environment{}, nil, &UnavailableError{Reason: "sandbox.deps_dir: creating " + e.d.dir, Err: err}
	}
	uv, err := e.d.findUV()
	if err != nil {
		return Environment{}, nil, err
	}
	work, err := os.MkdirTemp(e.d.dir, ".tmp-resolve-")
	if err != nil {
		return Environment{}, nil, &UnavailableError{Reason: "sandbox.deps_dir: creating a resolve directory", Err: err}
	}
	defer os.RemoveAll(work)
	in := filepath.Join(work, requirementsIn)
	if err := os.WriteFile(in, []byte(strings.Join(specs, "\n")+"\n"), 0o600); err != nil {
		return Environment{}, nil, &UnavailableError{Reason: "sandbox.deps_dir: writing " + in, Err: err}
	}
	args := []string{"pip", "compile",
		"--no-config", "--no-python-downloads",
		"--only-binary", ":all:", // wheels only: resolution never runs a build backend
		"--python-version", e.d.pyVersion,
		"--python-platform", e.platform,
		"--generate-hashes", "--emit-index-annotation", "--annotation-style", "split",
		"--no-header", "--quiet", "--system-certs",
		"--cache-dir", filepath.Join(e.d.dir, ".cache"),
		"--color", "never", "--no-progress",
	}
	args = append(args, e.d.indexArgs()...)
	args = append(args, requirementsIn)
	// uv names the input file relative to its working directory in "# via".
	out, failure, err := e.d.runUVOutput(ctx, uv, work, "resolving "+strings.Join(specs, " "), args)
	if failure != nil || err != nil {
		return Environment{}, failure, err
	}
	env, perr := e.FromLock(out)
	if perr != nil {
		return Environment{}, &ErrorInfo{Type: ErrDependencyError, Message: "resolving " + strings.Join(specs, " ") + ": uv's lock could not be read: " + perr.Error(), Traceback: clip(out, maxInstallerOutput)}, nil
	}
	return env, nil, nil
}

// FromLock reads a lock (ParseLock) into its environment. The error wraps
// ErrInvalidLock.
func (e *Environments) FromLock(lock string) (Environment, error) {
	pkgs, err := ParseLock(lock)
	if err != nil {
		return Environment{}, err
	}
	return Environment{ID: environmentID(e.d.pyVersion, e.platform, pkgs), Lock: RenderLock(pkgs), Packages: pkgs}, nil
}

// Lookup returns the environment of a prepared (or previously used) id.
func (e *Environments) Lookup(id string) (Environment, bool, error) {
	if !ValidEnvironmentID(id) {
		return Environment{}, false, nil
	}
	b, err := os.ReadFile(filepath.Join(e.d.dir, ".env", id+".txt"))
	if errors.Is(err, os.ErrNotExist) {
		return Environment{}, false, nil
	}
	if err != nil {
		return Environment{}, false, &UnavailableError{Reason: "sandbox.deps_dir: reading environment " + id, Err: err}
	}
	env, err := e.FromLock(string(b))
	if err != nil || env.ID != id {
		// Written for another Python or platform (the rootfs changed).
		return Environment{}, false, nil
	}
	return env, true, nil
}

// Prepare installs env (when not installed yet) and returns its directory;
// hit says it was already there. Concurrent calls for one environment
// install it once. A failed install is a DependencyError.
func (e *Environments) Prepare(ctx context.Context, env Environment) (dir string, hit bool, failure *ErrorInfo, err error) {
	final := filepath.Join(e.d.dir, env.ID)
	if isDir(final) {
		e.touch(final)
		e.event("hit", 0)
		return final, true, nil, nil
	}
	lockPath := filepath.Join(e.d.dir, ".env", env.ID+".txt")
	if err := writeFileAtomic(lockPath, []byte(env.Lock)); err != nil {
		return "", false, nil, &UnavailableError{Reason: "sandbox.deps_dir: writing the lock of " + env.ID, Err: err}
	}
	start := e.now()
	names := make([]string, len(env.Packages))
	for i, p := range env.Packages {
		names[i] = p.Name + "==" + p.Version
	}
	what := "environment " + env.ID[:12] + " (" + strings.Join(names, " ") + ")"
	dir, led, failure, err := e.d.ensureKey(ctx, env.ID, what, []string{"--no-deps", "--require-hashes", "-r", lockPath})
	switch {
	case err != nil:
		return "", false, nil, err
	case failure != nil:
		if led {
			e.event("build_failed", e.now().Sub(start))
		}
		return "", false, failure, nil
	}
	e.touch(dir)
	if led {
		e.event("built", e.now().Sub(start))
		e.evict(env.ID)
	}
	return dir, false, nil, nil
}

// touch marks an environment used now (its mtime orders eviction).
func (e *Environments) touch(dir string) {
	now := e.now()
	_ = os.Chtimes(dir, now, now)
}

// evict removes the least recently used environments idle for evictIdle
// until the installed environments fit cacheMax, never keep.
func (e *Environments) evict(keep string) {
	if e.cacheMax < 0 {
		return
	}
	entries, err := os.ReadDir(e.d.dir)
	if err != nil {
		return
	}
	type envDir struct {
		name string
		used time.Time
		size int64
	}
	var dirs []envDir
	var total int64
	for _, ent := range entries {
		if !ent.IsDir() || !ValidEnvironmentID(ent.Name()) {
			continue
		}
		fi, err := ent.Info()
		if err != nil {
			continue
		}
		sz := treeSize(filepath.Join(e.d.dir, ent.Name()))
		total += sz
		dirs = append(dirs, envDir{ent.Name(), fi.ModTime(), sz})
	}
	sort.Slice(dirs, func(i, j int) bool { return dirs[i].used.Before(dirs[j].used) })
	for _, d := range dirs {
		if total <= e.cacheMax {
			return
		}
		if d.name == keep || e.now().Sub(d.used) < evictIdle {
			continue
		}
		// Out of the name first (atomic), then removed.
		doomed := filepath.Join(e.d.dir, ".tmp-evict-"+d.name)
		if os.Rename(filepath.Join(e.d.dir, d.name), doomed) != nil {
			continue
		}
		_ = os.RemoveAll(doomed)
		total -= d.size
		e.event("evicted", 0)
	}
}

// writeFileAtomic writes data to path (0644) through writeAtomic, creating
// the parent directory.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeAtomic(path, data, 0o644)
}

// WithEnvironments makes the runner install Spec.Lock through e (sharing
// its observer and single-flight state with the gateway's prepare).
func WithEnvironments(e *Environments) Option {
	return func(r *Runner) { r.envs = e }
}
