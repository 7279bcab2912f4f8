package app_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/stats"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
)

// TestDepsFirstRunVsPreparedStart measures (and BENCHMARKS.md reports) the
// start of a tool that imports two packages (pkga → pkgb): the first run of
// an environment (resolve with uv, install, run) against a run naming a
// prepared environment_id. Each first run gets fresh versions, so nothing
// is cached. EXECGATE_BENCH_N sets the runs per side (default 5).
//
//	EXECGATE_BENCH_N=20 go test ./app -run TestDepsFirstRunVsPreparedStart -v -count=1
func TestDepsFirstRunVsPreparedStart(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: skipped with -short")
	}
	n := 5
	if v, err := strconv.Atoi(os.Getenv("EXECGATE_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	wheelDir := filepath.Join(t.TempDir(), "wheels")
	var ws []testenv.Wheel
	for i := 0; i <= n; i++ {
		v := fmt.Sprintf("1.%d", i)
		ws = append(ws, testenv.Wheel{Name: "pkga", Version: v, Requires: []string{"pkgb==" + v}}, testenv.Wheel{Name: "pkgb", Version: v})
	}
	testenv.WriteWheels(t, wheelDir, ws...)
	uv := testenv.UV(t)
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.PackageIndex = sandbox.PackageIndex{FindLinks: []string{wheelDir}, NoIndex: true}
		for i := range c.Tenants {
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"pkga", "pkgb"}, "deny": []any{}}
		}
	}})
	tok := s.token("demo")
	src := "import pkga, pkgb\n\ndef run(args, context):\n    return [pkga.VERSION, pkgb.VERSION]\n"
	timed := func(body map[string]any) time.Duration {
		t.Helper()
		t0 := time.Now()
		r := s.execute(tok, body)
		d := time.Since(t0)
		if r.status != http.StatusOK || r.json(t)["status"] != "ok" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return d
	}
	r := s.do(http.MethodPost, "/v1/prepare", tok, map[string]any{"requirements": []string{"pkga==1.0"}})
	if r.status != http.StatusOK {
		t.Fatalf("prepare: %d %s", r.status, r.body)
	}
	id := r.json(t)["environment_id"].(string)
	timed(map[string]any{"source": src, "environment_id": id}) // warm the path once

	var first, prepared, same, none []time.Duration
	plain := "def run(args, context):\n    return ['1.0', '1.0']\n"
	for i := 1; i <= n; i++ {
		first = append(first, timed(map[string]any{"source": src, "requirements": []string{fmt.Sprintf("pkga==1.%d", i)}}))
		prepared = append(prepared, timed(map[string]any{"source": src, "environment_id": id}))
		same = append(same, timed(map[string]any{"source": src, "requirements": []string{"pkga==1.0"}}))
		none = append(none, timed(map[string]any{"source": plain}))
	}
	for _, row := range []struct {
		name string
		ds   []time.Duration
	}{
		{"first run (resolve + install + run)", first},
		{"prepared, by environment_id", prepared},
		{"prepared, by the same requirements", same},
		{"no requirements (cold jail, for reference)", none},
	} {
		t.Logf("n=%d %-45s p50 %8v  p90 %8v", n, row.name, stats.Percentile(row.ds, .5).Round(100*time.Microsecond), stats.Percentile(row.ds, .9).Round(100*time.Microsecond))
	}
	if stats.Percentile(prepared, .5) >= stats.Percentile(first, .5) {
		t.Fatalf("a prepared start (p50 %v) is not faster than a first run (p50 %v)", stats.Percentile(prepared, .5), stats.Percentile(first, .5))
	}
}

// TestDepsPreparedWarmVsCold measures (and BENCHMARKS.md reports) runs of
// a prepared environment (pkga → pkgb) whose jails were warmed by
// POST /v1/prepare "warm": 1 against runs of a prepared environment of the
// same shape that was not warmed (a cold jail binding it). Before each warm
// run the pool has refilled (not timed). EXECGATE_BENCH_N sets the runs
// per side (default 5).
//
//	EXECGATE_BENCH_N=20 go test ./app -run TestDepsPreparedWarmVsCold -v -count=1
func TestDepsPreparedWarmVsCold(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: skipped with -short")
	}
	n := 5
	if v, err := strconv.Atoi(os.Getenv("EXECGATE_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	wheelDir := filepath.Join(t.TempDir(), "wheels")
	var ws []testenv.Wheel
	for _, v := range []string{"1.0", "1.1"} {
		ws = append(ws, testenv.Wheel{Name: "pkga", Version: v, Requires: []string{"pkgb==" + v}}, testenv.Wheel{Name: "pkgb", Version: v})
	}
	testenv.WriteWheels(t, wheelDir, ws...)
	uv := testenv.UV(t)
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.PackageIndex = sandbox.PackageIndex{FindLinks: []string{wheelDir}, NoIndex: true}
		c.Sandbox.WarmPool = 1
		for i := range c.Tenants {
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"pkga", "pkgb"}, "deny": []any{}}
			// Runs come faster than the demo rate allows.
			c.Tenants[i].Quota = quota.Limits{RatePerMinute: 600000, Burst: 10000, Concurrency: 16, DailyCPUSeconds: 1000000}
		}
	}})
	tok := s.token("demo")
	src := "import pkga, pkgb\n\ndef run(args, context):\n    return [pkga.VERSION, pkgb.VERSION]\n"
	prepare := func(req string, warm int) string {
		t.Helper()
		r := s.do(http.MethodPost, "/v1/prepare", tok, map[string]any{"requirements": []string{req}, "warm": warm})
		if r.status != http.StatusOK || r.json(t)["warm"] != float64(warm) {
			t.Fatalf("prepare: %d %s", r.status, r.body)
		}
		return r.json(t)["environment_id"].(string)
	}
	warmID, coldID := prepare("pkga==1.0", 1), prepare("pkga==1.1", 0)
	// The start-up profile's jail and the warmed environment's.
	refilled := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for s.sandbox.Info().WarmIdle < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("the pool did not refill within 30s (idle %d)", s.sandbox.Info().WarmIdle)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	timed := func(id string, wantWarm bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		r := s.execute(tok, map[string]any{"source": src, "environment_id": id})
		d := time.Since(t0)
		env := r.json(t)
		if r.status != http.StatusOK || env["status"] != "ok" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if warm := env["usage"].(map[string]any)["warm"] == true; warm != wantWarm {
			t.Fatalf("usage.warm %v, want %v: %s", warm, wantWarm, r.body)
		}
		return d
	}
	refilled()
	timed(coldID, false) // the path once
	var warm, cold []time.Duration
	for range n {
		refilled()
		warm = append(warm, timed(warmID, true))
		refilled()
		cold = append(cold, timed(coldID, false))
	}
	for _, row := range []struct {
		name string
		ds   []time.Duration
	}{
		{"prepared + warm 1, by environment_id", warm},
		{"prepared, not warmed (cold jail)", cold},
	} {
		t.Logf("n=%d %-40s p50 %8v  p90 %8v", n, row.name, stats.Percentile(row.ds, .5).Round(100*time.Microsecond), stats.Percentile(row.ds, .9).Round(100*time.Microsecond))
	}
}
