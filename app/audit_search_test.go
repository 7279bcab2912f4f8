package app_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/execgate/execgate/tenancy"
)

// GET /v1/admin/audit through the real router and the real audit file:
// who sees which tenant's records, and the bounds on the query.
func TestAuditSearchIsScopedToTheCallersTenant(t *testing.T) {
	s := start(t, setup{runner: validRunner{}})
	for _, tenant := range []string{"demo", "acme", "demo"} {
		if r := s.execute(s.token(tenant), `{"source":"def run(args, context):\n    return 1\n"}`); r.status != http.StatusOK {
			t.Fatalf("execute as %s: %d %s", tenant, r.status, r.body)
		}
	}
	tenants := func(r response) map[string]int {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("search: %d %s", r.status, r.body)
		}
		var body struct {
			Records []struct {
				TenantID string `json:"tenant_id"`
			} `json:"records"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, rec := range body.Records {
			n[rec.TenantID]++
		}
		return n
	}
	admin := s.token("demo", tenancy.RoleAdmin)
	if got := tenants(s.do("GET", "/v1/admin/audit", admin, nil)); got["demo"] != 2 || got["acme"] != 1 {
		t.Errorf("admin without tenant: %v, want every tenant's records (demo 2, acme 1)", got)
	}
	if got := tenants(s.do("GET", "/v1/admin/audit?tenant=acme&limit=200", admin, nil)); len(got) != 1 || got["acme"] != 1 {
		t.Errorf("admin for acme: %v", got)
	}
	for _, role := range []string{tenancy.RoleAuditor, tenancy.RoleTenantAdmin} {
		if got := tenants(s.do("GET", "/v1/admin/audit?status=ok", s.token("demo", role), nil)); len(got) != 1 || got["demo"] != 2 {
			t.Errorf("%s of demo without tenant: %v, want its own tenant's only", role, got)
		}
	}
	for _, q := range []string{"limit=0", "limit=201", "limit=x", "since=yesterday", "status=maybe", "tenant_id=demo"} {
		if r := s.do("GET", "/v1/admin/audit?"+q, admin, nil); r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" {
			t.Errorf("?%s: %d %s, want 400 BadRequest", q, r.status, r.body)
		}
	}
	if r := s.do("GET", "/v1/admin/audit?tenant=nosuch", admin, nil); r.status != http.StatusNotFound {
		t.Errorf("an unknown tenant: %d, want 404", r.status)
	}
}
