package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// bigRunner is a fake sandbox whose result is args.size bytes long; it
// counts runs per tenant and execution id.
type bigRunner struct {
	mu   sync.Mutex // guards runs
	runs map[string]int
}

func (b *bigRunner) Run(_ context.Context, s sandbox.Spec) (sandbox.Result, error) {
	b.mu.Lock()
	b.runs[s.TenantID+"/"+s.ExecutionID]++
	b.mu.Unlock()
	var args struct {
		Size int `json:"size"`
	}
	_ = json.Unmarshal(s.Args, &args)
	res, _ := json.Marshal(strings.Repeat("x", args.Size))
	return sandbox.Result{Status: sandbox.StatusOK, Result: res, Stdout: s.ExecutionID}, nil
}

func (b *bigRunner) count(tenant, id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[tenant+"/"+id]
}

func sized(id string, size int) string {
	return fmt.Sprintf(`{"execution_id":%q,"source":"def run(args, context):\n    return 1\n","args":{"size":%d}}`, id, size)
}

// Issue #11 §2: tenant B's large responses evicted tenant A's stored
// response and A's retry ran again. With the defaults (16 MiB of responses
// per tenant) acme's five 14 MB responses only ever evict acme's own.
func TestAnotherTenantsResponsesNeverMakeAnExecutionIDRunTwice(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			fake := &bigRunner{runs: map[string]int{}}
			s := start(t, setup{runner: fake, mutate: func(c *config.Config) {
				if backend == "redis" {
					c.Quota.Backend = "redis"
					c.Quota.RedisURL = testenv.Redis(t).URL()
				}
			}})
			demo, acme := s.token("demo"), s.token("acme")
			first := s.execute(demo, sized("a-1", 10))
			if first.status != http.StatusOK {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			for i := range 5 {
				if r := s.execute(acme, sized(fmt.Sprintf("flood-%d", i), 14<<20)); r.status != http.StatusOK {
					t.Fatalf("acme flood %d: %d", i, r.status)
				}
			}
			again := s.execute(demo, sized("a-1", 10))
			if again.status != http.StatusOK || string(again.body) != string(first.body) {
				t.Fatalf("demo's retry: %d %.300s", again.status, again.body)
			}
			if n := fake.count("demo", "a-1"); n != 1 {
				t.Fatalf("demo's a-1 ran %d times, want 1", n)
			}

			// acme's own oldest responses went; its retry is a 409, not a run.
			r := s.execute(acme, sized("flood-0", 14<<20))
			if r.status != http.StatusConflict || r.errType(t) != "ResultExpired" {
				t.Fatalf("acme's retry of a dropped response: %d %.300s", r.status, r.body)
			}
			env := r.json(t)
			e := env["error"].(map[string]any)
			if e["original_status"] != "ok" || env["execution_id"] != "flood-0" || env["tenant_id"] != "acme" {
				t.Fatalf("ResultExpired envelope = %.500s", r.body)
			}
			if r.header.Get("X-Execution-Status") != "error:ResultExpired" || r.header.Get("X-Execution-Id") != "flood-0" {
				t.Fatalf("headers = %v", r.header)
			}
			if n := fake.count("acme", "flood-0"); n != 1 {
				t.Fatalf("acme's flood-0 ran %d times, want 1", n)
			}
			lines := s.auditLines()
			last := lines[len(lines)-1]
			if out := last["outcome"].(map[string]any); last["execution_id"] != "flood-0" || out["http_status"] != 409.0 || out["error_type"] != "ResultExpired" {
				t.Fatalf("audit record of the 409 = %v", last)
			}
		})
	}
}

// The same through the real gateway and nsjail, with a small response
// budget: runs are counted at the sandbox and in the audit log.
func TestARealRunIsNeverRepeatedWhenResponsesAreDropped(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Server.IdempotencyTenantResponseBytes = 64 << 10
		c.Server.IdempotencyMaxClaims = 8
	}})
	demo, acme := s.token("demo"), s.token("acme")
	tool := func(id string, size int) string {
		return fmt.Sprintf(`{"execution_id":%q,"source":"import random\ndef run(args, context):\n    print(random.random())\n    return 'x' * args['size']\n","args":{"size":%d}}`, id, size)
	}
	first := s.execute(demo, tool("job-1", 10))
	if first.status != http.StatusOK || first.json(t)["status"] != "ok" {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	for i := range 4 {
		if r := s.execute(acme, tool(fmt.Sprintf("flood-%d", i), 40<<10)); r.status != http.StatusOK {
			t.Fatalf("acme flood %d: %d %.300s", i, r.status, r.body)
		}
	}
	if again := s.execute(demo, tool("job-1", 10)); again.status != http.StatusOK || string(again.body) != string(first.body) {
		t.Fatalf("demo's retry after acme's flood: %d %.300s", again.status, again.body)
	}
	if n := s.runs.Load(); n != 5 {
		t.Fatalf("%d runs, want 5 (demo's retry was replayed)", n)
	}
	// demo's own large responses push job-1's out: 409, still one run.
	for i := range 2 {
		if r := s.execute(demo, tool(fmt.Sprintf("big-%d", i), 40<<10)); r.status != http.StatusOK {
			t.Fatalf("demo big %d: %d", i, r.status)
		}
	}
	r := s.execute(demo, tool("job-1", 10))
	if r.status != http.StatusConflict || r.errType(t) != "ResultExpired" || r.json(t)["error"].(map[string]any)["original_status"] != "ok" {
		t.Fatalf("demo's retry after its own flood: %d %s", r.status, r.body)
	}
	if n := s.runs.Load(); n != 7 {
		t.Fatalf("%d runs, want 7", n)
	}
	var ran int
	for _, l := range s.auditLines() {
		if l["execution_id"] == "job-1" && l["usage"] != nil && l["usage"].(map[string]any)["wall_ms"].(float64) > 0 {
			ran++
		}
	}
	if ran != 1 {
		t.Fatalf("%d audit records of job-1 with a run, want 1", ran)
	}

	// demo holds 3 claims of 8; five more ids fill it, the next is refused
	// with 429 and nothing runs.
	for i := range 5 {
		if r := s.execute(demo, tool(fmt.Sprintf("fill-%d", i), 1)); r.status != http.StatusOK {
			t.Fatalf("fill %d: %d %s", i, r.status, r.body)
		}
	}
	before := s.runs.Load()
	r = s.execute(demo, tool("one-too-many", 1))
	if r.status != http.StatusTooManyRequests || r.errType(t) != "QuotaExceeded" || r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(r.body), "idempotency_max_claims") {
		t.Fatalf("claim over the count: %d %s", r.status, r.body)
	}
	if s.runs.Load() != before {
		t.Fatal("a run happened past the claim count")
	}
	// Requests without an execution_id claim nothing and still run.
	if r := s.execute(demo, `{"source":"def run(args, context):\n    return 1\n"}`); r.status != http.StatusOK {
		t.Fatalf("a run without an execution_id: %d %s", r.status, r.body)
	}
}
