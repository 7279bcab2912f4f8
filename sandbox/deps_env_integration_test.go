package sandbox_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// envCounter is an EnvObserver counting events.
type envCounter struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

func (c *envCounter) EnvironmentEvent(ev string, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[ev]++
}

func (c *envCounter) get(ev string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ev]
}

// envConfig is a sandbox config resolving only from a local wheel
// directory holding alpha 1.0 (→ beta==1.0), beta 1.0 and 2.0, and gamma
// (→ alpha).
func envConfig(t *testing.T) (sandbox.Config, string) {
	t.Helper()
	wheels := testenv.WriteWheels(t, filepath.Join(t.TempDir(), "wheels"),
		testenv.Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
		testenv.Wheel{Name: "beta", Version: "1.0"},
		testenv.Wheel{Name: "beta", Version: "2.0"},
		testenv.Wheel{Name: "gamma", Version: "0.3", Requires: []string{"alpha>=1"}},
		testenv.Wheel{Name: "huge", Version: "1.0", Pad: 3 << 20},
	)
	deps := filepath.Join(testenv.JailDir(t), "deps")
	return sandbox.Config{
		RootfsDir: testenv.Rootfs(t), WorkDir: t.TempDir(), CgroupParent: cgroupParent, DepsDir: deps,
		UVPath:       testenv.UV(t),
		PackageIndex: sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true},
	}, wheels
}

func TestEnvironmentsResolveLockAndInstallOnce(t *testing.T) {
	cfg, wheels := envConfig(t)
	var events envCounter
	envs, err := sandbox.NewEnvironments(cfg, &events)
	if err != nil {
		t.Fatalf("NewEnvironments: %v", err)
	}
	ctx := context.Background()

	env, failure, err := envs.Resolve(ctx, []string{"Gamma >= 0.1"})
	if err != nil || failure != nil {
		t.Fatalf("Resolve: %v %+v", err, failure)
	}
	var got []string
	for _, p := range env.Packages {
		got = append(got, p.Name+"=="+p.Version+" via "+strings.Join(p.Via, ">")+" from "+p.Index)
	}
	from := "file://" + wheels
	want := []string{
		"alpha==1.0 via gamma>alpha from " + from,
		"beta==1.0 via gamma>alpha>beta from " + from,
		"gamma==0.3 via gamma from " + from,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("resolved set:\n%s\nwant (transitive dependencies, their chains and index):\n%s\nlock:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), env.Lock)
	}
	if !strings.Contains(env.Lock, "--hash=sha256:") {
		t.Fatalf("the lock has no hashes:\n%s", env.Lock)
	}
	// A second resolution of the same list (spelled differently) is reused.
	again, _, err := envs.Resolve(ctx, []string{"gamma>=0.1"})
	if err != nil || again.ID != env.ID || events.get("resolved") != 1 || events.get("resolve_cached") != 1 {
		t.Fatalf("second Resolve: %v, id %s vs %s, events %v", err, again.ID, env.ID, events.n)
	}
	// The lock read back names the same environment.
	if fromLock, err := envs.FromLock(env.Lock); err != nil || fromLock.ID != env.ID {
		t.Fatalf("FromLock: %v, id %s, want %s", err, fromLock.ID, env.ID)
	}

	// Concurrent prepares of one environment install it once.
	var wg sync.WaitGroup
	var hits atomic.Int64
	dirs := make([]string, 4)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir, hit, failure, err := envs.Prepare(ctx, env)
			if err != nil || failure != nil {
				t.Errorf("Prepare: %v %+v", err, failure)
			}
			if hit {
				hits.Add(1)
			}
			dirs[i] = dir
		}()
	}
	wg.Wait()
	if events.get("built") != 1 {
		t.Fatalf("events %v: want exactly one build", events.n)
	}
	for _, d := range dirs {
		if d != filepath.Join(cfg.DepsDir, env.ID) {
			t.Fatalf("dir %s, want %s", d, filepath.Join(cfg.DepsDir, env.ID))
		}
	}
	for _, m := range []string{"alpha/__init__.py", "beta/__init__.py", "gamma/__init__.py"} {
		if _, err := os.Stat(filepath.Join(dirs[0], m)); err != nil {
			t.Errorf("%s not installed: %v", m, err)
		}
	}
	if _, hit, _, _ := envs.Prepare(ctx, env); !hit {
		t.Error("a prepared environment was not a hit")
	}
	if got, ok, err := envs.Lookup(env.ID); err != nil || !ok || got.ID != env.ID {
		t.Fatalf("Lookup(%s) = %v %v", env.ID, ok, err)
	}
	if _, ok, _ := envs.Lookup(strings.Repeat("0", 64)); ok {
		t.Fatal("Lookup found an environment nobody prepared")
	}
}

func TestEnvironmentsReportWhatCannotBeBuilt(t *testing.T) {
	cfg, _ := envConfig(t)
	cfg.DepsMaxMB = 1
	envs, err := sandbox.NewEnvironments(cfg, nil)
	if err != nil {
		t.Fatalf("NewEnvironments: %v", err)
	}
	ctx := context.Background()
	t.Run("a package the index does not have is a DependencyError with uv's output", func(t *testing.T) {
		_, failure, err := envs.Resolve(ctx, []string{"nonexistent-zz>=1"})
		if err != nil || failure == nil || failure.Type != sandbox.ErrDependencyError || !strings.Contains(failure.Traceback, "nonexistent-zz") {
			t.Fatalf("got %v %+v", err, failure)
		}
	})
	t.Run("conflicting pins are a DependencyError", func(t *testing.T) {
		_, failure, err := envs.Resolve(ctx, []string{"alpha", "beta==2.0"})
		if err != nil || failure == nil || failure.Type != sandbox.ErrDependencyError {
			t.Fatalf("got %v %+v", err, failure)
		}
	})
	t.Run("an environment over deps_max_mb is a DependencyError and is not kept", func(t *testing.T) {
		env, failure, err := envs.Resolve(ctx, []string{"huge"})
		if err != nil || failure != nil {
			t.Fatalf("Resolve: %v %+v", err, failure)
		}
		_, _, failure, err = envs.Prepare(ctx, env)
		if err != nil || failure == nil || !strings.Contains(failure.Message, "deps_max_mb") {
			t.Fatalf("Prepare: %v %+v", err, failure)
		}
		if _, err := os.Stat(filepath.Join(cfg.DepsDir, env.ID)); !os.IsNotExist(err) {
			t.Fatalf("the oversized environment was kept: %v", err)
		}
	})
	t.Run("a URL, an option or a marker is refused before uv runs", func(t *testing.T) {
		for _, r := range []string{"x @ https://evil.test/x.whl", "--index-url=http://evil", "x; python_version>'3'"} {
			if _, _, err := envs.Resolve(ctx, []string{r}); err == nil {
				t.Errorf("%q accepted", r)
			}
		}
	})
}

func TestRunWithALockImportsTheWholeSet(t *testing.T) {
	cfg, _ := envConfig(t)
	envs, err := sandbox.NewEnvironments(cfg, nil)
	if err != nil {
		t.Fatalf("NewEnvironments: %v", err)
	}
	r := newRunner(t, func(c *sandbox.Config) {
		c.DepsDir, c.UVPath, c.PackageIndex = cfg.DepsDir, cfg.UVPath, cfg.PackageIndex
	})
	env, failure, err := envs.Resolve(context.Background(), []string{"alpha"})
	if err != nil || failure != nil {
		t.Fatalf("Resolve: %v %+v", err, failure)
	}
	res := run(t, r, sandbox.Spec{Lock: env.Lock,
		Source: "import alpha, beta\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION, beta.__file__]\n"})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("%s", dump(res))
	}
	var out []string
	if err := json.Unmarshal(res.Result, &out); err != nil || len(out) != 3 || out[0] != "1.0" || out[1] != "1.0" || out[2] != "/opt/execgate/deps/beta/__init__.py" {
		t.Fatalf("result %s (%v)", res.Result, err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DepsDir, env.ID)); err != nil {
		t.Fatalf("the run did not install under the environment id: %v", err)
	}
}
