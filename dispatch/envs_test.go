package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
)

// announce makes a live executor that says it serves runtime with python
// on platform.
func announce(t *testing.T, rdb *redis.Client, id, runtime, python, platform string) {
	t.Helper()
	ctx := context.Background()
	k := newKeys("execgate")
	a, _ := json.Marshal(Announcement{ID: id, Slots: 1, Wire: WireVersion,
		Runtimes: []runtimes.Info{{Name: runtime, PythonVersion: python, Platform: platform, Available: true}}})
	if err := rdb.Set(ctx, k.executor(id), a, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, k.executors(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: id})
}

func TestAnEnvironmentPreparedOnOneGatewayIsFoundOnAnother(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	announce(t, rdb, "ex-1", "python3.11", "3.11.2", "x86_64-manylinux_2_28")
	var gws [2]*RuntimeEnvironments
	for i := range gws {
		d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gws[i] = NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil).For("python3.11")
	}
	lock := "six==1.16.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\n"
	env, err := gws[0].FromLock(lock)
	if err != nil || len(env.ID) != 64 {
		t.Fatalf("FromLock = %+v, %v", env, err)
	}
	if _, ok, err := gws[1].Lookup(env.ID); ok || err != nil {
		t.Fatalf("Lookup before prepare = %v, %v", ok, err)
	}
	if _, _, failure, err := gws[0].Prepare(ctx, env); failure != nil || err != nil {
		t.Fatalf("Prepare = %v, %v", failure, err)
	}
	got, ok, err := gws[1].Lookup(env.ID)
	if err != nil || !ok || got.ID != env.ID || got.Lock != env.Lock {
		t.Fatalf("Lookup on the other gateway = %+v, %v, %v", got, ok, err)
	}
	// The fleet moved to another Python: the environment is not theirs.
	rdb.Del(ctx, newKeys("execgate").executor("ex-1"))
	announce(t, rdb, "ex-2", "python3.11", "3.12.1", "x86_64-manylinux_2_28")
	if _, ok, err := gws[1].Lookup(env.ID); ok || err != nil {
		t.Fatalf("Lookup for another Python = %v, %v; want not found", ok, err)
	}
}

func TestEnvironmentsArePerRuntime(t *testing.T) {
	rdb := newRedis(t)
	announce(t, rdb, "ex-311", "python3.11", "3.11.2", "x86_64-manylinux_2_36")
	announce(t, rdb, "ex-313", "python3.13", "3.13.5", "x86_64-manylinux_2_40")
	d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	envs := NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil)
	lock := "six==1.16.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\n"
	old, err := envs.For("python3.11").FromLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := envs.For("python3.13").FromLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	if old.ID == "" || old.ID == newer.ID {
		t.Errorf("one lock on two runtimes has ids %s and %s; want two (ids are per Python and platform)", old.ID, newer.ID)
	}
	// The executors disagree on no runtime: each runtime has its own.
	if _, err := envs.For("python3.13").target(context.Background()); err != nil {
		t.Errorf("python3.13: %v", err)
	}
	var ue *sandbox.UnavailableError
	if _, _, err := envs.For("host").Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Reason, `no executor serves runtime "host"`) {
		t.Errorf("a runtime no executor serves: err = %v, want unavailable naming it", err)
	}
}

func TestPackagesWaitWhileExecutorsDisagreeOnPython(t *testing.T) {
	rdb := newRedis(t)
	d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	envs := NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil).For("python3.11")
	var ue *sandbox.UnavailableError
	if _, _, err := envs.Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Reason, `no executor serves runtime "python3.11"`) {
		t.Fatalf("Resolve with no executor = %v, want unavailable: no executor serves the runtime", err)
	}
	announce(t, rdb, "ex-0", "python3.11", "", "")
	if _, _, err := envs.Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Hint, "announces a Python") {
		t.Fatalf("Resolve with an executor that cannot install = %v, want unavailable: no executor announces a Python", err)
	}
	announce(t, rdb, "ex-1", "python3.11", "3.11.2", "x86_64-manylinux_2_28")
	announce(t, rdb, "ex-2", "python3.11", "3.12.1", "x86_64-manylinux_2_28")
	if _, _, err := envs.Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Reason, "different Pythons") {
		t.Fatalf("Resolve = %v, want unavailable: different Pythons", err)
	}
}

// npm environments do not depend on the executors' Python: a dispatching
// gateway reads and keeps them whatever the runtime (a JavaScript run
// names none), with no executor announced, and another gateway finds
// them; a JavaScript run naming a Python environment gets it as Python
// packages (the flow refuses it naming environment_id), not a 503 for
// the runtime it does not have.
func TestNPMEnvironmentsNeedNoRuntime(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	var gws [2]*Environments
	for i := range gws {
		d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gws[i] = NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil)
	}
	const npmLock = "# execgate npm lock 1\nleft-pad@1.3.0 sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQEwqqXXI2kHHwWS6r+LyuOdsJdl8jLO6aqAa6i9v3cK/8nQ==\n"
	env, err := gws[0].For("").FromLock(npmLock)
	if err != nil || len(env.ID) != 64 || env.Ecosystem != environments.EcosystemNPM {
		t.Fatalf("FromLock(npm) = %+v, %v", env, err)
	}
	if other, err := gws[0].For("python3.13").FromLock(npmLock); err != nil || other.ID != env.ID {
		t.Errorf("the npm lock read for python3.13: %+v, %v; want the same environment %s", other, err, env.ID)
	}
	if _, _, failure, err := gws[0].For("").Prepare(ctx, env); failure != nil || err != nil {
		t.Fatalf("Prepare = %v, %v", failure, err)
	}
	got, ok, err := gws[1].For("").Lookup(env.ID)
	if err != nil || !ok || got.ID != env.ID || got.Ecosystem != environments.EcosystemNPM {
		t.Fatalf("Lookup on the other gateway = %+v, %v, %v", got, ok, err)
	}

	announce(t, rdb, "ex-1", "python3.11", "3.11.2", "x86_64-manylinux_2_28")
	pyLock := "six==1.16.0 \\\n    --hash=sha256:" + strings.Repeat("a", 64) + "\n"
	py, err := gws[0].For("python3.11").FromLock(pyLock)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, failure, err := gws[0].For("python3.11").Prepare(ctx, py); failure != nil || err != nil {
		t.Fatalf("Prepare = %v, %v", failure, err)
	}
	got, ok, err = gws[1].For("").Lookup(py.ID)
	if err != nil || !ok || got.Ecosystem != environments.EcosystemPython {
		t.Errorf("a Python environment looked up for a run without a runtime = %+v, %v, %v; want it, as Python packages", got, ok, err)
	}
}
