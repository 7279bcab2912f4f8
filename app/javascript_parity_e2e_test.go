package app_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// npmServer is a gateway with a real sandbox whose npm packages come from
// a loopback registry serving testenv.NPMFixtures. Tenant demo may install
// all of them; tenant acme all but upper (a dependency of shout).
func npmServer(t *testing.T, mods ...func(*config.Config)) (*server, *testenv.NPMRegistry) {
	t.Helper()
	testenv.Deno(t)
	reg := testenv.StartNPMRegistry(t, testenv.NPMFixtures()...)
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.NPMRegistry = sandbox.NPMRegistry{URL: reg.URL}
		for i := range c.Tenants {
			allow := []any{"npm:shout", "npm:upper", "npm:@tools/math", "npm:scripted"}
			if c.Tenants[i].ID == "acme" {
				allow = []any{"npm:shout", "npm:@tools/math"}
			}
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": allow, "deny": []any{}}
		}
		for _, m := range mods {
			m(c)
		}
	}})
	return s, reg
}

// POST /v1/prepare with language javascript and warm keeps a started Deno
// jail of the environment, which a run naming it takes.
func TestJavaScriptPrepareWithWarmStartsRunsWarm(t *testing.T) {
	s, _ := npmServer(t, func(c *config.Config) { c.Sandbox.WarmPool = 1 })
	if s.sandbox == nil {
		t.Fatal("the harness built no sandbox runner")
	}
	demo := s.token("demo")
	r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"language": "typescript", "requirements": []string{"@tools/math@0.3.0"}, "warm": 1})
	if r.status != http.StatusOK || r.json(t)["warm"] != float64(1) {
		t.Fatalf("prepare: %d %s", r.status, r.body)
	}
	id := r.json(t)["environment_id"].(string)
	waitFor(t, "a warm jail of the environment", 30*time.Second, func() bool { return s.sandbox.Info().WarmIdle >= 2 })
	r = s.execute(demo, map[string]any{"language": "typescript", "environment_id": id,
		"source": "import { add } from \"@tools/math\";\nexport function run(): number { return add(40, 2) }\n"})
	env := r.json(t)
	if r.status != http.StatusOK || env["status"] != "ok" || env["result"] != float64(42) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if env["usage"].(map[string]any)["warm"] != true {
		t.Fatalf("the run did not take the warm jail: %s", r.body)
	}
}

const shoutTool = `import shout from "shout";
import { add } from "@tools/math";
export function run(args) { return [shout(args.word), add(1, 2)] }
`

// JavaScript requirements are npm packages: resolved with their
// dependencies, every package checked by the tenant's policy (a
// dependency off the allow-list is a 403 naming its chain), installed once
// (POST /v1/prepare with language javascript, then runs by environment_id
// or lock install nothing), importable by bare name; an environment of the
// other language, or requirements of the other ecosystem, are 400s.
func TestJavaScriptRequirementsAreNPMPackages(t *testing.T) {
	s, _ := npmServer(t)
	demo, acme := s.token("demo"), s.token("acme")
	js := func(extra map[string]any) map[string]any {
		b := map[string]any{"language": "javascript", "source": shoutTool, "args": map[string]any{"word": "hi"}}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	okResult := func(t *testing.T, r response) {
		t.Helper()
		env := r.json(t)
		if r.status != http.StatusOK || env["status"] != "ok" || fmt.Sprint(env["result"]) != "[HI! 3]" {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	t.Run("a run with requirements imports them", func(t *testing.T) {
		okResult(t, s.execute(demo, js(map[string]any{"requirements": []string{"shout@1.2.0", "@tools/math@0.3.0"}})))
	})
	t.Run("a dependency off the allow-list is a 403 naming the chain, and nothing runs", func(t *testing.T) {
		before := s.runs.Load()
		r := s.execute(acme, js(map[string]any{"requirements": []string{"shout@1.2.0", "@tools/math@0.3.0"}}))
		if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		e, _ := r.json(t)["error"].(map[string]any)
		want := `package "npm:upper@2.1.0" (shout → upper) is not in tenant "acme"'s allow-list`
		if fmt.Sprint(e["reasons"]) != "["+want+"]" {
			t.Fatalf("reasons %v, want [%s]", e["reasons"], want)
		}
		if s.runs.Load() != before {
			t.Fatal("a denied run reached the sandbox")
		}
	})
	var envID, lock string
	t.Run("prepare with language javascript, then runs install nothing", func(t *testing.T) {
		r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"language": "javascript", "requirements": []string{"shout@1.2.0", "@tools/math@0.3.0"}})
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		p := r.json(t)
		envID, _ = p["environment_id"].(string)
		lock, _ = p["lock"].(string)
		if rt, ok := p["runtime"]; ok {
			t.Errorf("an npm environment names runtime %v (npm packages serve every runtime)", rt)
		}
		if !strings.HasPrefix(lock, "# execgate npm lock 1\n") || !strings.Contains(lock, "upper@2.1.0 sha512-") || !strings.Contains(lock, "# via shout@1.2.0") {
			t.Fatalf("lock:\n%s", lock)
		}
		var names []string
		for _, x := range p["packages"].([]any) {
			m := x.(map[string]any)
			names = append(names, fmt.Sprintf("%s@%s via %v", m["name"], m["version"], m["via"]))
		}
		if got := strings.Join(names, ", "); got != "@tools/math@0.3.0 via [@tools/math], shout@1.2.0 via [shout], upper@2.1.0 via [shout upper]" {
			t.Errorf("packages: %s", got)
		}
		built := envEvents(s)["built"]
		okResult(t, s.execute(demo, js(map[string]any{"environment_id": envID})))
		okResult(t, s.execute(demo, js(map[string]any{"requirements_lock": lock})))
		if envEvents(s)["built"] != built {
			t.Errorf("a run of a prepared environment installed it again (built %v → %v)", built, envEvents(s)["built"])
		}
	})
	t.Run("an environment or requirements of the other language are 400s", func(t *testing.T) {
		for name, body := range map[string]map[string]any{
			"a python run naming the npm environment": {"source": "def run(a, c):\n    return 1\n", "environment_id": envID},
			"a python run with the npm lock":          {"source": "def run(a, c):\n    return 1\n", "requirements_lock": lock},
			"a javascript run with PEP 508":           js(map[string]any{"requirements": []string{"six==1.16.0"}}),
			"a javascript run with a range":           js(map[string]any{"requirements": []string{"shout@^1.2.0"}}),
			"a javascript run naming a runtime":       js(map[string]any{"requirements": []string{"shout@1.2.0"}, "runtime": "python3.13"}),
		} {
			r := s.execute(demo, body)
			if r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" {
				t.Errorf("%s: %d %s", name, r.status, r.body)
			}
		}
		r := s.do(http.MethodPost, "/v1/prepare", demo, map[string]any{"language": "javascript", "requirements": []string{"shout@1.2.0"}, "runtime": "python3.13"})
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "runtime: only python runs name a runtime") {
			t.Errorf("prepare of an npm environment naming a runtime: %d %s", r.status, r.body)
		}
	})
	t.Run("a package the registry lacks is a DependencyError", func(t *testing.T) {
		r := s.execute(demo, js(map[string]any{"requirements": []string{"shout@9.9.9"}}))
		e, _ := r.json(t)["error"].(map[string]any)
		if r.status != http.StatusOK || r.errType(t) != "DependencyError" || !strings.Contains(fmt.Sprint(e["message"]), "shout@9.9.9") {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("an import of a package the run did not ask for is InvalidSource", func(t *testing.T) {
		r := s.execute(demo, js(map[string]any{"requirements": []string{"shout@1.2.0"}}))
		if r.status != http.StatusOK || r.errType(t) != "InvalidSource" || !strings.Contains(string(r.body), `\"@tools/math\" is not an import this run may make`) {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
}

// A JavaScript tool in network mode proxy through the gateway: fetch
// reaches an allow-listed HTTPS host (certificate checked against the
// rootfs's CA bundle), the proxy refuses another, and the envelope and the
// audit record list both attempts.
func TestJavaScriptProxyModeThroughTheGateway(t *testing.T) {
	testenv.Deno(t)
	ca := testenv.NewCA(t)
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello over tls "+r.URL.Path)
	}))
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Leaf(t, "api.test", "denied.test")}}
	backend.StartTLS()
	t.Cleanup(backend.Close)
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	allowed := fmt.Sprintf("api.test:%d", port)
	rootfs := testenv.RootfsTrusting(t, ca.PEM) // the default runtime's tree
	s, _ := proxyServer(t, allowed, func(c *config.Config) { c.Sandbox.RuntimesDir = filepath.Dir(rootfs) })
	const tool = `export async function run(args) {
  const get = async (u) => { try { const r = await fetch(u); return r.status + " " + await r.text() } catch (e) { return "failed " + e.message } };
  return {allowed: await get(args.allowed), denied: await get(args.denied)};
}
`
	r := s.execute(s.token("net"), map[string]any{
		"execution_id": "js-egress-1", "language": "javascript", "source": tool, "network_access": "proxy",
		"egress": map[string]any{"allow": []string{allowed}},
		"args":   map[string]string{"allowed": "https://" + allowed + "/data", "denied": fmt.Sprintf("https://denied.test:%d/data", port)},
	})
	env := r.json(t)
	if r.status != http.StatusOK || env["status"] != "ok" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if u, _ := env["usage"].(map[string]any); u["runtime"] != "deno" {
		t.Errorf("usage.runtime %v, want deno (a JavaScript run names no Python runtime)", u["runtime"])
	}
	result, _ := env["result"].(map[string]any)
	if got := result["allowed"]; got != "200 hello over tls /data" {
		t.Errorf("allowed fetch = %v", got)
	}
	if got, _ := result["denied"].(string); !strings.HasPrefix(got, "failed") {
		t.Errorf("denied fetch = %q: the host outside the allow-list was reached", got)
	}
	check := func(where string, attempts []any) {
		var sawAllowed, sawDenied bool
		for _, a := range attempts {
			m, _ := a.(map[string]any)
			switch {
			case m["host"] == "api.test" && m["port"] == float64(port) && m["allowed"] == true:
				sawAllowed = true
			case m["host"] == "denied.test" && m["allowed"] == false && m["reason"] != "":
				sawDenied = true
			}
		}
		if !sawAllowed || !sawDenied {
			t.Errorf("%s egress = %v, want the allowed api.test attempt and the denied denied.test one", where, attempts)
		}
	}
	envEgress, _ := env["egress"].([]any)
	check("envelope", envEgress)
	for _, l := range s.auditLines() {
		if l["execution_id"] == "js-egress-1" {
			a, _ := l["egress"].([]any)
			check("audit", a)
			return
		}
	}
	t.Fatal("no audit record for js-egress-1")
}

// A requirement list resolves on the gateway before any quota admission,
// and a resolution outlives the request that started it, so resolutions
// of new lists are bounded per tenant (environments.MaxTenantResolves) and
// in all: while one of demo's lists is resolving (its registry slow),
// demo's next new list is a 503 Overloaded at once with Retry-After, and
// acme's is not held up by demo's.
func TestATenantsNewRequirementListsResolveOneAtATime(t *testing.T) {
	s, reg := npmServer(t)
	demo, acme := s.token("demo"), s.token("acme")
	release := reg.Hold("shout")
	defer release()
	held := make(chan response, 1)
	go func() {
		held <- s.execute(demo, map[string]any{"language": "javascript", "requirements": []string{"shout@1.2.0"},
			"source": "import shout from \"shout\";\nexport function run() { return shout(\"a\") }\n"})
	}()
	waitFor(t, "demo's resolution to reach the registry", 30*time.Second, func() bool { return reg.Requests("/shout") > 0 })

	math := map[string]any{"language": "javascript", "requirements": []string{"@tools/math@0.3.0"},
		"source": "import { add } from \"@tools/math\";\nexport function run() { return add(40, 2) }\n"}
	start := time.Now()
	r := s.execute(demo, math)
	if r.status != http.StatusServiceUnavailable || r.errType(t) != "Overloaded" || r.header.Get("Retry-After") == "" {
		t.Fatalf("demo's second new list while its first resolves: %d %v %s, want 503 Overloaded with Retry-After", r.status, r.header, r.body)
	}
	if e, _ := r.json(t)["error"].(map[string]any); !strings.Contains(fmt.Sprint(e["message"]), "package resolution") {
		t.Fatalf("the refusal does not say why: %s", r.body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the refusal took %v: it waited instead of refusing at once", d)
	}
	r = s.execute(acme, math)
	if env := r.json(t); r.status != http.StatusOK || env["status"] != "ok" || env["result"] != float64(42) {
		t.Fatalf("acme, while demo's resolution is held: %d %s", r.status, r.body)
	}

	release()
	select {
	case r := <-held:
		if env := r.json(t); r.status != http.StatusOK || env["status"] != "ok" || env["result"] != "A!" {
			t.Fatalf("demo's held run: %d %s", r.status, r.body)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo's held run did not end after the registry answered")
	}
	// Its slot is back: demo's other list resolves now (or is acme's, cached).
	r = s.execute(demo, math)
	if env := r.json(t); r.status != http.StatusOK || env["status"] != "ok" {
		t.Fatalf("demo after its resolution ended: %d %s", r.status, r.body)
	}
}
