package environments_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// envCounter is an Observer counting events.
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

// newRunner is a runner of the shared test rootfs binding cfg's deps dir.
func newRunner(t *testing.T, cfg sandbox.Config) *sandbox.Runner {
	t.Helper()
	testenv.RequireRoot(t)
	rc := testenv.SandboxConfig(t)
	rc.DepsDir = cfg.DepsDir
	r, err := sandbox.NewRunner(rc)
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return r
}

func run(t *testing.T, r environments.Runner, spec sandbox.Spec) sandbox.Result {
	t.Helper()
	res, err := r.Run(context.Background(), spec)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func dump(res sandbox.Result) string {
	b, _ := json.MarshalIndent(res, "", "  ")
	return string(b)
}

// envConfig is testenv.EnvConfig: environments resolving from local
// wheels only.
func envConfig(t *testing.T) (sandbox.Config, string) { return testenv.EnvConfig(t) }

func TestEnvironmentsResolveLockAndInstallOnce(t *testing.T) {
	cfg, wheels := envConfig(t)
	var events envCounter
	envs, err := environments.New(cfg, &events)
	if err != nil {
		t.Fatalf("New: %v", err)
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
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
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
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := newRunner(t, cfg)
	env, failure, err := envs.Resolve(context.Background(), []string{"alpha"})
	if err != nil || failure != nil {
		t.Fatalf("Resolve: %v %+v", err, failure)
	}
	// The runner binds what the cache installs: the lock is prepared on
	// the way in (Installing), as an executor's runs are.
	res := run(t, envs.Installing(r), sandbox.Spec{Lock: env.Lock,
		Source: "import alpha, beta\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION, beta.__file__]\n",
		Limits: limits.Default})
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

// simpleIndex serves wheels (PEP 503 simple API) over loopback, behind
// basic auth user:pass, counting refused requests.
func simpleIndex(t *testing.T, wheels, user, pass string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="index"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/simple/"):
			project := strings.Trim(strings.TrimPrefix(r.URL.Path, "/simple/"), "/")
			entries, _ := os.ReadDir(wheels)
			var b strings.Builder
			b.WriteString("<!DOCTYPE html><html><body>\n")
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), strings.ReplaceAll(project, "-", "_")+"-") {
					data, _ := os.ReadFile(filepath.Join(wheels, e.Name()))
					sum := sha256.Sum256(data)
					fmt.Fprintf(&b, "<a href=\"/files/%s#sha256=%s\">%s</a>\n", e.Name(), hex.EncodeToString(sum[:]), e.Name())
				}
			}
			b.WriteString("</body></html>\n")
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, b.String())
		case strings.HasPrefix(r.URL.Path, "/files/"):
			http.ServeFile(w, r, filepath.Join(wheels, filepath.Base(r.URL.Path)))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &refused
}

func TestAPrivateIndexsCredentialsStayWithTheGateway(t *testing.T) {
	cfg, wheels := envConfig(t)
	const secret = "s3cret-index-pass"
	srv, refused := simpleIndex(t, wheels, "gateway", secret)
	creds := filepath.Join(t.TempDir(), "index.cred")
	if err := os.WriteFile(creds, []byte("gateway:"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.PackageIndex = sandbox.PackageIndex{URL: srv.URL + "/simple", CredentialsFile: creds}
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	env, failure, err := envs.Resolve(context.Background(), []string{"alpha"})
	if err != nil || failure != nil {
		t.Fatalf("Resolve through the private index: %v %+v", err, failure)
	}
	for _, p := range env.Packages {
		if p.Index != srv.URL+"/simple" {
			t.Errorf("%s from %q, want the index without credentials", p.Name, p.Index)
		}
	}
	if strings.Contains(env.Lock, secret) {
		t.Fatalf("the lock carries the index password:\n%s", env.Lock)
	}
	if _, _, failure, err := envs.Prepare(context.Background(), env); err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	// The jail sees neither the credentials file nor the password in its
	// environment or the installed files.
	r := newRunner(t, cfg)
	res := run(t, envs.Installing(r), sandbox.Spec{Lock: env.Lock, Args: json.RawMessage(`"` + creds + `"`), Source: `import os, alpha

def run(path, context):
    seen = [k + "=" + v for k, v in os.environ.items()]
    for root, _, files in os.walk("/opt/execgate/deps"):
        for f in files:
            try:
                seen.append(open(os.path.join(root, f), "rb").read().decode("latin-1"))
            except OSError:
                pass
    try:
        seen.append(open(path).read())
    except OSError as e:
        seen.append("unreadable %d" % e.errno)
    return seen
`,

		Limits: limits.Default})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("%s", dump(res))
	}
	if strings.Contains(string(res.Result), secret) {
		t.Fatalf("the jail saw the index password: %.500s", res.Result)
	}

	// Without the credentials the index refuses: a DependencyError.
	cfg.PackageIndex.CredentialsFile = ""
	cfg.ResolveCacheSeconds = -1
	anon, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := refused.Load()
	if _, failure, err := anon.Resolve(context.Background(), []string{"beta"}); err != nil || failure == nil {
		t.Fatalf("Resolve without credentials: %v %+v", err, failure)
	}
	if refused.Load() == before {
		t.Fatal("the index was not asked without credentials")
	}
}

func TestEvictionKeepsTheCacheUnderItsCapAndIdsStillWork(t *testing.T) {
	cfg, _ := envConfig(t)
	cfg.DepsCacheMaxMB = 1 // the "huge" environment alone is 3 MiB
	var events envCounter
	envs, err := environments.New(cfg, &events)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	huge, _, err := envs.Resolve(ctx, []string{"huge"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, failure, err := envs.Prepare(ctx, huge); err != nil || failure != nil {
		t.Fatalf("Prepare huge: %v %+v", err, failure)
	}
	// uv's download cache counts toward the cap and goes before any
	// environment: `uv cache clean` empties it (in the background, waiting
	// for the uv processes using it), and installs go on working.
	deadline := time.Now().Add(60 * time.Second)
	for events.get("download_trimmed") == 0 && events.get("download_trim_failed") == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := environments.TreeSize(filepath.Join(cfg.DepsDir, ".cache", "uv")); events.get("download_trimmed") != 1 || n > 64<<10 {
		t.Fatalf("events %v, uv's cache holds %d bytes: want it emptied once", events.n, n)
	}
	// Recently used: kept even over the cap (a run may be using it).
	beta, _, err := envs.Resolve(ctx, []string{"beta==2.0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := envs.Prepare(ctx, beta); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DepsDir, huge.ID)); err != nil || events.get("evicted") != 0 {
		t.Fatalf("a recently used environment was evicted: %v, events %v", err, events.n)
	}
	// Idle for an hour: the next install evicts it.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(cfg.DepsDir, huge.ID), old, old); err != nil {
		t.Fatal(err)
	}
	alpha, _, err := envs.Resolve(ctx, []string{"alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := envs.Prepare(ctx, alpha); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DepsDir, huge.ID)); !os.IsNotExist(err) || events.get("evicted") != 1 {
		t.Fatalf("the idle environment over the cap was kept: %v, events %v", err, events.n)
	}
	// Its id still works: the lock was kept, so it is reinstalled.
	got, ok, err := envs.Lookup(huge.ID)
	if err != nil || !ok {
		t.Fatalf("Lookup after eviction: %v %v", ok, err)
	}
	if _, hit, failure, err := envs.Prepare(ctx, got); err != nil || failure != nil || hit {
		t.Fatalf("reinstall: hit %v %v %+v", hit, err, failure)
	}
}
