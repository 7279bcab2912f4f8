package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/execgate/execgate/internal/atomicfile"
	"github.com/execgate/execgate/limits"
)

// fontCacheLimits are the build run's limits: matplotlib's first import
// takes about a second of CPU here, far more under emulation (the cgroup
// v2 VM), so time and CPU are the platform's maximum.
var fontCacheLimits = limits.Limits{
	TimeoutMS: limits.Max.TimeoutMS, CPUMS: limits.Max.CPUMS, MemoryMB: 512, Pids: 32, OutputBytes: 4 << 20, TmpMB: 64,
	Files: limits.Default.Files, FilesBytes: limits.Default.FilesBytes,
	Artifacts: limits.Default.Artifacts, ArtifactsBytes: limits.Default.ArtifactsBytes,
}

// fontCaches remembers, per environment, that this runner built or tried
// to build its font cache (a build that failed is not run again for every
// run of the environment: the runner's log says why it failed), and which
// builds are under way.
type fontCaches struct {
	mu       sync.Mutex
	building map[string]chan struct{} // environment name → closed when its build ends
	settled  map[string]bool
}

// ensureFontCache builds the font cache of the environment name (below
// sandbox.deps_dir) before a run binds it, when matplotlib is in it and
// no cache is there yet (FontCacheDir). The runs of an environment that
// come while its build is under way wait for it (or for their ctx). A
// build that fails is logged, and the run goes on without a cache
// (matplotlib scans the fonts itself, as before); one cancelled with the
// run that started it is tried again by the next run.
func (r *Runner) ensureFontCache(ctx context.Context, name string, runtime string) {
	env := filepath.Join(r.cfg.DepsDir, name)
	dir := filepath.Join(env, FontCacheDir)
	if _, err := os.Stat(filepath.Join(env, fontCacheMarker)); err != nil || hasFontCache(dir) {
		return
	}
	fc := &r.fontCaches
	fc.mu.Lock()
	if fc.settled[name] {
		fc.mu.Unlock()
		return
	}
	if wait, ok := fc.building[name]; ok {
		fc.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	if fc.building == nil {
		fc.building, fc.settled = map[string]chan struct{}{}, map[string]bool{}
	}
	ended := make(chan struct{})
	fc.building[name] = ended
	fc.mu.Unlock()

	start := time.Now()
	err := r.buildFontCache(ctx, name, runtime, dir)
	fc.mu.Lock()
	delete(fc.building, name)
	fc.settled[name] = err == nil || ctx.Err() == nil
	fc.mu.Unlock()
	close(ended)
	switch {
	case err == nil:
		r.log.Info("built matplotlib's font cache of a package environment", "environment", name, "duration", time.Since(start).Round(time.Millisecond))
	case ctx.Err() == nil:
		r.log.Warn("building matplotlib's font cache of a package environment; its runs scan the fonts themselves", "environment", name, "error", err)
	}
}

// buildFontCache runs the build in a jail of its own and writes what it
// returned to dir, each file under its final name by a rename.
func (r *Runner) buildFontCache(ctx context.Context, name, runtime, dir string) error {
	res, err := r.runSpec(ctx, Spec{
		ExecutionID: "execgate-font-cache",
		Language:    LanguagePython,
		Source:      fontCacheBuild,
		Network:     NetworkNone,
		Limits:      fontCacheLimits,
		Deps:        filepath.Join(r.cfg.DepsDir, name),
		Isolation:   IsolationJail,
		Runtime:     runtime,
	}, false)
	if err != nil {
		return err
	}
	if res.Status != StatusOK {
		msg := string(res.Status)
		if res.Error != nil {
			msg += ": " + res.Error.Type + ": " + clipName(res.Error.Message)
		}
		return errors.New("the build run ended " + msg)
	}
	files, err := FontCacheFiles(res.Result)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for n, data := range files {
		if err := atomicfile.Write(filepath.Join(dir, n), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// hasFontCache says whether dir holds a font list.
func hasFontCache(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if fontCacheNameRE.MatchString(e.Name()) {
			return true
		}
	}
	return false
}
