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
	tests := []struct {
		name      string
		p         Principal
		requested string
		role      string
		want      string // "" = allowed; else a substring of the reason
	}{
		{"an executor of a configured tenant may execute", exec, "", RoleExecutor, ""},
		{"naming the own tenant in the body is fine", exec, "acme", RoleExecutor, ""},
		{"naming another tenant in the body is forbidden", exec, "globex", RoleExecutor, `tenant_id "globex" does not match`},
		{"a missing role is forbidden", exec, "", RoleAdmin, `role "admin" required`},
		{"an unknown tenant is forbidden", Principal{TenantID: "initech", Roles: []string{RoleExecutor}}, "", RoleExecutor, `tenant "initech" is not configured`},
		{"no roles at all is forbidden", Principal{TenantID: "acme"}, "", RoleExecutor, "required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ten, err := reg.Authorize(tt.p, tt.requested, tt.role)
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
	_, err = reg.Authorize(Principal{TenantID: "initech", Roles: []string{RoleExecutor}}, "", RoleExecutor)
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
