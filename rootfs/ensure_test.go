package rootfs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/jaillayout"
)

func TestEnsureBuildsOnceThenReusesThenRebuildsWhenStale(t *testing.T) {
	if _, err := os.Stat(DefaultPython); err != nil {
		t.Skipf("host interpreter %s missing: %v", DefaultPython, err)
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "rootfs")

	// Three concurrent callers on a missing rootfs: one build, one result.
	var wg sync.WaitGroup
	results := make([]*Manifest, 3)
	errs := make([]error, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Ensure(ctx, Options{Dir: dir})
		}()
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("Ensure #%d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(*results[i], *results[0]) {
			t.Errorf("Ensure #%d = %+v, #0 = %+v: concurrent callers saw different builds", i, results[i], results[0])
		}
	}
	first := results[0]

	t.Run("a current rootfs is returned without rebuilding", func(t *testing.T) {
		var progress strings.Builder
		start := time.Now()
		m, err := Ensure(ctx, Options{Dir: dir, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*m, *first) {
			t.Errorf("Ensure = %+v, want the existing %+v", m, first)
		}
		if progress.Len() > 0 {
			t.Errorf("Ensure reported progress for a current rootfs: %q", progress.String())
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("Ensure on a current rootfs took %s; it must not walk or rebuild the tree", d)
		}
	})

	t.Run("a manifest from another harness triggers a rebuild in place", func(t *testing.T) {
		mp := filepath.Join(dir, jaillayout.ManifestPath)
		var raw map[string]any
		data, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		raw["harness_sha256"] = strings.Repeat("0", 64)
		data, _ = json.Marshal(raw)
		if err := os.WriteFile(mp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		stray := filepath.Join(dir, "tmp", "left-by-the-old-tree")
		if err := os.WriteFile(stray, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var progress strings.Builder
		m, err := Ensure(ctx, Options{Dir: dir, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(progress.String(), "another harness") {
			t.Errorf("progress does not say why it rebuilt: %q", progress.String())
		}
		if m.HarnessSHA256 != currentHarness().sha256 {
			t.Errorf("rebuilt manifest harness = %s", m.HarnessSHA256)
		}
		if m.ContentSHA256 != first.ContentSHA256 {
			t.Errorf("rebuild from the same host gave content %s, first build %s: builds are not reproducible", m.ContentSHA256, first.ContentSHA256)
		}
		if _, err := os.Stat(stray); !os.IsNotExist(err) {
			t.Errorf("the old tree survived the rebuild (%s: %v)", stray, err)
		}
		leftovers, _ := filepath.Glob(dir + ".tmp-*")
		if len(leftovers) > 0 {
			t.Errorf("temporary trees left behind: %v", leftovers)
		}
	})

	t.Run("a tree of an older layout is stale", func(t *testing.T) {
		opts, err := Options{Dir: dir}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		mp := filepath.Join(dir, jaillayout.ManifestPath)
		orig, err := os.ReadFile(mp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.WriteFile(mp, orig, 0o644) })
		var raw map[string]any
		if err := json.Unmarshal(orig, &raw); err != nil {
			t.Fatal(err)
		}
		delete(raw, "layout") // what an execgate before layouts wrote
		data, _ := json.Marshal(raw)
		if err := os.WriteFile(mp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if reason, _ := staleness(opts); !strings.Contains(reason, "layout 0") {
			t.Errorf("staleness = %q, want the old layout named", reason)
		}
	})

	t.Run("a changed interpreter stamp triggers a rebuild", func(t *testing.T) {
		opts, err := Options{Dir: dir}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		m, err := ReadManifest(dir)
		if err != nil {
			t.Fatal(err)
		}
		if reason, _ := staleness(opts); reason != "" {
			t.Fatalf("fresh rootfs reported stale: %s", reason)
		}
		m.PythonStamp = "/usr/bin/python3.11 size=1 mtime=1"
		data, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(dir, jaillayout.ManifestPath), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if reason, _ := staleness(opts); !strings.Contains(reason, "changed") {
			t.Errorf("staleness = %q, want the interpreter change named", reason)
		}
	})
}
