package environments_test

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// incompressible is n bytes of base64 text from a fixed seed: gzip keeps
// about three quarters of it, the same every run.
func incompressible(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, seed))
	raw := make([]byte, n*3/4)
	for i := range raw {
		raw[i] = byte(r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)[:n]
}

// The npm tarball cache counts toward sandbox.deps_cache_max_mb and is
// trimmed before any environment, least recently used tarball first: a
// tenant asking for package after package cannot fill the disk with
// downloads once the environments themselves are evicted.
func TestTheNPMTarballCacheCountsTowardTheCapLeastRecentlyUsedFirst(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "medium", Version: "1.0.0", Files: map[string]string{"index.js": "//" + incompressible(400<<10, 1)}},
		testenv.NPMPackage{Name: "big", Version: "1.0.0", Files: map[string]string{"index.js": "//" + incompressible(800<<10, 2)}})
	cfg := sandbox.Config{RootfsDir: testenv.Rootfs(t), DepsDir: filepath.Join(testenv.JailDir(t), "deps"),
		NPMRegistry: sandbox.NPMRegistry{URL: reg.URL}}
	ctx := context.Background()
	prepare := func(envs *environments.Cache, req string) environments.Environment {
		t.Helper()
		env, failure, err := envs.ResolveNPM(ctx, []string{req})
		if err != nil || failure != nil {
			t.Fatalf("ResolveNPM %s: %v %+v", req, err, failure)
		}
		if _, _, failure, err := envs.Prepare(ctx, env); err != nil || failure != nil {
			t.Fatalf("Prepare %s: %v %+v", req, err, failure)
		}
		return env
	}
	tarballs := filepath.Join(cfg.DepsDir, ".cache", "npm")
	cached := func() []string {
		entries, _ := os.ReadDir(tarballs)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}

	// medium with no cap: its tarball (≈ 300 KiB) stays, and is made the
	// least recently used.
	cfg.DepsCacheMaxMB = -1
	uncapped, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	medium := prepare(uncapped, "medium@1.0.0")
	old := cached()
	if len(old) != 1 {
		t.Fatalf("the tarball cache holds %v after one install, want medium's", old)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(tarballs, old[0]), hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}

	// big under a 2 MiB cap: both environments (≈ 1.2 MiB) and both
	// tarballs (≈ 0.9 MiB) are just over it, so medium's tarball (the
	// older) goes and big's stays; no environment goes.
	cfg.DepsCacheMaxMB = 2
	var events envCounter
	capped, err := environments.New(cfg, &events)
	if err != nil {
		t.Fatal(err)
	}
	big := prepare(capped, "big@1.0.0")
	now := cached()
	if len(now) != 1 || now[0] == old[0] {
		t.Fatalf("the tarball cache holds %v, want only big's (medium's %s was the least recently used)", now, old[0])
	}
	if events.get("download_trimmed") != 1 || events.get("evicted") != 0 {
		t.Fatalf("events %v: want one tarball trimmed, no environment evicted", events.n)
	}
	for _, env := range []environments.Environment{medium, big} {
		if _, err := os.Stat(filepath.Join(cfg.DepsDir, env.ID)); err != nil {
			t.Fatalf("environment %s: %v", env.ID[:12], err)
		}
	}
}

// Every new requirement list leaves its resolution in .resolved, before
// any quota admission: those older than sandbox.resolve_cache_seconds are
// no longer reused, and a resolution sweeps them away.
func TestExpiredResolutionsAreSwept(t *testing.T) {
	cfg, _ := envConfig(t)
	cfg.ResolveCacheSeconds = 60
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	resolved := filepath.Join(cfg.DepsDir, ".resolved")
	if err := os.MkdirAll(resolved, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(resolved, "stale.txt"), filepath.Join(resolved, "fresh.txt")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("beta==1.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if _, failure, err := envs.Resolve(context.Background(), []string{"beta==1.0"}); err != nil || failure != nil {
		t.Fatalf("Resolve: %v %+v", err, failure)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the expired resolution is still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a resolution within its time was swept: %v", err)
	}
	if entries, _ := os.ReadDir(resolved); len(entries) != 2 {
		t.Errorf(".resolved holds %d entries, want fresh.txt and the new resolution", len(entries))
	}
}
