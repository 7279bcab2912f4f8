package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

// A tenant whose daily CPU budget is below the default cpu_ms (5000) gets
// runs with what is left of it as their cpu_ms, decided, enforced by the
// jail and recorded, and is refused only once nothing is left, with the
// numbers; with either quota backend.
func TestABudgetBelowTheDefaultCPULimitRunsWithWhatIsLeft(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var redisURL string
			if backend == "redis" {
				redisURL = testenv.Redis(t).URL()
			}
			s := start(t, setup{mutate: func(c *config.Config) {
				if redisURL != "" {
					c.Quota.Backend, c.Quota.RedisURL = "redis", redisURL
				}
				for i := range c.Tenants {
					if c.Tenants[i].ID == "acme" {
						c.Tenants[i].Quota = quota.Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4, DailyCPUSeconds: 1}
					}
				}
			}})
			tok := s.token("acme")
			admin := s.token("acme", tenancy.RoleTenantAdmin)
			wall := stretchedLimits()["timeout_ms"]

			// 1. Nothing used: the run may use the whole second.
			r := s.execute(tok, map[string]any{"execution_id": "small-1", "source": "def run(args, context):\n    return 1\n", "limits": map[string]any{"timeout_ms": wall}})
			if r.status != http.StatusOK || r.json(t)["status"] != "ok" {
				t.Fatalf("a run within the budget: %d %s", r.status, r.body)
			}
			if got := cpuLimit(t, r.json(t)); got != 1000 {
				t.Fatalf("decision.limits.cpu_ms = %d, want the 1000 ms of the budget (below the default 5000)", got)
			}
			var recorded bool
			for _, l := range s.auditLines() {
				if l["execution_id"] == "small-1" {
					recorded = cpuLimit(t, l) == 1000
				}
			}
			if !recorded {
				t.Fatal("the audit record does not show decision.limits.cpu_ms 1000")
			}

			// 2. A run that burns CPU gets what is left and is stopped there.
			used := budget(t, s, "acme", admin).UsedMS
			// (30 s of wall time, the tenant's cap: ample for 1 s of CPU on a loaded host)
			r = s.execute(tok, map[string]any{"execution_id": "burn", "source": "def run(args, context):\n    while True:\n        pass\n", "limits": map[string]any{"timeout_ms": 30000}})
			env := r.json(t)
			left := cpuLimit(t, env)
			if r.status != http.StatusOK || r.errType(t) != "CPULimit" || left != 1000-used {
				t.Fatalf("the burning run: %d, cpu_ms %d (want the %d left of 1000 after %d used)\n%s", r.status, left, 1000-used, used, r.body)
			}
			// The jail enforced the reduced limit, not the default 5000 ms.
			if u := int64(env["usage"].(map[string]any)["cpu_ms"].(float64)); u < left*3/4 || u > left+500 {
				t.Fatalf("the burning run used %d ms of CPU, want about its limit of %d ms (the default is 5000)", u, left)
			}

			// 3. Each next run gets what is left until nothing is; then the
			// refusal says the budget is spent, with the numbers.
			for i := range 5 {
				b := budget(t, s, "acme", admin)
				r = s.execute(tok, map[string]any{"execution_id": fmt.Sprint("after-", i), "source": "def run(args, context):\n    while True:\n        pass\n", "limits": map[string]any{"timeout_ms": 30000}})
				if b.UsedMS < b.LimitMS {
					if r.status != http.StatusOK || cpuLimit(t, r.json(t)) != b.LimitMS-b.UsedMS {
						t.Fatalf("with %d of %d ms used: %d %s", b.UsedMS, b.LimitMS, r.status, r.body)
					}
					continue
				}
				msg := fmt.Sprintf("the tenant's daily CPU budget is spent: %d of 1000 ms used today", b.UsedMS)
				if r.status != http.StatusTooManyRequests || r.errType(t) != "BudgetExhausted" || !strings.Contains(string(r.body), msg) {
					t.Fatalf("with the budget spent: %d %s, want 429 BudgetExhausted %q", r.status, r.body, msg)
				}
				return
			}
			t.Fatalf("the budget was never spent: %+v", budget(t, s, "acme", admin))
		})
	}
}

// cpuLimit is decision.limits.cpu_ms of an envelope or audit record.
func cpuLimit(t *testing.T, m map[string]any) int64 {
	t.Helper()
	d, _ := m["decision"].(map[string]any)
	l, _ := d["limits"].(map[string]any)
	v, ok := l["cpu_ms"].(float64)
	if !ok {
		t.Fatalf("no decision.limits.cpu_ms in %v", m)
	}
	return int64(v)
}

// budget reads the tenant's budget over the admin API.
func budget(t *testing.T, s *server, tenant, token string) quota.BudgetUsage {
	t.Helper()
	r := s.do(http.MethodGet, "/v1/admin/tenants/"+tenant+"/usage", token, nil)
	if r.status != http.StatusOK {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	var u quota.Usage
	if err := json.Unmarshal(r.body, &u); err != nil {
		t.Fatal(err)
	}
	return u.Budget
}

// spendBudget runs tools that burn CPU as tenant until its daily budget is
// spent (each run gets what is left of it).
func spendBudget(t *testing.T, s *server, tenant string) {
	t.Helper()
	admin := s.token(tenant, tenancy.RoleTenantAdmin)
	for range 8 {
		if b := budget(t, s, tenant, admin); b.UsedMS >= b.LimitMS {
			return
		}
		r := s.execute(s.token(tenant), map[string]any{"source": "def run(args, context):\n    while True:\n        pass\n", "limits": map[string]any{"timeout_ms": 30000}})
		if r.status != http.StatusOK || r.json(t)["status"] != "error" { // CPULimit (or a jail stopped before the tool by a sliver of a limit)
			t.Fatalf("burning %s's budget: %d %s", tenant, r.status, r.body)
		}
	}
	t.Fatalf("%s's budget is not spent after 8 runs: %+v", tenant, budget(t, s, tenant, admin))
}
