package app_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/execgate/execgate/config"
)

// TestUnlistedEgressHostIsDeniedNamingIt: a proxy run asking for a host the
// tenant's allow-list does not cover is a 403 PolicyDenied whose reasons
// name the host (it used to be allowed with the host silently dropped, and
// the tool failed inside the jail); nothing runs.
func TestUnlistedEgressHostIsDeniedNamingIt(t *testing.T) {
	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		for i := range c.Tenants {
			if c.Tenants[i].ID == "demo" {
				c.Tenants[i].Policy["network"] = []any{"none", "proxy"}
				c.Tenants[i].Policy["egress_allow"] = []any{"api.example.com:443"}
			}
		}
	}})
	tok := s.token("demo")
	src := "def run(args, context):\n    return 1\n"

	r := s.execute(tok, map[string]any{"source": src, "network_access": "proxy",
		"egress": map[string]any{"allow": []string{"api.example.com", "evil.test:443"}}})
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
		t.Fatalf("got %d %s, want 403 PolicyDenied", r.status, r.body)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	want := []any{`egress host "evil.test:443" is not in the tenant's egress allow-list`}
	if !reflect.DeepEqual(e["reasons"], want) {
		t.Fatalf("reasons = %v, want %v", e["reasons"], want)
	}
	if n := s.runs.Load(); n != 0 {
		t.Fatalf("%d runs for a denied request", n)
	}

	r = s.execute(tok, map[string]any{"source": src, "network_access": "proxy",
		"egress": map[string]any{"allow": []string{"api.example.com"}}})
	if r.status != http.StatusOK {
		t.Fatalf("listed host: %d %s", r.status, r.body)
	}
	dec, _ := r.json(t)["decision"].(map[string]any)
	eg, _ := dec["egress"].(map[string]any)
	if !reflect.DeepEqual(eg["allow"], []any{"api.example.com:443"}) {
		t.Fatalf("decision.egress = %v", dec["egress"])
	}
}

// TestInvalidSourceCarriesLineAndColumn: /v1/execute gives an InvalidSource
// error its position as error.line and error.column (DESIGN §14), not only
// inside the traceback text; an import-time exception has a line only.
func TestInvalidSourceCarriesLineAndColumn(t *testing.T) {
	s := start(t, setup{})
	tok := s.token("demo")
	for _, tc := range []struct {
		name         string
		source       string
		line, column float64 // 0: absent
	}{
		{"a syntax error has its line and column", "import json\n\ndef run(args, context):\n    return json.dumps(args]\n", 4, 27},
		{"an import-time exception has its line", "x = 1\ny = {}\nz = y['missing']\n\ndef run(args, context):\n    return 1\n", 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.execute(tok, map[string]any{"source": tc.source})
			if r.status != http.StatusOK || r.errType(t) != "InvalidSource" {
				t.Fatalf("got %d %s, want 200 InvalidSource", r.status, r.body)
			}
			e, _ := r.json(t)["error"].(map[string]any)
			line, _ := e["line"].(float64)
			column, _ := e["column"].(float64)
			if line != tc.line || column != tc.column {
				t.Fatalf("error line %v column %v, want %v %v: %v", e["line"], e["column"], tc.line, tc.column, e)
			}
		})
	}
}
