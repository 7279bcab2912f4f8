package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
