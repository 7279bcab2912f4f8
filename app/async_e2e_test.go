package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/tenancy"
)

// asyncBody is an execute body for POST /v1/executions.
func asyncBody(id, source string, timeoutMS int) string {
	return fmt.Sprintf(`{"execution_id":%q,"source":%q,"limits":{"timeout_ms":%d}}`, id, source, timeoutMS)
}

// waitExecution polls GET /v1/executions/{id} until its status is want.
func (s *server) waitExecution(token, id, want string) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := s.do(http.MethodGet, "/v1/executions/"+id, token, nil)
		if r.status != http.StatusOK {
			s.t.Fatalf("GET %s: %d %s", id, r.status, r.body)
		}
		m := r.json(s.t)
		if m["status"] == want {
			return m
		}
		if m["status"] == "done" || time.Now().After(deadline) {
			s.t.Fatalf("execution %s is %v, waiting for %s: %s", id, m["status"], want, r.body)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// auditOf returns the audit records of execution id.
func (s *server) auditOf(id string) []map[string]any {
	s.t.Helper()
	var out []map[string]any
	for _, l := range s.auditLines() {
		if l["execution_id"] == id {
			out = append(out, l)
		}
	}
	return out
}

const sleepy = "import time\ndef run(args, context):\n    print('started', flush=True)\n    time.sleep(20)\n    return 'slept'\n"

// Issue #15 §4: a run submitted with POST /v1/executions is 202 at once,
// runs in the real sandbox without the request, and GET answers its state
// and then the envelope POST /v1/execute would have answered. Another
// tenant cannot tell it exists; an admin reads it naming the tenant. With
// Redis, a second gateway on the same backend answers GET too.
func TestAnAsyncRunIsAcceptedAndItsEnvelopeReadLater(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var redisURL string
			mutate := func(c *config.Config) {
				if backend == "redis" {
					c.Quota.Backend, c.Quota.RedisURL = "redis", redisURL
				}
			}
			if backend == "redis" {
				redisURL = testenv.Redis(t).URL()
			}
			s := start(t, setup{mutate: mutate})
			demo := s.token("demo")
			src := "def run(args, context):\n    print('hello')\n    context.log('logged')\n    return {'n': args['n'] * 2}\n"
			r := s.do(http.MethodPost, "/v1/executions", demo, fmt.Sprintf(`{"execution_id":"job-1","source":%q,"args":{"n":21}}`, src))
			if r.status != http.StatusAccepted {
				t.Fatalf("submit: %d %s", r.status, r.body)
			}
			if loc := r.header.Get("Location"); loc != "/v1/executions/job-1" {
				t.Fatalf("Location = %q", loc)
			}
			if m := r.json(t); m["execution_id"] != "job-1" || m["status"] != "queued" {
				t.Fatalf("202 body = %s", r.body)
			}
			done := s.waitExecution(demo, "job-1", "done")
			env, _ := done["envelope"].(map[string]any)
			if done["http_status"] != 200.0 || env["status"] != "ok" || fmt.Sprint(env["result"]) != "map[n:42]" ||
				env["stdout"] != "hello\n" || env["execution_id"] != "job-1" || done["finished_at"] == nil || done["started_at"] == nil {
				t.Fatalf("done = %v", done)
			}
			if recs := s.auditOf("job-1"); len(recs) != 1 || recs[0]["outcome"].(map[string]any)["status"] != "ok" {
				t.Fatalf("audit records of job-1 = %v", recs)
			}
			if n := s.runs.Load(); n != 1 {
				t.Fatalf("runs = %d, want 1", n)
			}

			// Another tenant: 404, exactly as for an id that never existed.
			acme := s.token("acme")
			other := s.do(http.MethodGet, "/v1/executions/job-1", acme, nil)
			never := s.do(http.MethodGet, "/v1/executions/no-such-job", acme, nil)
			if other.status != http.StatusNotFound || other.errType(t) != "NotFound" || string(other.body) != string(never.body) {
				t.Fatalf("acme reading demo's job: %d %s (never: %s)", other.status, other.body, never.body)
			}
			if del := s.do(http.MethodDelete, "/v1/executions/job-1", acme, nil); del.status != http.StatusNotFound {
				t.Fatalf("acme cancelling demo's job: %d %s", del.status, del.body)
			}
			if r := s.do(http.MethodGet, "/v1/executions/job-1?tenant=demo", acme, nil); r.status != http.StatusForbidden {
				t.Fatalf("acme naming demo: %d %s", r.status, r.body)
			}
			admin := s.token("acme", tenancy.RoleAdmin)
			if r := s.do(http.MethodGet, "/v1/executions/job-1?tenant=demo", admin, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"n":42`) {
				t.Fatalf("admin reading demo's job: %d %s", r.status, r.body)
			}
			// The id is taken for the TTL.
			if r := s.do(http.MethodPost, "/v1/executions", demo, fmt.Sprintf(`{"execution_id":"job-1","source":%q,"args":{"n":1}}`, src)); r.status != http.StatusBadRequest {
				t.Fatalf("reusing job-1: %d %s", r.status, r.body)
			}

			if backend == "redis" {
				s2 := start(t, setup{noop: true, mutate: mutate})
				r := s2.do(http.MethodGet, "/v1/executions/job-1", s2.token("demo"), nil)
				if r.status != http.StatusOK || !strings.Contains(string(r.body), `"n":42`) {
					t.Fatalf("a second gateway reading job-1: %d %s", r.status, r.body)
				}
			}
		})
	}
}

// Issue #15 §4: DELETE stops a running execution (envelope Cancelled,
// long before its sleep ends), and a queued one ends without ever reaching
// the sandbox. The tenant's active executions are bounded (429).
func TestCancelStopsARunningExecutionAndAQueuedOneNeverRuns(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Server.MaxConcurrentRuns, c.Server.TenantMaxRuns = 1, 1
		c.Server.AsyncMaxActive = 2
	}})
	demo := s.token("demo")
	for _, id := range []string{"long", "queued"} {
		if r := s.do(http.MethodPost, "/v1/executions", demo, asyncBody(id, sleepy, 30000)); r.status != http.StatusAccepted {
			t.Fatalf("submit %s: %d %s", id, r.status, r.body)
		}
		if id == "long" { // it holds the only run slot before the next one comes
			s.waitExecution(demo, "long", "running")
		}
	}
	third := s.do(http.MethodPost, "/v1/executions", demo, asyncBody("third", sleepy, 30000))
	if third.status != http.StatusTooManyRequests || third.errType(t) != "QuotaExceeded" || third.header.Get("Retry-After") == "" {
		t.Fatalf("a third active execution: %d %s", third.status, third.body)
	}
	if recs := s.auditOf("third"); len(recs) != 1 || recs[0]["outcome"].(map[string]any)["http_status"] != 429.0 {
		t.Fatalf("audit of the refused submission = %v", recs)
	}

	// The queued one: cancelled before it runs.
	if st := s.waitExecution(demo, "queued", "queued"); st["started_at"] != nil {
		t.Fatalf("queued = %v", st)
	}
	del := s.do(http.MethodDelete, "/v1/executions/queued", demo, nil)
	if del.status != http.StatusAccepted || del.json(t)["cancel_requested"] != true {
		t.Fatalf("DELETE queued: %d %s", del.status, del.body)
	}
	q := s.waitExecution(demo, "queued", "done")
	qenv := q["envelope"].(map[string]any)
	if q["http_status"] != 409.0 || qenv["error"].(map[string]any)["type"] != "Cancelled" {
		t.Fatalf("cancelled while queued = %v", q)
	}
	if n := s.runs.Load(); n != 1 {
		t.Fatalf("runs = %d, want 1 (the queued one never ran)", n)
	}

	// The running one: stopped.
	start := time.Now()
	if del := s.do(http.MethodDelete, "/v1/executions/long", demo, nil); del.status != http.StatusAccepted {
		t.Fatalf("DELETE long: %d %s", del.status, del.body)
	}
	l := s.waitExecution(demo, "long", "done")
	lenv := l["envelope"].(map[string]any)
	e := lenv["error"].(map[string]any)
	if l["http_status"] != 200.0 || lenv["status"] != "error" || e["type"] != "Cancelled" || !strings.Contains(fmt.Sprint(e["message"]), "cancelled by its caller") {
		t.Fatalf("cancelled while running = %v", l)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the cancelled run took %v to end", took)
	}
	recs := s.auditOf("long")
	if len(recs) != 1 || recs[0]["outcome"].(map[string]any)["error_type"] != "Cancelled" {
		t.Fatalf("audit of the cancelled run = %v", recs)
	}
	// Done: a second DELETE changes nothing.
	if again := s.do(http.MethodDelete, "/v1/executions/long", demo, nil); again.status != http.StatusOK || again.json(t)["status"] != "done" {
		t.Fatalf("DELETE of a done execution: %d %s", again.status, again.body)
	}
}

// Issue #15 §4: a synchronous caller that goes away mid-run stops the run,
// and the run is recorded Cancelled (it was recorded Timeout).
func TestASyncCallerThatGoesAwayLeavesACancelledRecord(t *testing.T) {
	s := start(t, setup{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.app.URL()+"/v1/execute",
		strings.NewReader(asyncBody("gone", sleepy, 30000)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token("demo"))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for s.runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling for the run to start
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request finished although it was cancelled")
	}
	for time.Now().Before(deadline) {
		if recs := s.auditOf("gone"); len(recs) == 1 {
			out := recs[0]["outcome"].(map[string]any)
			if out["error_type"] != "Cancelled" {
				t.Fatalf("audit of the abandoned run = %v", recs[0])
			}
			var usage struct {
				WallMS int64 `json:"wall_ms"`
			}
			b, _ := json.Marshal(recs[0]["usage"])
			if err := json.Unmarshal(b, &usage); err != nil || usage.WallMS >= 20000 {
				t.Fatalf("the abandoned run was not stopped: usage %s", b)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no audit record of the abandoned run")
}

// Issue #15 §4: with the Redis backend, a cancel sent to another gateway
// replica stops the run on the gateway that runs it.
func TestACancelThroughAnotherGatewayStopsTheRun(t *testing.T) {
	url := testenv.Redis(t).URL()
	mutate := func(c *config.Config) { c.Quota.Backend, c.Quota.RedisURL = "redis", url }
	s1 := start(t, setup{mutate: mutate})
	s2 := start(t, setup{noop: true, mutate: mutate})
	if r := s1.do(http.MethodPost, "/v1/executions", s1.token("demo"), asyncBody("far", sleepy, 30000)); r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	demo2 := s2.token("demo")
	s2.waitExecution(demo2, "far", "running")
	if del := s2.do(http.MethodDelete, "/v1/executions/far", demo2, nil); del.status != http.StatusAccepted {
		t.Fatalf("DELETE through the other gateway: %d %s", del.status, del.body)
	}
	done := s2.waitExecution(demo2, "far", "done")
	e := done["envelope"].(map[string]any)["error"].(map[string]any)
	if e["type"] != "Cancelled" {
		t.Fatalf("cancelled through another gateway = %v", done)
	}
	if n := s2.runs.Load(); n != 0 {
		t.Fatalf("the other gateway ran %d runs", n)
	}
}
