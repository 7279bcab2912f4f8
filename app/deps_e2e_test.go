package app_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// depsServer is a gateway with a real sandbox whose packages come only from
// a local wheel directory: alpha 1.0 (→ beta==1.0), beta 1.0 and 2.0, gamma
// 0.3 (→ alpha>=1), delta 1.0 (→ beta>=2). Tenant demo may install all of
// them; tenant acme everything but beta. mods change the config further.
func depsServer(t *testing.T, mods ...func(*config.Config)) *server {
	t.Helper()
	wheels := testenv.WriteWheels(t, filepath.Join(t.TempDir(), "wheels"),
		testenv.Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
		testenv.Wheel{Name: "beta", Version: "1.0"},
		testenv.Wheel{Name: "beta", Version: "2.0"},
		testenv.Wheel{Name: "gamma", Version: "0.3", Requires: []string{"alpha>=1"}},
		testenv.Wheel{Name: "delta", Version: "1.0", Requires: []string{"beta>=2"}},
	)
	uv := testenv.UV(t)
	return start(t, setup{mutate: func(c *config.Config) {
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.PackageIndex = sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true}
		for i := range c.Tenants {
			allow := []any{"alpha", "beta", "gamma", "delta"}
			if c.Tenants[i].ID == "acme" {
				allow = []any{"alpha", "gamma", "delta"}
			}
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": allow, "deny": []any{}}
		}
		for _, m := range mods {
			m(c)
		}
	}})
}

// envEvents reads execgate_environment_events_total by event.
func envEvents(s *server) map[string]float64 {
	out := map[string]float64{}
	if f, ok := s.scrape()["execgate_environment_events_total"]; ok {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

const importAll = "import alpha, beta, gamma\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION, gamma.VERSION]\n"

func TestRequirementsAreResolvedAndEveryPackageIsChecked(t *testing.T) {
	s := depsServer(t)
	demo, acme := s.token("demo"), s.token("acme")

	t.Run("a range is resolved with its dependencies, and all of them are importable", func(t *testing.T) {
		r := s.execute(demo, map[string]any{"source": importAll, "requirements": []string{"Gamma>=0.1"}})
		env := r.json(t)
		if r.status != http.StatusOK || env["status"] != "ok" || fmt.Sprint(env["result"]) != "[1.0 1.0 0.3]" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("a transitive dependency off the allow-list is a 403 naming the chain, and nothing runs", func(t *testing.T) {
		before := s.runs.Load()
		r := s.execute(acme, map[string]any{"source": importAll, "requirements": []string{"gamma"}})
		if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		e, _ := r.json(t)["error"].(map[string]any)
		want := `package "beta==1.0" (gamma → alpha → beta) is not in tenant "acme"'s allow-list`
		if fmt.Sprint(e["reasons"]) != "["+want+"]" {
			t.Fatalf("reasons %v, want [%s]", e["reasons"], want)
		}
		if s.runs.Load() != before {
			t.Fatal("a denied run reached the sandbox")
		}
	})
	t.Run("prepare is denied the same way", func(t *testing.T) {
		r := s.do(http.MethodPost, "/v1/prepare", acme, map[string]any{"requirements": []string{"delta"}})
		if r.status != http.StatusForbidden || !strings.Contains(string(r.body), `package \"beta==2.0\" (delta → beta)`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("requirements that cannot be resolved are a DependencyError with uv's output", func(t *testing.T) {
		r := s.execute(demo, map[string]any{"source": importAll, "requirements": []string{"alpha", "beta==2.0"}})
		env := r.json(t)
		e, _ := env["error"].(map[string]any)
		if r.status != http.StatusOK || r.errType(t) != "DependencyError" || !strings.Contains(fmt.Sprint(e["traceback"]), "beta") {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

func TestPrepareThenRunInstallsNothing(t *testing.T) {
	s := depsServer(t)
	demo := s.token("demo")

	// Concurrent prepares of one environment build it once.
	var wg sync.WaitGroup
	resps := make([]response, 4)
	for i := range resps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"requirements": []string{"alpha"}})
		}()
	}
	wg.Wait()
	var id, lock string
	for _, r := range resps {
		if r.status != http.StatusOK {
			t.Fatalf("prepare: %d %s", r.status, r.body)
		}
		m := r.json(t)
		if id != "" && m["environment_id"] != id {
			t.Fatalf("prepares disagree: %v vs %s", m["environment_id"], id)
		}
		id, lock = m["environment_id"].(string), m["lock"].(string)
		if _, ok := m["ms"].(float64); !ok {
			t.Fatalf("no ms: %s", r.body)
		}
	}
	if !strings.Contains(lock, "alpha==1.0") || !strings.Contains(lock, "beta==1.0") || !strings.Contains(lock, "--hash=sha256:") {
		t.Fatalf("lock:\n%s", lock)
	}
	ev := envEvents(s)
	if ev["built"] != 1 {
		t.Fatalf("environment events %v: want one build for four concurrent prepares", ev)
	}

	src := "import alpha, beta\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION]\n"
	for _, tc := range []struct {
		name string
		body map[string]any
	}{
		{"by environment_id", map[string]any{"source": src, "environment_id": id}},
		{"by the same requirements", map[string]any{"source": src, "requirements": []string{"alpha"}}},
		{"by the lock", map[string]any{"source": src, "requirements_lock": lock}},
	} {
		t.Run("a run naming the environment "+tc.name+" installs nothing", func(t *testing.T) {
			r := s.execute(demo, tc.body)
			env := r.json(t)
			if r.status != http.StatusOK || env["status"] != "ok" || fmt.Sprint(env["result"]) != "[1.0 1.0]" {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if got := envEvents(s)["built"]; got != 1 {
				t.Fatalf("%v builds after the run, want still 1", got)
			}
		})
	}
	t.Run("an environment id nobody prepared is a 400", func(t *testing.T) {
		r := s.execute(demo, map[string]any{"source": src, "environment_id": strings.Repeat("ab", 32)})
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "environment_id") {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("a second prepare is cached", func(t *testing.T) {
		r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"requirements_lock": lock})
		if r.status != http.StatusOK || r.json(t)["cached"] != true || r.json(t)["environment_id"] != id {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}
