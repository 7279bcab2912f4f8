package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/harness"
)

// rootfsBuildTimeout bounds one build (a few seconds normally; generous for
// a loaded 2-core host where several test binaries build at once).
const rootfsBuildTimeout = 5 * time.Minute

// rootfsCacheMaxAge is how long an unused cached rootfs for another harness
// or interpreter is kept before Rootfs removes it.
const rootfsCacheMaxAge = 24 * time.Hour

var (
	rootfsMu   sync.Mutex          // guards rootfsPath and runtimes: one Ensure per test process and tree
	rootfsPath string              // the host-copy tree (HostRootfs)
	runtimes   = map[string]bool{} // runtimes ensured in runtimesDir by this process
)

// Rootfs returns the rootfs of the default runtime (limits.DefaultRuntime,
// python3.11 from Debian bookworm) with this binary's harness: what a
// service runs by default. See Runtime.
func Rootfs(t testing.TB) string {
	t.Helper()
	return Runtime(t, limits.DefaultRuntime)
}

// Runtime returns the rootfs of runtime name, built from its pinned Debian
// packages (rootfs/runtimes.lock.json) with this binary's harness and the
// host's Deno. Every runtime of the lock is built once per machine into
// <repo>/.tools/cache/runtimes-<key>/<name> (RuntimesDir), keyed by the
// harness, the protocol, the layout, the lock and Deno, under a file lock,
// so the parallel test processes of `go test ./...` share one build; the
// .debs are cached in <repo>/.tools/cache/debs (a fresh clone downloads
// them once). It does not need root, but fails the test when the build
// fails (a broken rootfs is a bug, not a host limitation).
func Runtime(t testing.TB, name string) string {
	t.Helper()
	dir := runtimesDir(t)
	rootfsMu.Lock()
	defer rootfsMu.Unlock()
	p := filepath.Join(dir, name)
	if runtimes[name] {
		return p
	}
	cache := filepath.Join(RepoRoot(t), ".tools", "cache")
	ctx, cancel := context.WithTimeout(context.Background(), rootfsBuildTimeout)
	defer cancel()
	opts := rootfs.Options{Dir: p, Runtime: name, DebCache: filepath.Join(cache, "debs"), Progress: &logWriter{t: t}}
	if _, err := rootfs.Ensure(ctx, opts); err != nil {
		t.Fatalf("building the test runtime %s in %s: %v (it needs the Debian archive once, then .tools/cache/debs)", name, p, err)
	}
	runtimes[name] = true
	return p
}

// RuntimesDir returns the directory holding every runtime of the lock,
// built (Runtime): what sandbox.runtimes_dir is in tests. A
// sandbox.Config whose RootfsDir is one of them finds the others there by
// default.
func RuntimesDir(t testing.TB) string {
	t.Helper()
	for _, name := range rootfs.DefaultLock().Names() {
		Runtime(t, name)
	}
	return runtimesDir(t)
}

// runtimesDir is the cache directory of this binary's runtimes (not built).
func runtimesDir(t testing.TB) string {
	t.Helper()
	cache := filepath.Join(RepoRoot(t), ".tools", "cache")
	h := sha256.New()
	fmt.Fprintf(h, "protocol=%d harness=%s layout=%d ", jaillayout.ProtocolVersion, harness.Hash(), jaillayout.Version)
	lock, err := rootfs.DefaultLock().Encode()
	if err != nil {
		t.Fatalf("encoding the runtime lock: %v", err)
	}
	h.Write(lock)
	writeDenoKey(h)
	dir := filepath.Join(cache, "runtimes-"+hex.EncodeToString(h.Sum(nil))[:16])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating %s: %v", dir, err)
	}
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // in use: not pruned by another key's tests
	pruneRootfsCache(cache, dir)
	return dir
}

// HostRootfs returns a rootfs of the host runtime: built from the host's
// /usr/bin/python3 with this binary's harness, once per machine into
// <repo>/.tools/cache/rootfs-<key>, keyed by the tree's layout version, the
// harness hash, protocol version, interpreter binary and Deno's content,
// under a file lock. It skips only when
// the host has no /usr/bin/python3.
func HostRootfs(t testing.TB) string {
	t.Helper()
	rootfsMu.Lock()
	defer rootfsMu.Unlock()
	if rootfsPath != "" {
		return rootfsPath
	}
	if _, err := os.Stat(sandbox.DefaultPythonPath); err != nil {
		SkipUnlessCI(t, "no host interpreter to build the rootfs from: %v (apt-get install python3)", err)
	}
	cache := filepath.Join(RepoRoot(t), ".tools", "cache")
	key, err := rootfsKey()
	if err != nil {
		t.Fatalf("keying the test rootfs: %v", err)
	}
	dir := filepath.Join(cache, "rootfs-"+key)
	ctx, cancel := context.WithTimeout(context.Background(), rootfsBuildTimeout)
	defer cancel()
	progress := &logWriter{t: t}
	if _, err := rootfs.Ensure(ctx, rootfs.Options{Dir: dir, Progress: progress}); err != nil {
		t.Fatalf("building the test rootfs in %s: %v", dir, err)
	}
	pruneRootfsCache(cache, dir)
	rootfsPath = dir
	return dir
}

// rootfsKey names the host tree's cache entry: what makes it stale for Ensure.
func rootfsKey() (string, error) {
	real, err := filepath.EvalSymlinks(sandbox.DefaultPythonPath)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "protocol=%d harness=%s layout=%d python=%s size=%d mtime=%d",
		jaillayout.ProtocolVersion, harness.Hash(), jaillayout.Version, real, fi.Size(), fi.ModTime().UnixNano())
	writeDenoKey(h)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// writeDenoKey adds the host's Deno (it goes into every tree) to a key.
func writeDenoKey(h io.Writer) {
	if deno, err := sandbox.FindDeno(""); err == nil {
		if stamp, err := rootfs.DenoStamp(deno); err == nil {
			fmt.Fprintf(h, " deno=%s", stamp)
		}
	}
}

// pruneRootfsCache removes cached rootfs trees for other keys that nobody
// has touched for rootfsCacheMaxAge (harness edits leave one each).
// Failures are ignored: pruning is housekeeping.
func pruneRootfsCache(cache, keep string) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(cache, e.Name())
		if p == keep || !e.IsDir() || strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < rootfsCacheMaxAge {
			continue
		}
		switch {
		case strings.HasPrefix(e.Name(), "rootfs-"):
			if _, err := rootfs.ReadManifest(p); err != nil {
				continue // not a rootfs: leave it alone
			}
		case strings.HasPrefix(e.Name(), "runtimes-"):
			// A runtimes dir of another key: runtimes, their locks and deps.
		default:
			continue
		}
		os.RemoveAll(p)
		os.Remove(p + ".lock")
	}
}

// logWriter sends build progress to the test log.
type logWriter struct{ t testing.TB }

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// JailDir returns a new temporary directory that the jail's uid can reach:
// t.TempDir() with its parent made searchable (t.TempDir's parent is 0700,
// and nsjail binds paths as uid 99999). Use it for rootfs copies and other
// trees a test hands to the sandbox. It is removed on cleanup.
func JailDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatalf("making %s searchable for the jail: %v", p, err)
		}
	}
	return dir
}
