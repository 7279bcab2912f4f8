package sandbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// waitWarmEnv waits until spec's profile with environment envID has n idle
// warm jails.
func waitWarmEnv(t *testing.T, r *sandbox.Runner, spec sandbox.Spec, envID string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for sandbox.WarmIdleOfEnv(r, spec, envID) < n {
		if time.Now().After(deadline) {
			t.Fatalf("environment %.12s did not get %d warm jail(s) within 30s (idle %d)", envID, n, sandbox.WarmIdleOfEnv(r, spec, envID))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAWarmedEnvironmentStartsItsRunsWarm(t *testing.T) {
	cfg, _ := testenv.EnvConfig(t)
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatalf("environments.New: %v", err)
	}
	r := newRunner(t, func(c *sandbox.Config) {
		c.DepsDir, c.UVPath, c.PackageIndex = cfg.DepsDir, cfg.UVPath, cfg.PackageIndex
		c.WarmPool = 1
	})
	ctx := context.Background()
	env, failure, err := envs.Resolve(ctx, []string{"alpha"})
	if err != nil || failure != nil {
		t.Fatalf("Resolve: %v %+v", err, failure)
	}
	src := "import alpha, beta\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION]\n"
	dir, _, failure, err := envs.Prepare(ctx, env)
	if err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	spec := sandbox.Spec{TenantID: "b", Deps: dir, Source: src, Limits: limits.Default}

	t.Run("a run of an environment nobody warmed starts cold and warms nothing", func(t *testing.T) {
		res := run(t, r, spec)
		if res.Status != sandbox.StatusOK || res.Usage.Warm {
			t.Fatalf("warm %v: %s", res.Usage.Warm, dump(res))
		}
		if got := sandbox.WarmEnvironmentsOf(r, "b"); len(got) != 0 {
			t.Fatalf("a cold run registered environment profiles %v; only warming may", got)
		}
	})

	t.Run("warming keeps an idle jail for the environment and the next run takes it", func(t *testing.T) {
		n, err := r.Warm(ctx, spec, 1)
		if err != nil || n != 1 {
			t.Fatalf("Warm: %d, %v", n, err)
		}
		waitWarmEnv(t, r, spec, env.ID, 1)
		hits := sandbox.WarmHits(r)
		res := run(t, r, spec)
		if res.Status != sandbox.StatusOK || string(res.Result) != `["1.0","1.0"]` {
			t.Fatalf("%s", dump(res))
		}
		if !res.Usage.Warm || sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("the run did not take the warm jail (usage.warm %v, hits %d → %d)", res.Usage.Warm, hits, sandbox.WarmHits(r))
		}
		waitWarmEnv(t, r, spec, env.ID, 1) // refilled
	})

	t.Run("a run of the environment with other limits starts cold", func(t *testing.T) {
		other := spec
		other.Limits = sandbox.Limits{MemoryMB: 200}.Or(limits.Default)
		res := run(t, r, other)
		if res.Status != sandbox.StatusOK || res.Usage.Warm {
			t.Fatalf("warm %v: %s", res.Usage.Warm, dump(res))
		}
	})

	t.Run("warming more jails than the pool's size keeps the pool's size", func(t *testing.T) {
		if n, err := r.Warm(ctx, spec, 5); err != nil || n != 1 {
			t.Fatalf("Warm 5: %d, %v; want 1 (sandbox.warm_pool)", n, err)
		}
	})

	t.Run("a tenant warming many profiles replaces its own, never another tenant's", func(t *testing.T) {
		for i := range 10 {
			a := spec
			a.TenantID = "a"
			a.Limits = sandbox.Limits{MemoryMB: int64(100 + i)}.Or(limits.Default)
			if n, err := r.Warm(ctx, a, 1); err != nil || n != 1 {
				t.Fatalf("Warm %d for a: %d, %v", i, n, err)
			}
		}
		if got := sandbox.WarmEnvironmentsOf(r, "b"); len(got) != 1 || got[0] != env.ID {
			t.Fatalf("b's warmed environment is gone: %v", got)
		}
		held := sandbox.WarmProfiles(r)
		if held["a"] != 6 || held["b"] != 1 || held[""] != 1 {
			t.Fatalf("places held %v; want a: 6, b: 1 and the start-up profile", held)
		}
		waitWarmEnv(t, r, spec, env.ID, 1)
		hits := sandbox.WarmHits(r)
		res := run(t, r, spec)
		if res.Status != sandbox.StatusOK || !res.Usage.Warm || sandbox.WarmHits(r) != hits+1 {
			b, _ := json.Marshal(res.Usage)
			t.Fatalf("b's run after a's warming: usage %s: %s", b, dump(res))
		}
	})
}
