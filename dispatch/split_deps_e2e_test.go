package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
)

// post sends body (tenant added) to the gateway's path as the test tenant.
func (e *splitEnv) post(path string, body map[string]any, out any) int {
	e.t.Helper()
	body["tenant_id"] = splitTenant
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.gwURL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, out); err != nil {
		e.t.Fatalf("decoding %s: %v", raw, err)
	}
	return resp.StatusCode
}

// Runs with packages through the split: the gateway (no nsjail) resolves
// with uv for the Python its executors announce and judges every package
// with the tenant's policy; the executor installs the lock (hashes) into
// its own cache and runs. Packages come only from a local wheel directory.
func TestSplitRunsWithPackages(t *testing.T) {
	e := newSplitEnv(t)
	wheels := testenv.WriteWheels(t, filepath.Join(e.dir, "wheels"),
		testenv.Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
		testenv.Wheel{Name: "beta", Version: "1.0"},
		testenv.Wheel{Name: "beta", Version: "2.0"},
		testenv.Wheel{Name: "gamma", Version: "0.3", Requires: []string{"alpha>=1"}},
	)
	uv := testenv.UV(t)
	index := "package_index: {find_links: [" + wheels + "], no_index: true}"
	gwDeps := filepath.Join(e.dir, "gw-deps")
	exDeps := filepath.Join(testenv.JailDir(t), "split-deps")
	e.policyExtra = ", packages: {allow: [alpha, beta], deny: []}"
	e.execSandbox = ", uv_path: " + uv + ", deps_dir: " + exDeps + ", " + index
	e.startServer("gateway", "{nsjail_path: /nonexistent/nsjail, uv_path: "+uv+", deps_dir: "+gwDeps+", "+index+"}")
	e.startExecutor("ex-p")
	waitFor(t, 30*time.Second, "the executor's announcement", func() bool {
		code, _ := e.readyz()
		return code == http.StatusOK
	})
	a, err := e.rdb.Get(context.Background(), newKeys("execgate").executor("ex-p")).Result()
	if err != nil || !strings.Contains(a, `"python_version":"3.11.`) || !strings.Contains(a, `"platform":"x86_64-manylinux_2_36"`) {
		t.Fatalf("announcement %s (%v): want the runtime's Python and platform", a, err)
	}

	const src = "import alpha, beta\ndef run(args, context):\n    return {'alpha': alpha.VERSION, 'beta': beta.VERSION}\n"
	const want = `{"alpha":"1.0","beta":"1.0"}`
	ran := func(t *testing.T, body map[string]any) {
		t.Helper()
		body["source"] = src
		status, env, err := e.execute(body)
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusOK || env.Status != "ok" || string(env.Result) != want {
			t.Fatalf("run = %d %s %s %+v, want ok %s", status, env.Status, env.Result, env.Error, want)
		}
	}
	var prepared struct {
		EnvironmentID string `json:"environment_id"`
		Lock          string `json:"lock"`
	}
	t.Run("a run with requirements imports the resolved packages on the executor", func(t *testing.T) {
		ran(t, map[string]any{"requirements": []string{"alpha"}})
	})
	t.Run("prepare answers a lock and an environment id that runs through the gateway", func(t *testing.T) {
		if code := e.post("/v1/prepare", map[string]any{"requirements": []string{"alpha"}}, &prepared); code != http.StatusOK ||
			len(prepared.EnvironmentID) != 64 || !strings.Contains(prepared.Lock, "--hash=sha256:") {
			t.Fatalf("prepare = %d %+v", code, prepared)
		}
		ran(t, map[string]any{"environment_id": prepared.EnvironmentID})
	})
	t.Run("a run with requirements_lock installs exactly the lock", func(t *testing.T) {
		ran(t, map[string]any{"requirements_lock": prepared.Lock})
	})
	t.Run("the tenant's package policy is decided on the gateway", func(t *testing.T) {
		status, env, err := e.execute(map[string]any{"source": src, "requirements": []string{"gamma"}})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusForbidden || env.errType() != "PolicyDenied" {
			t.Fatalf("gamma (not allowed) = %d %+v, want 403 PolicyDenied", status, env.Error)
		}
	})
	t.Run("an unknown environment id is a 400", func(t *testing.T) {
		status, env, err := e.execute(map[string]any{"source": src, "environment_id": strings.Repeat("0", 64)})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusBadRequest {
			t.Fatalf("unknown environment_id = %d %+v, want 400", status, env.Error)
		}
	})
	t.Run("the gateway installed nothing; the executor installed the environment", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(gwDeps, prepared.EnvironmentID)); !os.IsNotExist(err) {
			t.Fatalf("the gateway's deps dir holds the environment (%v)", err)
		}
		if fi, err := os.Stat(filepath.Join(exDeps, prepared.EnvironmentID)); err != nil || !fi.IsDir() {
			t.Fatalf("the executor's deps dir lacks environment %s: %v", prepared.EnvironmentID, err)
		}
	})
}

// A tenant's runs waiting for an executor are bounded by max_queued
// through the whole gateway (flow → admission → dispatcher): with the only
// slot busy, its third waiting run is 429 QuotaExceeded and never queued.
func TestSplitMaxQueuedRefusesATenantsThirdWaitingRun(t *testing.T) {
	e := newSplitEnv(t)
	e.quotaExtra = ", max_queued: 2"
	e.startGateway()
	e.startExecutorWith("ex-q", 1, 0)
	k := newKeys("execgate")
	ctx := context.Background()
	waitFor(t, 30*time.Second, "the executor", func() bool { code, _ := e.readyz(); return code == http.StatusOK })

	type answer struct {
		status int
		env    envelope
		err    error
	}
	answers := make(chan answer, 3)
	send := func(secs float64, i int) {
		status, env, err := e.execute(map[string]any{"source": sleepSource, "args": map[string]any{"s": secs, "i": i}})
		answers <- answer{status, env, err}
	}
	go send(4, 0) // holds the only slot
	waitFor(t, 30*time.Second, "the first run to start", func() bool {
		a, _ := e.rdb.Get(ctx, k.executor("ex-q")).Result()
		return strings.Contains(a, `"busy":1`)
	})
	go send(0, 1)
	go send(0, 2)
	waitFor(t, 30*time.Second, "two runs waiting", func() bool { return e.rdb.ZCard(ctx, k.queued(splitTenant)).Val() == 2 })

	status, env, err := e.execute(map[string]any{"source": okSource, "args": map[string]any{"i": 3}})
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusTooManyRequests || env.errType() != "QuotaExceeded" || !strings.Contains(env.Error.Message, "max_queued (2)") {
		t.Fatalf("third waiting run = %d %+v, want 429 QuotaExceeded naming max_queued (2)", status, env.Error)
	}
	if n := e.rdb.XLen(ctx, k.runsFor(limits.DefaultRuntime)).Val(); n != 2 {
		t.Fatalf("the stream holds %d runs, want the 2 waiting (the refused one was queued)", n)
	}
	for range 3 {
		select {
		case a := <-answers:
			if a.err != nil || a.status != http.StatusOK || a.env.Status != "ok" {
				t.Fatalf("a queued run = %d %+v %v", a.status, a.env.Error, a.err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the queued runs did not finish")
		}
	}
	if n := e.rdb.ZCard(ctx, k.queued(splitTenant)).Val(); n != 0 {
		t.Fatalf("%d runs still counted as waiting after all ran", n)
	}
}
