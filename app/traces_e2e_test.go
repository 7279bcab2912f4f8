package app_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/tenancy"
)

// Without a collector the gateway keeps a run's spans: an auditor of the
// tenant reads them, with durations, by the trace id of the envelope (and
// audit record); another tenant's auditor does not, and a tenant that
// sends another's trace id as its traceparent only adds spans of its own.
func TestARunsSpansAreServedToItsTenantsAuditor(t *testing.T) {
	s := start(t, setup{})
	r := s.execute(s.token("demo"), probe("demo"))
	if r.status != http.StatusOK {
		t.Fatalf("probe: %d %s", r.status, r.body)
	}
	traceID := r.json(t)["trace_id"].(string)
	var recorded bool
	for _, l := range s.auditLines() {
		recorded = recorded || l["trace_id"] == traceID
	}
	if !recorded {
		t.Fatalf("no audit record with the envelope's trace id %s", traceID)
	}

	// acme joins demo's trace id with a request of its own.
	req, _ := http.NewRequest(http.MethodPost, s.app.URL()+"/v1/execute", bytes.NewReader([]byte(probe("acme"))))
	req.Header.Set("Authorization", "Bearer "+s.token("acme"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	get := func(token, query string) (int, gateway.TraceResponse) {
		t.Helper()
		r := s.do(http.MethodGet, "/v1/admin/traces/"+traceID+query, token, nil)
		var tr gateway.TraceResponse
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &tr); err != nil {
				t.Fatal(err)
			}
		}
		return r.status, tr
	}

	status, tr := get(s.token("demo", tenancy.RoleAuditor), "")
	if status != http.StatusOK || tr.TraceID != traceID || tr.Tenant != "demo" {
		t.Fatalf("demo's auditor: %d %+v", status, tr)
	}
	names := map[string]bool{}
	for _, sp := range tr.Spans {
		names[sp.Name] = true
		if sp.TenantID != "demo" {
			t.Fatalf("demo's auditor sees a span of %q: %+v", sp.TenantID, sp)
		}
		if sp.DurationMS < 0 || sp.End.Before(sp.Start) || sp.TraceID != traceID {
			t.Fatalf("span %+v", sp)
		}
	}
	for _, want := range []string{"POST /v1/execute", "auth", "policy", "quota", "run", "audit"} {
		if !names[want] {
			t.Errorf("no %q span among demo's: %v", want, names)
		}
	}

	// acme's auditor reaches only acme's spans: its own request's.
	status, tr = get(s.token("acme", tenancy.RoleAuditor), "")
	if status != http.StatusOK {
		t.Fatalf("acme's auditor: %d", status)
	}
	for _, sp := range tr.Spans {
		if sp.TenantID != "acme" {
			t.Fatalf("acme's auditor sees demo's span %+v", sp)
		}
	}
	if status, _ := get(s.token("acme", tenancy.RoleAuditor), "?tenant=demo"); status != http.StatusForbidden {
		t.Fatalf("acme's auditor naming demo: %d, want 403", status)
	}
	if status, _ := get(s.token("demo", tenancy.RoleExecutor), ""); status != http.StatusForbidden {
		t.Fatalf("an executor: %d, want 403", status)
	}
	// An admin sees every tenant's spans of the trace.
	status, tr = get(s.token("demo", tenancy.RoleAdmin), "")
	tenants := map[string]bool{}
	for _, sp := range tr.Spans {
		tenants[sp.TenantID] = true
	}
	if status != http.StatusOK || !tenants["demo"] || !tenants["acme"] || tr.Tenant != "" {
		t.Fatalf("admin: %d, tenants %v", status, tenants)
	}
	if r := s.do(http.MethodGet, "/v1/admin/traces/not-a-trace-id", s.token("demo", tenancy.RoleAuditor), nil); r.status != http.StatusBadRequest {
		t.Fatalf("a malformed id: %d %s", r.status, r.body)
	}
}
