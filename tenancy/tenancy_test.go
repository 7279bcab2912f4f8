package tenancy

import (
	"errors"
	"strings"
	"testing"
)

func TestAuthorize(t *testing.T) {
	reg, err := NewRegistry([]Tenant{{ID: "acme", Plan: "standard"}, {ID: "globex"}})
	if err != nil {
		t.Fatal(err)
	}
	exec := Principal{TenantID: "acme", Subject: "alice", Roles: []string{RoleExecutor}}
	execOwn := []Grant{{RoleExecutor, ScopeOwn}}
	tests := []struct {
		name      string
		p         Principal
		requested string
		grants    []Grant
		want      string // "" = allowed; else a substring of the reason
	}{
		{"an executor of a configured tenant may execute", exec, "", execOwn, ""},
		{"naming the own tenant in the body is fine", exec, "acme", execOwn, ""},
		{"naming another tenant in the body is forbidden", exec, "globex", execOwn, `tenant_id "globex" does not match`},
		{"naming an unknown tenant reads the same as naming another", exec, "nosuch", execOwn, `tenant_id "nosuch" does not match the token's tenant; role "executor" reaches its own tenant only`},
		{"a missing role is forbidden", exec, "", []Grant{{RoleAdmin, ScopeAll}}, `role "admin" required`},
		{"several roles are named", exec, "", []Grant{{RoleAdmin, ScopeAll}, {RoleAuditor, ScopeOwn}}, `role one of "admin", "auditor" required`},
		{"a platform-wide grant reaches another tenant", Principal{TenantID: "acme", Roles: []string{RoleAdmin}}, "globex", []Grant{{RoleAdmin, ScopeAll}, {RoleTenantAdmin, ScopeOwn}}, ""},
		{"an own-tenant grant does not", Principal{TenantID: "acme", Roles: []string{RoleTenantAdmin}}, "globex", []Grant{{RoleAdmin, ScopeAll}, {RoleTenantAdmin, ScopeOwn}}, `role "tenant-admin" reaches its own tenant only`},
		{"an unknown tenant is forbidden", Principal{TenantID: "initech", Roles: []string{RoleExecutor}}, "", execOwn, `tenant "initech" is not configured`},
		{"no roles at all is forbidden", Principal{TenantID: "acme"}, "", execOwn, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ten, err := reg.Authorize(tt.p, tt.requested, tt.grants)
			if tt.want == "" {
				if err != nil || ten.ID != tt.p.TenantID {
					t.Fatalf("Authorize = %+v, %v", ten, err)
				}
				return
			}
			var fe *ForbiddenError
			if !errors.Is(err, ErrForbidden) || !errors.As(err, &fe) || !strings.Contains(fe.Reason, tt.want) {
				t.Fatalf("err = %v, want forbidden %q", err, tt.want)
			}
		})
	}
	all := []Grant{{RoleAdmin, ScopeAll}, {RoleTenantAdmin, ScopeOwn}}
	if _, err := reg.AuthorizeAll(Principal{TenantID: "acme", Roles: []string{RoleAdmin}}, all); err != nil {
		t.Errorf("an admin acting on every tenant: %v", err)
	}
	if _, err := reg.AuthorizeAll(Principal{TenantID: "acme", Roles: []string{RoleTenantAdmin}}, all); !errors.Is(err, ErrForbidden) {
		t.Errorf("a tenant-admin acting on every tenant: %v", err)
	}
	_, err = reg.Authorize(Principal{TenantID: "initech", Roles: []string{RoleExecutor}}, "", execOwn)
	if !errors.Is(err, ErrUnknownTenant) {
		t.Errorf("unknown tenant refusal does not match ErrUnknownTenant: %v", err)
	}
}

func TestNewRegistryRejectsBadTenants(t *testing.T) {
	for name, ts := range map[string][]Tenant{
		"an empty id":    {{ID: ""}},
		"a duplicate id": {{ID: "a"}, {ID: "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewRegistry(ts); err == nil {
				t.Fatal("NewRegistry accepted it")
			}
		})
	}
	reg, err := NewRegistry([]Tenant{{ID: "b"}, {ID: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if l := reg.List(); len(l) != 2 || l[0].ID != "b" || l[1].ID != "a" {
		t.Fatalf("List = %+v, want config order", l)
	}
}

func TestPrincipalFromClaimsNeedsATenant(t *testing.T) {
	if _, err := PrincipalFromClaims("sub", "", []string{RoleExecutor}); err == nil {
		t.Fatal("accepted claims without tenant")
	}
	roles := []string{RoleExecutor}
	p, err := PrincipalFromClaims("sub", "acme", roles)
	if err != nil || !p.HasRole(RoleExecutor) || p.HasRole(RoleAdmin) {
		t.Fatalf("p = %+v, %v", p, err)
	}
	roles[0] = RoleAdmin
	if p.HasRole(RoleAdmin) {
		t.Fatal("principal shares the caller's roles slice")
	}
}
