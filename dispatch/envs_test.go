package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
)

// announce makes a live executor that says it runs python on platform.
func announce(t *testing.T, rdb *redis.Client, id, python, platform string) {
	t.Helper()
	ctx := context.Background()
	k := newKeys("execgate")
	a, _ := json.Marshal(Announcement{ID: id, Slots: 1, Wire: WireVersion, Python: python, Platform: platform})
	if err := rdb.Set(ctx, k.executor(id), a, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.ZAdd(ctx, k.executors(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: id})
}

func TestAnEnvironmentPreparedOnOneGatewayIsFoundOnAnother(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	announce(t, rdb, "ex-1", "3.11.2", "x86_64-manylinux_2_28")
	var gws [2]*Environments
	for i := range gws {
		d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gws[i] = NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil)
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
	announce(t, rdb, "ex-2", "3.12.1", "x86_64-manylinux_2_28")
	if _, ok, err := gws[1].Lookup(env.ID); ok || err != nil {
		t.Fatalf("Lookup for another Python = %v, %v; want not found", ok, err)
	}
}

func TestPackagesWaitWhileExecutorsDisagreeOnPython(t *testing.T) {
	rdb := newRedis(t)
	d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	envs := NewEnvironments(d, sandbox.Config{DepsDir: t.TempDir()}, nil)
	var ue *sandbox.UnavailableError
	if _, _, err := envs.Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Hint, "announces a Python") {
		t.Fatalf("Resolve with no executor = %v, want unavailable: no executor announces a Python", err)
	}
	announce(t, rdb, "ex-1", "3.11.2", "x86_64-manylinux_2_28")
	announce(t, rdb, "ex-2", "3.12.1", "x86_64-manylinux_2_28")
	if _, _, err := envs.Resolve(context.Background(), []string{"six"}); !errors.As(err, &ue) || !strings.Contains(ue.Reason, "different Pythons") {
		t.Fatalf("Resolve = %v, want unavailable: different Pythons", err)
	}
}
