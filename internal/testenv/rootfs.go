package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
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
	rootfsMu   sync.Mutex // guards rootfsPath: one Ensure per test process
	rootfsPath string
)

// Rootfs returns a rootfs built from the host's /usr/bin/python3 with this
// binary's harness. It is built once per machine into
// <repo>/.tools/cache/rootfs-<key>, keyed by the tree's layout version, the harness hash, protocol
// version, interpreter binary and Deno's content, under a file lock, so the parallel test
// processes of `go test ./...` share one build. It does not need root, but
// fails the test when the build fails (a broken rootfs is a bug, not a host
// limitation); it skips only when the host has no /usr/bin/python3.
func Rootfs(t testing.TB) string {
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

// rootfsKey names the cache entry: what makes a rootfs stale for Ensure.
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
	fmt.Fprintf(h, "layout=%d protocol=%d harness=%s python=%s size=%d mtime=%d",
		jaillayout.Version, jaillayout.ProtocolVersion, harness.Hash(), real, fi.Size(), fi.ModTime().UnixNano())
	// The host's Deno goes into the tree too (JavaScript tools), keyed by
	// its content as the rootfs's staleness check keys it.
	if deno, err := sandbox.FindDeno(""); err == nil {
		if stamp, err := rootfs.DenoStamp(deno); err == nil {
			fmt.Fprintf(h, " deno=%s", stamp)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
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
		if p == keep || !e.IsDir() || !strings.HasPrefix(e.Name(), "rootfs-") || strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < rootfsCacheMaxAge {
			continue
		}
		if _, err := rootfs.ReadManifest(p); err != nil {
			continue // not a rootfs: leave it alone
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
