package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
)

func TestPrepareWithWarmStartsTheEnvironmentsRunsWarm(t *testing.T) {
	s := depsServer(t, func(c *config.Config) { c.Sandbox.WarmPool = 1 })
	if s.sandbox == nil {
		t.Fatal("the harness built no sandbox runner")
	}
	demo := s.token("demo")
	src := "import alpha, beta\n\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION]\n"

	r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"requirements": []string{"alpha"}, "warm": 1})
	if r.status != http.StatusOK {
		t.Fatalf("prepare: %d %s", r.status, r.body)
	}
	m := r.json(t)
	id := m["environment_id"].(string)
	if m["warm"] != float64(1) || m["network_access"] != "none" {
		t.Fatalf("prepare with warm 1: %s", r.body)
	}
	if _, ok := m["limits"].(map[string]any)["memory_mb"]; !ok {
		t.Fatalf("prepare names no limits: %s", r.body)
	}

	// The pool holds the start-up profile's jail and the environment's.
	deadline := time.Now().Add(30 * time.Second)
	for s.sandbox.Info().WarmIdle < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no idle jail for the environment within 30s (idle %d)", s.sandbox.Info().WarmIdle)
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("a run naming the environment takes the warm jail and imports its packages", func(t *testing.T) {
		r := s.execute(demo, map[string]any{"source": src, "environment_id": id})
		env := r.json(t)
		if r.status != http.StatusOK || env["status"] != "ok" || fmt.Sprint(env["result"]) != "[1.0 1.0]" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if env["usage"].(map[string]any)["warm"] != true {
			t.Fatalf("the run did not use a warm jail: %s", r.body)
		}
	})
	t.Run("a run of the environment with other limits starts cold", func(t *testing.T) {
		r := s.execute(demo, map[string]any{"source": src, "environment_id": id, "limits": map[string]any{"memory_mb": 200}})
		env := r.json(t)
		if r.status != http.StatusOK || env["status"] != "ok" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if _, warm := env["usage"].(map[string]any)["warm"]; warm {
			t.Fatalf("a run with other limits took a warm jail: %s", r.body)
		}
	})
	t.Run("warm over the maximum, negative or not an integer is a 400 naming the field", func(t *testing.T) {
		for _, w := range []any{3, -1, "1", 1.5} {
			r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"requirements": []string{"alpha"}, "warm": w})
			if r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" || !strings.Contains(string(r.body), "warm") {
				t.Fatalf("warm %v: %d %s", w, r.status, r.body)
			}
			if w == 3 && !strings.Contains(string(r.body), "maximum 2") {
				t.Fatalf("warm 3 does not name the maximum: %s", r.body)
			}
		}
	})
}
