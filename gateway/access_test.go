package gateway

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateREADME = flag.Bool("update", false, "rewrite the README's role table from the access table")

const (
	roleTableBegin = "<!-- role table: generated from gateway.AccessTable; go test ./gateway -run TestTheREADMERoleTableIsTheAccessTable -update -->\n"
	roleTableEnd   = "<!-- end of role table -->"
)

// The README's role table is rendered from the access table the router is
// built from; this keeps the two in step.
func TestTheREADMERoleTableIsTheAccessTable(t *testing.T) {
	const path = "../README.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, roleTableBegin)
	j := strings.Index(readme, roleTableEnd)
	if i < 0 || j < i {
		t.Fatalf("README has no role table between %q and %q", roleTableBegin, roleTableEnd)
	}
	got := readme[i+len(roleTableBegin) : j]
	want := RoleTable()
	if got == want {
		return
	}
	if *updateREADME {
		if err := os.WriteFile(path, []byte(readme[:i+len(roleTableBegin)]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("the README's role table differs from the access table (run with -update):\n--- README\n%s\n--- access table\n%s", got, want)
}

// Every row grants something, names known roles, and its routes are the
// router's.
func TestTheAccessTableIsTheRouter(t *testing.T) {
	known := map[string]bool{}
	for _, r := range AccessTable() {
		if len(r.Grants) == 0 || r.Does == "" {
			t.Errorf("%s %s: no grants or no description", r.Method, r.Path)
		}
		for _, g := range r.Grants {
			if !strings.Contains("admin tenant-admin policy-author auditor executor", g.Role) {
				t.Errorf("%s %s: unknown role %q", r.Method, r.Path, g.Role)
			}
		}
		if r.Tenant == TenantFromPath && !strings.Contains(r.Path, ":id") {
			t.Errorf("%s %s: tenant from a path without :id", r.Method, r.Path)
		}
		known[r.Method+" "+r.Path] = true
	}
	s := &Server{}
	for _, r := range s.routes().Routes() {
		if strings.HasPrefix(r.Path, "/v1/") && !known[r.Method+" "+r.Path] {
			t.Errorf("route %s %s has no access row", r.Method, r.Path)
		}
	}
}
