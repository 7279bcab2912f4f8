package environments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/execgate/execgate/environments/npm"
	"github.com/execgate/execgate/internal/atomicfile"
	"github.com/execgate/execgate/sandbox"
)

// Observer receives what operators graph about environments (the
// telemetry package implements it): event is one of
//
//	resolved        uv resolved a requirement list (d: how long)
//	resolve_cached  a recent resolution of the same list was reused
//	hit             an environment was already installed
//	built           an environment was installed (d: how long)
//	build_failed    an install failed (d: how long)
//	evicted         an idle environment was removed for the cache cap
//	download_trimmed      a cached download (an npm tarball, uv's cache)
//	                      was removed for the cache cap
//	download_trim_failed  `uv cache clean` failed or timed out
//
// Calls must be cheap and must not block.
type Observer interface {
	EnvironmentEvent(event string, d time.Duration)
}

// Cache resolves requirement lists into locks and installs locks into the
// deps cache (see the package doc). It is safe for concurrent use; several
// Caches (and processes) may share one deps dir: installs are
// serialised per environment by a lock file, resolutions are single-flight
// within the process.
type Cache struct {
	d          *depsInstaller
	platform   string
	npm        npmSource
	resolveTTL time.Duration // <0: never reuse a resolution
	cacheMax   int64         // bytes; <0: no cap
	obs        Observer
	now        func() time.Time
	resolving  singleflight.Group
	cleaningUV atomic.Bool  // a `uv cache clean` for the cap is under way
	lastSweep  atomic.Int64 // when sweepResolved last looked (Unix ns)
	lastLeft   atomic.Int64 // when sweepLeftovers last looked (Unix ns)
}

// evictIdle is how long an environment must have gone unused before the
// cache cap may remove it: longer than any run (queue + install + the
// platform's longest timeout), so a jail never loses its bound directory.
const evictIdle = 15 * time.Minute

// New reads the rootfs manifest (for the Python version) and returns the
// environments of cfg.DepsDir (the sandbox section: deps_dir, uv_path,
// package_index, python_platform, deps_*). It needs no root; uv is looked
// up when first needed. obs may be nil.
func New(cfg sandbox.Config, obs Observer) (*Cache, error) {
	m, err := sandbox.CheckRootfs(cfg.RootfsDir)
	if err != nil {
		return nil, err
	}
	if cfg.PythonPlatform == "" {
		cfg.PythonPlatform = m.Platform // a runtime's own; the host runtime's is the default
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := newCache(cfg, m.PythonVersion, obs)
	if err := c.d.forRuntime(cfg.RootfsDir, m); err != nil {
		return nil, &sandbox.UnavailableError{Reason: "preparing package installs for runtime " + m.Runtime, Err: err}
	}
	if m.Loader != "" {
		c.d.platform = c.platform
	}
	return c, nil
}

// NewFor returns environments that resolve for another host's
// jails: Python pythonVersion ("3.11.2") on uv's platform ("x86_64-
// manylinux_2_28"), as a gateway resolves for its executors (which install
// the lock themselves). It reads no rootfs; cfg.DepsDir keeps the resolve
// cache.
func NewFor(cfg sandbox.Config, pythonVersion, platform string, obs Observer) (*Cache, error) {
	if !pythonVersionRE.MatchString(pythonVersion) {
		return nil, fmt.Errorf("python version %q is not like 3.11.2", clip(pythonVersion, 32))
	}
	if !platformRE.MatchString(platform) {
		return nil, fmt.Errorf("python platform %q is not a uv platform like x86_64-manylinux_2_28", clip(platform, 64))
	}
	cfg = cfg.WithDefaults()
	cfg.PythonPlatform = platform
	return newCache(cfg, pythonVersion, obs), nil
}

// NewNPM returns environments that resolve npm requirements only (it has
// no Python to resolve for), as a dispatching gateway resolves them for
// its executors: it reads no rootfs; cfg.DepsDir keeps the resolve cache.
func NewNPM(cfg sandbox.Config, obs Observer) *Cache {
	return newCache(cfg.WithDefaults(), "", obs)
}

func newCache(cfg sandbox.Config, pyVersion string, obs Observer) *Cache {
	ttl := time.Duration(cfg.ResolveCacheSeconds) * time.Second
	return &Cache{
		d: &depsInstaller{
			dir:       cfg.DepsDir,
			check:     func() error { return checkBindSource(cfg.DepsDir) },
			python:    cfg.PythonPath,
			pyVersion: pyVersion,
			timeout:   time.Duration(cfg.DepsTimeoutMS) * time.Millisecond,
			index:     cfg.PackageIndex,
			maxBytes:  cfg.DepsMaxMB << 20,
			findUV:    func() (string, error) { return sandbox.FindUV(cfg) },
			getenv:    os.Getenv,
			inflight:  map[string]*depsCall{},
		},
		platform:   cfg.PythonPlatform,
		npm:        newNPMSource(cfg.NPMRegistry),
		resolveTTL: ttl,
		cacheMax:   cfg.DepsCacheMaxMB << 20,
		obs:        obs,
		now:        time.Now,
	}
}

// Target is the Python version and uv platform e resolves for (an
// executor announces them to its gateways).
func (e *Cache) Target() (pythonVersion, platform string) { return e.d.pyVersion, e.platform }

func (e *Cache) event(ev string, d time.Duration) {
	if e.obs != nil {
		e.obs.EnvironmentEvent(ev, d)
	}
}

// indexID describes the configured index (without credentials) for keys.
func (e *Cache) indexID() string {
	i := e.d.index
	return fmt.Sprintf("url=%s find_links=%s no_index=%t", redactURL(i.URL), strings.Join(i.FindLinks, ","), i.NoIndex)
}

// Resolve resolves requirement strings (see NormalizeSpecs) to the complete
// locked set for this rootfs's Python and platform, wheels only. A list
// that cannot be resolved (no such package or version, no wheel for this
// platform, conflicts, the index unreachable) is a DependencyError with
// uv's output; bad strings are a plain error (wrapping ErrInvalidLock is not
// used here: the caller names the field).
func (e *Cache) Resolve(ctx context.Context, reqs []string) (Environment, *sandbox.ErrorInfo, error) {
	specs, err := NormalizeSpecs(reqs)
	if err != nil {
		return Environment{}, nil, err
	}
	key := resolveKey(e.d.pyVersion, e.platform, e.indexID(), specs)
	return e.cachedResolve(ctx, key, func(ctx context.Context) (Environment, *sandbox.ErrorInfo, error) {
		return e.resolve(ctx, specs)
	})
}

// cachedResolve returns the resolution named key: a recent one from
// <DepsDir>/.resolved (Config.ResolveCacheSeconds), else resolve's, once
// for concurrent callers (a caller that goes away does not cancel it).
func (e *Cache) cachedResolve(ctx context.Context, key string, resolve func(context.Context) (Environment, *sandbox.ErrorInfo, error)) (Environment, *sandbox.ErrorInfo, error) {
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
		failure *sandbox.ErrorInfo
	}
	v, err, _ := e.resolving.Do(key, func() (any, error) {
		release, err := takeSlot(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		start := e.now()
		env, failure, err := resolve(context.WithoutCancel(ctx))
		if err == nil && failure == nil {
			e.event("resolved", e.now().Sub(start))
			if e.resolveTTL >= 0 {
				_ = writeFileAtomic(cached, []byte(env.Lock))
				e.sweepResolved()
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

// sweepResolved removes the resolutions older than resolveTTL, which
// cachedResolve no longer reuses: every new requirement list leaves one,
// and resolutions come before any quota admission, so unswept they would
// grow without bound. It looks at most once per resolveTTL (and per
// minute) per Cache.
func (e *Cache) sweepResolved() {
	now := e.now()
	every := max(e.resolveTTL, time.Minute)
	last := e.lastSweep.Load()
	if now.UnixNano()-last < int64(every) || !e.lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	dir := filepath.Join(e.d.dir, ".resolved")
	entries, _ := os.ReadDir(dir)
	for _, ent := range entries {
		if fi, err := ent.Info(); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) >= e.resolveTTL {
			_ = os.Remove(filepath.Join(dir, ent.Name()))
		}
	}
}

func (e *Cache) resolve(ctx context.Context, specs []string) (Environment, *sandbox.ErrorInfo, error) {
	if err := os.MkdirAll(e.d.dir, 0o755); err != nil {
		return Environment{}, nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: creating " + e.d.dir, Err: err}
	}
	uv, err := e.d.findUV()
	if err != nil {
		return Environment{}, nil, err
	}
	work, err := os.MkdirTemp(e.d.dir, ".tmp-resolve-")
	if err != nil {
		return Environment{}, nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: creating a resolve directory", Err: err}
	}
	defer os.RemoveAll(work)
	in := filepath.Join(work, requirementsIn)
	if err := os.WriteFile(in, []byte(strings.Join(specs, "\n")+"\n"), 0o600); err != nil {
		return Environment{}, nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: writing " + in, Err: err}
	}
	args := []string{"pip", "compile",
		"--no-config", "--no-python-downloads",
		"--only-binary", ":all:", // wheels only: resolution never runs a build backend
		"--python-version", e.d.pyVersion,
		"--python-platform", e.platform,
		"--generate-hashes", "--emit-index-annotation", "--annotation-style", "split",
		"--no-header", "--quiet", "--system-certs",
		"--cache-dir", e.d.uvCacheDir(),
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
		return Environment{}, &sandbox.ErrorInfo{Type: sandbox.ErrDependencyError, Message: "resolving " + strings.Join(specs, " ") + ": uv's lock could not be read: " + perr.Error(), Traceback: clip(out, maxInstallerOutput)}, nil
	}
	return env, nil, nil
}

// FromLock reads a lock into its environment: an npm lock (it starts
// with npm.LockHeader; NPMFromLock) or a Python one (ParseLock). The error
// wraps ErrInvalidLock.
func (e *Cache) FromLock(lock string) (Environment, error) {
	if npm.IsLock(lock) {
		return NPMFromLock(lock, e.npm.index())
	}
	pkgs, err := ParseLock(lock)
	if err != nil {
		return Environment{}, err
	}
	return Environment{ID: environmentID(e.d.pyVersion, e.platform, pkgs), Lock: RenderLock(pkgs), Packages: pkgs, Ecosystem: EcosystemPython}, nil
}

// Lookup returns the environment of a prepared (or previously used) id.
func (e *Cache) Lookup(id string) (Environment, bool, error) {
	if !ValidID(id) {
		return Environment{}, false, nil
	}
	b, err := os.ReadFile(filepath.Join(e.d.dir, ".env", id+".txt"))
	if errors.Is(err, os.ErrNotExist) {
		return Environment{}, false, nil
	}
	if err != nil {
		return Environment{}, false, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: reading environment " + id, Err: err}
	}
	env, err := e.FromLock(string(b))
	if err != nil || env.ID != id {
		// Written for another Python or platform (the rootfs changed).
		return Environment{}, false, nil
	}
	e.touchRecord(id)
	return env, true, nil
}

// recordTTL is how long the lock record of an environment that is not
// installed (evicted, or its install failed) is kept from its last use:
// its environment_id stays usable that long, as a split gateway keeps
// P:dispatch:env:ID.
const recordTTL = 7 * 24 * time.Hour

// touchRecord marks the lock record of environment id used now.
func (e *Cache) touchRecord(id string) {
	now := e.now()
	_ = os.Chtimes(filepath.Join(e.d.dir, ".env", id+".txt"), now, now)
}

// sweepLeftovers removes what installs leave beside the environments once
// it is of no use: the lock record (.env/<id>.txt) of an environment not
// installed and unused for recordTTL, and the install lock (<id>.lock) of
// an environment not installed, idle for evictIdle and held by no install.
// Every new requirement list a tenant runs leaves both, so unswept they
// would grow without bound (the cache cap counts environments and
// downloads only). It looks at most once per hour per Cache.
func (e *Cache) sweepLeftovers() {
	now := e.now()
	last := e.lastLeft.Load()
	if now.UnixNano()-last < int64(time.Hour) || !e.lastLeft.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	records := filepath.Join(e.d.dir, ".env")
	entries, _ := os.ReadDir(records)
	for _, ent := range entries {
		id, ok := strings.CutSuffix(ent.Name(), ".txt")
		if !ok || !ValidID(id) || isDir(filepath.Join(e.d.dir, id)) {
			continue
		}
		if fi, err := ent.Info(); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) >= recordTTL {
			_ = os.Remove(filepath.Join(records, ent.Name()))
		}
	}
	entries, _ = os.ReadDir(e.d.dir)
	for _, ent := range entries {
		id, ok := strings.CutSuffix(ent.Name(), ".lock")
		if !ok || !ValidID(id) {
			continue
		}
		if fi, err := ent.Info(); err == nil && fi.Mode().IsRegular() && now.Sub(fi.ModTime()) >= evictIdle {
			removeIdleLock(filepath.Join(e.d.dir, ent.Name()), filepath.Join(e.d.dir, id))
		}
	}
}

// Prepare installs env (when not installed yet) and returns its directory;
// hit says it was already there. Concurrent calls for one environment
// install it once. A failed install is a DependencyError.
func (e *Cache) Prepare(ctx context.Context, env Environment) (dir string, hit bool, failure *sandbox.ErrorInfo, err error) {
	final := filepath.Join(e.d.dir, env.ID)
	if isDir(final) {
		e.touch(final)
		e.touchRecord(env.ID)
		e.event("hit", 0)
		return final, true, nil, nil
	}
	lockPath := filepath.Join(e.d.dir, ".env", env.ID+".txt")
	if err := writeFileAtomic(lockPath, []byte(env.Lock)); err != nil {
		return "", false, nil, &sandbox.UnavailableError{Reason: "sandbox.deps_dir: writing the lock of " + env.ID, Err: err}
	}
	start := e.now()
	names := make([]string, len(env.Packages))
	for i, p := range env.Packages {
		names[i] = p.Name + "==" + p.Version
		if env.Ecosystem == EcosystemNPM {
			names[i] = p.Name + "@" + p.Version
		}
	}
	what := "environment " + env.ID[:12] + " (" + strings.Join(names, " ") + ")"
	fill := e.d.uvFill([]string{"--no-deps", "--require-hashes", "-r", lockPath})
	if env.Ecosystem == EcosystemNPM {
		fill = e.npmFill(env)
	}
	dir, led, failure, err := e.d.ensureKey(ctx, env.ID, what, fill)
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
		e.sweepLeftovers()
	}
	return dir, false, nil, nil
}

// touch marks an environment used now (its mtime orders eviction).
func (e *Cache) touch(dir string) {
	now := e.now()
	_ = os.Chtimes(dir, now, now)
}

// evict keeps the deps dir under cacheMax after an install: the download
// caches (cached npm tarballs, least recently used first, then uv's
// cache) go before any environment, since every installed environment
// holds its own copy of what they saved; then the least recently used
// environments idle for evictIdle, never keep. What counts is every
// environment and both download caches.
func (e *Cache) evict(keep string) {
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
		if !ent.IsDir() || !ValidID(ent.Name()) {
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
	total += treeSize(e.d.npmCacheDir()) + treeSize(e.d.uvCacheDir())
	if total > e.cacheMax {
		total -= e.trimDownloads(total - e.cacheMax)
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

// trimDownloads removes at least excess bytes of the download caches if it
// can, and returns how many it removed: cached npm tarballs, least
// recently used first (an install reads a tarball through the file it
// opened and verified, so removing it under the install is harmless), then,
// when that is not enough, all of uv's cache through `uv cache clean`,
// which waits for the uv processes using it. That clean runs in the
// background (one at a time per Cache) and is counted as removing nothing
// now.
func (e *Cache) trimDownloads(excess int64) int64 {
	type tarball struct {
		path string
		used time.Time
		size int64
	}
	var tgzs []tarball
	entries, _ := os.ReadDir(e.d.npmCacheDir())
	for _, ent := range entries {
		fi, err := ent.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		// A download in progress (".tgz-…", renamed when verified) is
		// left alone unless a crash left it long ago.
		if !strings.HasSuffix(ent.Name(), ".tgz") && e.now().Sub(fi.ModTime()) < evictIdle {
			continue
		}
		tgzs = append(tgzs, tarball{filepath.Join(e.d.npmCacheDir(), ent.Name()), fi.ModTime(), fi.Size()})
	}
	sort.Slice(tgzs, func(i, j int) bool { return tgzs[i].used.Before(tgzs[j].used) })
	var removed int64
	for _, t := range tgzs {
		if removed >= excess {
			return removed
		}
		if os.Remove(t.path) == nil {
			removed += t.size
			e.event("download_trimmed", 0)
		}
	}
	if removed < excess && e.cleaningUV.CompareAndSwap(false, true) {
		go func() {
			defer e.cleaningUV.Store(false)
			e.cleanUV()
		}()
	}
	return removed
}

// cleanUV empties uv's cache with `uv cache clean`, which waits (up to
// sandbox.deps_timeout_ms) for the uv processes using it to end.
func (e *Cache) cleanUV() {
	if treeSize(e.d.uvCacheDir()) == 0 {
		return
	}
	uv, err := e.d.findUV()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.d.timeout)
	defer cancel()
	failure, err := e.d.runUV(ctx, uv, "emptying uv's download cache for the cache cap (sandbox.deps_cache_max_mb)",
		[]string{"cache", "clean", "--cache-dir", e.d.uvCacheDir(), "--no-config", "--color", "never"})
	if failure != nil || err != nil {
		e.event("download_trim_failed", 0)
		return
	}
	e.event("download_trimmed", 0)
}

// writeFileAtomic writes data to path (0644) through atomicfile, creating
// the parent directory.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}

// checkBindSource refuses a bind source the jail cannot enter: through a
// view (sandbox/view) only the directory's own mode matters, not its
// parents'. Used where no view exists yet (package environments prepared
// by the gateway before any run).
func checkBindSource(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil // created 0755 by the install
		}
		return &sandbox.UnavailableError{Reason: "jail path " + dir + ": " + err.Error(), Err: err}
	}
	if fi.Mode().Perm()&0o001 == 0 {
		return &sandbox.UnavailableError{
			Reason: fmt.Sprintf("%s is not searchable by others, so the jail (a uid of sandbox.uid_range) cannot enter it", dir),
			Hint:   "chmod o+x " + dir,
		}
	}
	return nil
}

// PreparePins installs the exact pins reqs ("name==version", see the
// package doc) when they are not installed yet, and returns their
// directory. Bad pins are an error naming the first; a set that cannot be
// installed is a DependencyError.
func (e *Cache) PreparePins(ctx context.Context, reqs []string) (string, *sandbox.ErrorInfo, error) {
	pins, err := normalizeRequirements(reqs)
	if err != nil {
		return "", nil, err
	}
	return e.d.ensure(ctx, pins)
}

// Runner runs a spec in a sandbox (*sandbox.Runner).
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// Installing returns r with e installing each spec's environment: a spec
// carrying a Lock but no Deps (a run decided on another host: a
// dispatching gateway's) gets its lock prepared here and bound; a lock
// that cannot be read is InvalidInput, one that cannot be installed a
// DependencyError, and nothing runs.
func (e *Cache) Installing(r Runner) Runner { return installing{e: e, r: r} }

type installing struct {
	e *Cache
	r Runner
}

func (in installing) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	if spec.Lock == "" || spec.Deps != "" {
		return in.r.Run(ctx, spec)
	}
	env, err := in.e.FromLock(spec.Lock)
	if err != nil {
		return refusal(sandbox.ErrInvalidInput, "invalid run spec: "+err.Error()), nil
	}
	dir, _, failure, err := in.e.Prepare(ctx, env)
	if err != nil {
		return sandbox.Result{}, err
	}
	if failure != nil {
		failure.Message = clip(failure.Message, maxErrorText)
		failure.Traceback = clip(failure.Traceback, maxErrorText)
		return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: failure}, nil
	}
	spec.Deps = dir
	return in.r.Run(ctx, spec)
}

// maxErrorText caps a DependencyError's message and traceback, as the
// runner caps a tool's.
const maxErrorText = 64 << 10

func refusal(typ, msg string) sandbox.Result {
	return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: &sandbox.ErrorInfo{Type: typ, Message: msg}}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…[truncated]"
	}
	return s
}
