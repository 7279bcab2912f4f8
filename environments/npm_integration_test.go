package environments_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// npmConfig is a sandbox config whose npm registry is a loopback one
// serving testenv.NPMFixtures, with a deps dir of its own.
func npmConfig(t *testing.T) (sandbox.Config, *testenv.NPMRegistry) {
	t.Helper()
	reg := testenv.StartNPMRegistry(t, testenv.NPMFixtures()...)
	return sandbox.Config{RootfsDir: testenv.Rootfs(t), DepsDir: filepath.Join(testenv.JailDir(t), "deps"),
		NPMRegistry: sandbox.NPMRegistry{URL: reg.URL}}, reg
}

// An npm requirement list is resolved once (then reused), named by its
// lock, installed once however many ask at once, found again by its id,
// and read back from its lock to the same id; its packages carry the
// registry and their chains.
func TestNPMEnvironmentsResolveLockAndInstallOnce(t *testing.T) {
	cfg, reg := npmConfig(t)
	var events envCounter
	envs, err := environments.New(cfg, &events)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	env, failure, err := envs.ResolveNPM(ctx, []string{"shout@1.2.0"})
	if err != nil || failure != nil {
		t.Fatalf("ResolveNPM: %v %+v", err, failure)
	}
	var got []string
	for _, p := range env.Packages {
		got = append(got, p.Name+"@"+p.Version+" via "+strings.Join(p.Via, ">")+" from "+p.Index)
	}
	want := "shout@1.2.0 via shout from " + reg.URL + "\nupper@2.1.0 via shout>upper from " + reg.URL
	if strings.Join(got, "\n") != want || env.Ecosystem != environments.EcosystemNPM {
		t.Fatalf("resolved (%s):\n%s\nwant:\n%s", env.Ecosystem, strings.Join(got, "\n"), want)
	}
	again, _, err := envs.ResolveNPM(ctx, []string{" shout@1.2.0 "})
	if err != nil || again.ID != env.ID || events.get("resolved") != 1 || events.get("resolve_cached") != 1 {
		t.Fatalf("second ResolveNPM: %v, id %s vs %s, events %v", err, again.ID, env.ID, events.n)
	}
	if back, err := envs.FromLock(env.Lock); err != nil || back.ID != env.ID || back.Ecosystem != environments.EcosystemNPM {
		t.Fatalf("FromLock: %+v %v", back, err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, failure, err := envs.Prepare(ctx, env); err != nil || failure != nil {
				t.Errorf("Prepare: %v %+v", err, failure)
			}
		}()
	}
	wg.Wait()
	if events.get("built") != 1 || reg.Requests("/shout/-/shout-1.2.0.tgz") != 1 {
		t.Fatalf("events %v, tarball fetched %d times: want one build", events.n, reg.Requests("/shout/-/shout-1.2.0.tgz"))
	}
	dir := filepath.Join(cfg.DepsDir, env.ID)
	if fi, err := os.Stat(filepath.Join(dir, "deno", "npm", "registry.npmjs.org", "upper", "2.1.0", "index.js")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("installed file: %v %v", fi, err)
	}
	if got, ok, err := envs.Lookup(env.ID); err != nil || !ok || got.Ecosystem != environments.EcosystemNPM || got.Lock != env.Lock {
		t.Fatalf("Lookup: %+v %v %v", got, ok, err)
	}
}

// An executor installs the npm lock a run carries (Installing), and the
// tool imports the packages; a lock that cannot be installed is a
// DependencyError and nothing runs.
func TestAnExecutorInstallsTheNPMLockItsRunCarries(t *testing.T) {
	testenv.Deno(t)
	cfg, _ := npmConfig(t)
	gw := environments.NewNPM(cfg, nil) // a dispatching gateway's resolver
	env, failure, err := gw.ResolveNPM(context.Background(), []string{"shout@1.2.0"})
	if err != nil || failure != nil {
		t.Fatalf("ResolveNPM: %v %+v", err, failure)
	}
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runner := envs.Installing(newRunner(t, cfg))
	res := run(t, runner, sandbox.Spec{Language: sandbox.LanguageJavaScript, Lock: env.Lock, Limits: limits.Default,
		Source: `import shout from "shout"; export function run() { return shout("ok") }`})
	if res.Status != sandbox.StatusOK || string(res.Result) != `"OK!"` {
		t.Fatalf("run: %s", dump(res))
	}
	// The registry has no shout@1.2.1; the tarball cache holds 1.2.0's
	// bytes under that digest, which a lock naming 1.2.1 never gets.
	missing := strings.ReplaceAll(env.Lock, "shout@1.2.0", "shout@1.2.1")
	res = run(t, runner, sandbox.Spec{Language: sandbox.LanguageJavaScript, Lock: missing, Limits: limits.Default,
		Source: `export function run() { return 1 }`})
	if res.ErrorType() != sandbox.ErrDependencyError || !strings.Contains(res.Error.Message, "shout@1.2.1") {
		t.Fatalf("a lock the registry cannot serve: %s", dump(res))
	}
}
