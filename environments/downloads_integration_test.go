package environments_test

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// Every install leaves its lock record (.env/<id>.txt, which keeps the
// environment_id usable after an eviction) and its install lock
// (<id>.lock) beside the environments, after quota admission but without
// bound: a tenant may run new requirement list after new list. An install
// sweeps the records of environments not installed and unused for seven
// days and the idle install locks of environments not installed; a
// record looked up since (a run named its environment_id), an installed
// environment's record and lock, a lock an install holds and a new one
// are kept.
func TestInstallsSweepLockRecordsAndInstallLocksLeftBehind(t *testing.T) {
	reg := testenv.StartNPMRegistry(t,
		testenv.NPMPackage{Name: "used", Version: "1.0.0", Files: map[string]string{"index.js": "export default 1;\n"}},
		testenv.NPMPackage{Name: "built", Version: "1.0.0", Files: map[string]string{"index.js": "export default 2;\n"}})
	cfg := sandbox.Config{RootfsDir: testenv.Rootfs(t), DepsDir: filepath.Join(testenv.JailDir(t), "deps"),
		NPMRegistry: sandbox.NPMRegistry{URL: reg.URL}}
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resolve := func(req string) environments.Environment {
		t.Helper()
		env, failure, err := envs.ResolveNPM(ctx, []string{req})
		if err != nil || failure != nil {
			t.Fatalf("ResolveNPM %s: %v %+v", req, err, failure)
		}
		return env
	}
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	write := func(path, data string, age time.Duration) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		then := time.Now().Add(-age)
		if err := os.Chtimes(path, then, then); err != nil {
			t.Fatal(err)
		}
	}
	record := func(id string) string { return filepath.Join(cfg.DepsDir, ".env", id+".txt") }
	lock := func(id string) string { return filepath.Join(cfg.DepsDir, id+".lock") }
	const week = 8 * 24 * time.Hour
	installed, stale, fresh := id('a'), id('b'), id('c')
	if err := os.MkdirAll(filepath.Join(cfg.DepsDir, installed), 0o755); err != nil {
		t.Fatal(err)
	}
	// used: its environment evicted, its record eight days old, then
	// looked up.
	used := resolve("used@1.0.0")
	write(record(used.ID), used.Lock, week)
	if _, ok, err := envs.Lookup(used.ID); err != nil || !ok {
		t.Fatalf("Lookup of a recorded environment: %v %v", ok, err)
	}
	write(record(installed), "x", week)
	write(record(stale), "x", week)
	write(record(fresh), "x", 24*time.Hour)
	idle, held, recent := id('d'), id('e'), id('f')
	write(lock(idle), "", time.Hour)
	write(lock(held), "", time.Hour)
	write(lock(installed), "", time.Hour)
	write(lock(recent), "", time.Minute)
	unlock, err := environments.LockFile(ctx, lock(held))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	built := resolve("built@1.0.0")
	if _, _, failure, err := envs.Prepare(ctx, built); err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	exists := func(path string) bool {
		_, err := os.Stat(path)
		return err == nil
	}
	for path, want := range map[string]bool{
		record(used.ID): true, record(installed): true, record(stale): false, record(fresh): true, record(built.ID): true,
		lock(idle): false, lock(held): true, lock(installed): true, lock(recent): true,
	} {
		if got := exists(path); got != want {
			t.Errorf("%s: present %v, want %v", strings.TrimPrefix(path, cfg.DepsDir), got, want)
		}
	}
}

// An install waiting for an install lock that is removed meanwhile (the
// sweep removes an idle one under its flock) does not keep the unlinked
// file as its lock: it takes the lock at the path, which a later install
// then waits for.
func TestAnInstallLockRemovedWhileWaitedForIsTakenAgainAtItsPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		unlock, err := environments.LockFile(context.Background(), path)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- unlock
	}()
	time.Sleep(100 * time.Millisecond) // the waiter has opened the file
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	unlock, ok := <-got
	if !ok {
		return
	}
	defer unlock()
	g, err := os.Open(path)
	if err != nil {
		t.Fatalf("the lock's path after the waiter took it: %v", err)
	}
	defer g.Close()
	if err := syscall.Flock(int(g.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock of the lock's path while the waiter holds it: %v, want EWOULDBLOCK", err)
	}
}
