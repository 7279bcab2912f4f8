package gateway

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/tenancy"
)

// Access says who may use one authenticated route and for which tenants.
// The access table is the one place this is decided: the router registers
// exactly its routes with its checks, and the README's role table is
// rendered from it (RoleTable; a test keeps the README in step).
//
// How to add a route:
//  1. Add its row here (grants: the roles, each with ScopeOwn or ScopeAll;
//     tenant: where the route takes the tenant it acts on).
//  2. Add its handler to routes() in server.go.
//  3. Run the role matrix test (app/roles_test.go) and update the README
//     table from RoleTable (go test ./gateway -run RoleTable -update).
type Access struct {
	Method, Path string // Gin path, e.g. /v1/admin/tenants/:id/quota
	// Tenant is where the route takes the tenant it acts on.
	Tenant TenantFrom
	Grants []tenancy.Grant
	// Does is a few words for the README.
	Does string
}

// TenantFrom is where a route takes the tenant it acts on.
type TenantFrom string

// Where a route's tenant comes from.
const (
	// TenantFromToken: the token's tenant; a tenant_id in the body must
	// equal it. The handler checks after decoding the body, so refusals
	// are audited like the rest of the execute flow.
	TenantFromToken TenantFrom = "token"
	// TenantFromBody: tenant_id in the body; the handler checks it after
	// decoding.
	TenantFromBody TenantFrom = "body"
	// TenantFromPath: the :id path parameter, checked before the handler.
	TenantFromPath TenantFrom = "path"
	// TenantFromQuery: the tenant query parameter (default: the caller's
	// own; every tenant for a ScopeAll grant); the handler checks it.
	TenantFromQuery TenantFrom = "query"
	// TenantAll: every tenant at once (a listing); only ScopeAll grants
	// reach it. Checked before the handler.
	TenantAll TenantFrom = "all"
)

var (
	adminAny     = tenancy.Grant{Role: tenancy.RoleAdmin, Scope: tenancy.ScopeAll}
	tenantAdmin  = tenancy.Grant{Role: tenancy.RoleTenantAdmin, Scope: tenancy.ScopeOwn}
	policyAuthor = tenancy.Grant{Role: tenancy.RolePolicyAuthor, Scope: tenancy.ScopeOwn}
	auditor      = tenancy.Grant{Role: tenancy.RoleAuditor, Scope: tenancy.ScopeOwn}
	executor     = tenancy.Grant{Role: tenancy.RoleExecutor, Scope: tenancy.ScopeOwn}
)

// accessTable is every authenticated route. Only admin reaches other
// tenants; only admin changes quotas (a tenant raising its own limits
// would defeat them) or tool servers (they make the gateway connect to a
// URL with secrets it holds) or lists every tenant.
var accessTable = []Access{
	{http.MethodPost, "/v1/execute", TenantFromToken, []tenancy.Grant{executor}, "run a tool"},
	{http.MethodPost, "/v1/validate", TenantFromToken, []tenancy.Grant{executor}, "check a tool's source"},
	{http.MethodGet, "/v1/tools", TenantFromToken, []tenancy.Grant{executor}, "list the granted tools (code mode)"},
	{http.MethodPost, "/v1/prepare", TenantFromToken, []tenancy.Grant{executor}, "resolve, check and install a package environment"},
	{http.MethodGet, "/v1/runtimes", TenantFromQuery, []tenancy.Grant{adminAny, executor}, "list the runtimes, what each has and which the tenant may use"},
	{http.MethodGet, "/v1/admin/tenants", TenantAll, []tenancy.Grant{adminAny}, "list every tenant"},
	{http.MethodGet, "/v1/admin/tenants/:id/quota", TenantFromPath, []tenancy.Grant{adminAny, tenantAdmin, auditor}, "read a tenant's quota"},
	{http.MethodPut, "/v1/admin/tenants/:id/quota", TenantFromPath, []tenancy.Grant{adminAny}, "override a tenant's quota"},
	{http.MethodDelete, "/v1/admin/tenants/:id/quota", TenantFromPath, []tenancy.Grant{adminAny}, "clear a quota override"},
	{http.MethodGet, "/v1/admin/tenants/:id/usage", TenantFromPath, []tenancy.Grant{adminAny, tenantAdmin, auditor}, "read a tenant's usage"},
	{http.MethodGet, "/v1/admin/tenants/:id/tools", TenantFromPath, []tenancy.Grant{adminAny, tenantAdmin, auditor}, "read a tenant's tool servers"},
	{http.MethodPut, "/v1/admin/tenants/:id/tools/servers/:name", TenantFromPath, []tenancy.Grant{adminAny}, "add or replace a tool server"},
	{http.MethodDelete, "/v1/admin/tenants/:id/tools/servers/:name", TenantFromPath, []tenancy.Grant{adminAny}, "remove a tool server added over the API"},
	{http.MethodPost, "/v1/admin/policy/evaluate", TenantFromBody, []tenancy.Grant{adminAny, tenantAdmin, policyAuthor}, "dry-run a tenant's policy"},
	{http.MethodGet, "/v1/admin/audit", TenantFromQuery, []tenancy.Grant{adminAny, tenantAdmin, auditor}, "search recent audit records"},
	{http.MethodGet, "/v1/admin/traces/:trace_id", TenantFromQuery, []tenancy.Grant{adminAny, auditor}, "read a trace's spans kept in memory (no OTLP collector)"},
	{http.MethodPost, "/v1/executions", TenantFromToken, []tenancy.Grant{executor}, "submit an async run"},
	{http.MethodGet, "/v1/executions/:id", TenantFromQuery, []tenancy.Grant{adminAny, executor}, "read an async run's state and result"},
	{http.MethodGet, "/v1/executions/:id/events", TenantFromQuery, []tenancy.Grant{adminAny, executor}, "follow an async run's output (Server-Sent Events)"},
	{http.MethodDelete, "/v1/executions/:id", TenantFromQuery, []tenancy.Grant{adminAny, executor}, "cancel an async run"},
	{http.MethodGet, "/v1/executions/:id/artifacts/:name", TenantFromQuery, []tenancy.Grant{adminAny, executor}, "download a run's artifact"},
	{http.MethodPost, "/mcp", TenantFromToken, []tenancy.Grant{executor}, "MCP tools: execute_python, execute_javascript, validate"},
}

// accessRow is the access table's row of method and path; a missing row
// has no grants (every call refused).
func accessRow(method, path string) Access {
	for _, a := range accessTable {
		if a.Method == method && a.Path == path {
			return a
		}
	}
	return Access{}
}

// AccessTable returns a copy of the access table.
func AccessTable() []Access {
	out := make([]Access, len(accessTable))
	for i, a := range accessTable {
		a.Grants = append([]tenancy.Grant(nil), a.Grants...)
		out[i] = a
	}
	return out
}

// keyAccess holds the route's Access in the gin context.
const keyAccess = "execgate.access"

// guard records the route's Access and checks what the request line
// already tells: the path's tenant, or every tenant. Routes whose tenant
// comes from the body (or the token) are checked by their handler through
// authorizeTenant once the body is decoded.
func (s *Server) guard(a Access) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Set(keyAccess, a)
		p, _ := tenancy.PrincipalFrom(c.Request.Context())
		var err error
		switch a.Tenant {
		case TenantFromPath:
			_, err = s.d.Tenants.Authorize(p, c.Param("id"), a.Grants)
		case TenantAll:
			_, err = s.d.Tenants.AuthorizeAll(p, a.Grants)
		}
		if err != nil {
			s.fail(c, err)
			c.Abort()
			return
		}
		c.Next()
	}
}

// authorizeTenant checks the caller against the route's access row for
// tenant target ("" = the caller's own) and returns the caller's tenant.
func (s *Server) authorizeTenant(c *gin.Context, p tenancy.Principal, target string) (tenancy.Tenant, error) {
	a, ok := c.Value(keyAccess).(Access)
	if !ok { // a route registered outside the table: refuse, never allow
		return tenancy.Tenant{}, &tenancy.ForbiddenError{Reason: "route without an access rule"}
	}
	return s.d.Tenants.Authorize(p, target, a.Grants)
}

// RoleTable renders the access table as the README's Markdown table: one
// row per route, one column per role, each cell the tenants the role
// reaches there.
func RoleTable() string {
	roles := tenancy.Roles()
	var b strings.Builder
	b.WriteString("| route | does |")
	for _, r := range roles {
		b.WriteString(" `" + r + "` |")
	}
	b.WriteString("\n|---|---|")
	for range roles {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, a := range accessTable {
		segs := strings.Split(a.Path, "/")
		for i, seg := range segs {
			if strings.HasPrefix(seg, ":") {
				segs[i] = "{" + seg[1:] + "}"
			}
		}
		path := strings.Join(segs, "/")
		b.WriteString("| `" + a.Method + " " + path + "` | " + a.Does + " |")
		for _, r := range roles {
			cell := "—"
			for _, g := range a.Grants {
				if g.Role != r {
					continue
				}
				switch {
				case g.Scope == tenancy.ScopeAll && a.Tenant == TenantAll:
					cell = "all tenants"
				case g.Scope == tenancy.ScopeAll:
					cell = "any tenant"
				default:
					cell = "own tenant"
				}
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}
