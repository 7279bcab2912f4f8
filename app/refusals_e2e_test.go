package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

// badBody is an execute body refused after authentication (400
// BadRequest), which leaves an audit record and costs no quota.
const badBody = `{"source": 5}`

// flood sends n refused execute requests with token from 8 workers and
// counts the answers by status.
func (s *server) flood(t *testing.T, token string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex // guards got
	got := map[int]int{}
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				req, _ := http.NewRequest(http.MethodPost, "http://"+s.app.Addr()+"/v1/execute", strings.NewReader(badBody))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := s.client.Do(req)
				if err != nil {
					t.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				got[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	return got
}

// mint is a token of tenant for subject with roles.
func (s *server) mint(tenant, subject string, roles ...string) string {
	s.t.Helper()
	tok, err := s.signer.Mint(auth.Claims{Subject: subject, TenantID: tenant, Roles: roles}, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// auditSearch is GET /v1/admin/audit?query's execution ids and whether
// the scan stopped at its limit.
func (s *server) auditSearch(t *testing.T, token, query string) (ids []string, limitReached bool) {
	t.Helper()
	r := s.do(http.MethodGet, "/v1/admin/audit?"+query, token, nil)
	if r.status != http.StatusOK {
		t.Fatalf("audit search: %d %s", r.status, r.body)
	}
	var body struct {
		Records []struct {
			ExecutionID string `json:"execution_id"`
		} `json:"records"`
		ScanLimitReached bool `json:"scan_limit_reached"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil {
		t.Fatal(err)
	}
	for _, rec := range body.Records {
		ids = append(ids, rec.ExecutionID)
	}
	return ids, body.ScanLimitReached
}

// Issue #23 item 10, search: tenant acme's 22 records stay findable by
// acme's auditor while tenant demo floods the audit log with refused
// requests past several rotations (the refusal limit turned off here so
// the flood gets through; the next test is the limit).
func TestATenantsAuditorFindsItsRecordsWhileAnotherTenantFloods(t *testing.T) {
	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Server.RefusalsPerMinute = -1
		c.Audit.MaxSizeMB = 1
		for i := range c.Tenants {
			c.Tenants[i].Quota.Burst = 100
		}
	}})
	acme := s.token("acme")
	for i := range 22 {
		body := fmt.Sprintf(`{"execution_id":"acme-%02d","source":"def run(args, context):\n    return 1\n"}`, i)
		if r := s.execute(acme, body); r.status != http.StatusOK {
			t.Fatalf("acme's run %d: %d %s", i, r.status, r.body)
		}
	}
	got := s.flood(t, s.token("demo"), 6000)
	if got[http.StatusBadRequest] != 6000 {
		t.Fatalf("demo's flood: %v, want 6000 × 400", got)
	}
	ids, _ := s.auditSearch(t, s.token("acme", tenancy.RoleAuditor), "limit=200")
	if len(ids) != 22 || ids[0] != "acme-21" || ids[21] != "acme-00" {
		t.Fatalf("acme's auditor found %d of its 22 records under demo's flood: %v", len(ids), ids)
	}
	demoIDs, _ := s.auditSearch(t, s.token("demo", tenancy.RoleAuditor), "limit=5&error_type=BadRequest")
	if len(demoIDs) != 5 {
		t.Fatalf("demo's own search: %v", demoIDs)
	}
}

// Issue #23 item 10, the limit: a subject's refused requests past its
// bucket are 429 QuotaExceeded with Retry-After before policy, leave one
// audit record counting the rest, and cost nothing to another subject of
// the same tenant or to another tenant.
func TestRefusedRequestsAreRateLimitedPerSubject(t *testing.T) {
	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Server.RefusalsPerMinute = 60 // one a second
		c.Server.RefusalsBurst = 10
	}})
	noisy := s.mint("demo", "noisy", tenancy.RoleExecutor)
	got := s.flood(t, noisy, 200)
	if got[http.StatusBadRequest] < 10 || got[http.StatusBadRequest] > 10+8 || got[http.StatusTooManyRequests] != 200-got[http.StatusBadRequest] {
		t.Fatalf("200 refused requests of one subject with a burst of 10: %v, want ≈10 × 400 and the rest 429", got)
	}
	r := s.execute(noisy, badBody)
	if r.status != http.StatusTooManyRequests || r.errType(t) != "QuotaExceeded" || r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(r.body), "refusals_per_minute") {
		t.Fatalf("the noisy subject's next request: %d %s (Retry-After %q)", r.status, r.body, r.header.Get("Retry-After"))
	}
	// A well-formed request of the noisy subject is refused too: the limit
	// comes before decoding and policy.
	if r := s.execute(noisy, probe("demo")); r.status != http.StatusTooManyRequests {
		t.Fatalf("the noisy subject's valid run: %d %s", r.status, r.body)
	}
	if n := s.runs.Load(); n != 0 {
		t.Fatalf("%d runs reached the runner", n)
	}
	// Another subject of the same tenant, and another tenant, run.
	if r := s.execute(s.mint("demo", "quiet", tenancy.RoleExecutor), probe("demo")); r.status != http.StatusOK {
		t.Fatalf("another subject of demo: %d %s", r.status, r.body)
	}
	if r := s.execute(s.token("acme"), probe("acme")); r.status != http.StatusOK {
		t.Fatalf("another tenant: %d %s", r.status, r.body)
	}

	// Once its bucket refills the noisy subject is served again, and the
	// limited requests not yet counted get their record.
	limited := got[http.StatusTooManyRequests] + 2
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.execute(noisy, strings.Replace(probe("demo"), `"probe"`, `"noisy-again"`, 1))
		if r.status == http.StatusOK {
			break
		}
		if r.status != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("the noisy subject after its bucket refilled: %d %s", r.status, r.body)
		}
		limited++
		time.Sleep(200 * time.Millisecond) // the bucket refills with time: the clock is the observable state
	}

	// The audit log: each refused request the bucket let through, records
	// standing for the limited ones (1 + refusals_dropped each), the runs.
	var refused, represented, records, runs int
	for _, rec := range s.auditLines() {
		out := rec["outcome"].(map[string]any)
		switch {
		case out["status"] == "ok":
			runs++
		case rec["subject"] != "noisy":
			t.Errorf("a refused record of %v", rec["subject"])
		case out["http_status"] == 400.0:
			refused++
		case out["http_status"] == 429.0:
			records++
			if q := rec["quota"].(map[string]any); q["kind"] != "refusals" || q["outcome"] != "exceeded" {
				t.Errorf("the limited record's quota: %v", q)
			}
			d, _ := rec["refusals_dropped"].(float64)
			represented += 1 + int(d)
		default:
			t.Errorf("a noisy record with status %v", out["http_status"])
		}
	}
	if refused != got[http.StatusBadRequest] || represented != limited || records > 3 || runs != 3 {
		t.Fatalf("audit: %d refused, %d records standing for %d limited requests, %d runs; want %d, at most 3 for %d, 3",
			refused, records, represented, runs, got[http.StatusBadRequest], limited)
	}
}
