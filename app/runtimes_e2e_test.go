package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// versionTool reports the interpreter's version, its CA store, and the
// reference count of the harness's module (made before the run: by the
// jail's own start at level jail, by the zygote at level process).
const versionTool = `import ssl, sys
def run(args, context):
    return {"version": list(sys.version_info[:2]), "ca": ssl.create_default_context().cert_store_stats()["x509_ca"],
            "harness_refs": sys.getrefcount(sys.modules["execgate_harness"])}
`

// immortalRefcnt is what sys.getrefcount says of an immortal object on
// CPython 3.12 and 3.13 (64-bit).
const immortalRefcnt = 0xFFFFFFFF

// runtimesServer serves both Python runtimes built from their pinned
// packages, to tenant "both" (granted python3.11 and python3.13, levels
// jail and process) and "old" (no runtimes in its policy data: python3.11
// only).
func runtimesServer(t *testing.T) *server {
	t.Helper()
	dir := testenv.RuntimesDir(t) // builds python3.11 and python3.13 once per machine
	return start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Sandbox.RuntimesDir = dir
		c.Sandbox.Runtimes = []string{"python3.11", "python3.13"}
		both := config.DemoTenant()
		both.ID = "both"
		both.Policy["isolation"] = []any{"jail", "process"}
		both.Policy["runtimes"] = []any{"python3.11", "python3.13"}
		old := config.DemoTenant()
		old.ID = "old"
		old.Policy["isolation"] = []any{"jail", "process"}
		delete(old.Policy, "runtimes")
		hostok := config.DemoTenant() // granted host, which this server does not serve
		hostok.ID = "hostok"
		hostok.Policy["runtimes"] = []any{"python3.11", "host"}
		c.Tenants = append(c.Tenants, both, old, hostok)
	}})
}

// TestEachRuntimeRunsItsOwnPythonAtBothLevels: a run names its runtime
// and gets that interpreter, with a CA store, at level jail and at level
// process (a zygote per runtime); the decision and usage.runtime say
// which ran it; input files, stdin and artifacts work on each.
func TestEachRuntimeRunsItsOwnPythonAtBothLevels(t *testing.T) {
	s := runtimesServer(t)
	for _, tc := range []struct {
		runtime string
		version []any
	}{
		{"python3.11", []any{float64(3), float64(11)}},
		{"python3.13", []any{float64(3), float64(13)}},
	} {
		for _, level := range []string{"jail", "process"} {
			t.Run(tc.runtime+" at level "+level, func(t *testing.T) {
				r := s.execute(s.token("both"), map[string]any{"source": versionTool, "runtime": tc.runtime, "isolation": level, "limits": stretchedLimits()})
				if r.status != http.StatusOK {
					t.Fatalf("%d %s", r.status, r.body)
				}
				env := r.json(t)
				res, _ := env["result"].(map[string]any)
				if !reflect.DeepEqual(res["version"], tc.version) {
					t.Fatalf("sys.version_info[:2] = %v, want %v (%s)", res["version"], tc.version, r.body)
				}
				if ca, _ := res["ca"].(float64); ca <= 0 {
					t.Errorf("CA store of %s has %v certificates", tc.runtime, res["ca"])
				}
				// A 3.13 zygote makes what it imported immortal, so that a
				// run's process never writes (and copies) their pages to
				// count references; 3.11 has no immortal objects, and a
				// jail's harness is its own process's.
				refs, _ := res["harness_refs"].(float64)
				if immortal := refs == immortalRefcnt; immortal != (tc.runtime == "python3.13" && level == "process") {
					t.Errorf("the harness module's reference count is %v on %s at level %s (immortal: %v)", refs, tc.runtime, level, immortal)
				}
				dec, _ := env["decision"].(map[string]any)
				u, _ := env["usage"].(map[string]any)
				if dec["runtime"] != tc.runtime || u["runtime"] != tc.runtime || u["isolation"] != level {
					t.Errorf("decision.runtime %v, usage.runtime %v, usage.isolation %v; want %s at %s", dec["runtime"], u["runtime"], u["isolation"], tc.runtime, level)
				}

				// Input files, stdin and artifacts work on every runtime:
				// each tree has /workspace.
				id := "files-" + strings.ReplaceAll(tc.runtime, ".", "") + "-" + level
				r = s.execute(s.token("both"), filesBody(id, map[string]any{"runtime": tc.runtime, "isolation": level}))
				if r.status != http.StatusOK {
					t.Fatalf("files on %s at %s: %d %s", tc.runtime, level, r.status, r.body)
				}
				env = r.json(t)
				wantFilesEnvelope(t, env)
				if u, _ := env["usage"].(map[string]any); u["runtime"] != tc.runtime {
					t.Errorf("files ran on %v, want %s", u["runtime"], tc.runtime)
				}
			})
		}
	}
}

// TestARuntimeIsGrantedByPolicyAndNamedWhenRefused: a tenant without
// python3.13 in its runtimes is denied it (403, the reason names it) and
// nothing runs; a run naming no runtime gets the tenant's default; an
// unknown runtime is a 400 naming the field, and so is a runtime on a
// JavaScript run.
func TestARuntimeIsGrantedByPolicyAndNamedWhenRefused(t *testing.T) {
	s := runtimesServer(t)

	r := s.execute(s.token("old"), map[string]any{"source": versionTool, "runtime": "python3.13"})
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" {
		t.Fatalf("python3.13 for tenant old: %d %s, want 403 PolicyDenied", r.status, r.body)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	want := []any{`runtime "python3.13" is not allowed for tenant "old" (its runtimes: python3.11)`}
	if !reflect.DeepEqual(e["reasons"], want) {
		t.Fatalf("reasons = %v, want %v", e["reasons"], want)
	}
	if u, _ := r.json(t)["usage"].(map[string]any); u["runtime"] != nil {
		t.Fatalf("a denied run ran: usage %v", u)
	}

	r = s.execute(s.token("old"), map[string]any{"source": versionTool, "limits": stretchedLimits()})
	if r.status != http.StatusOK {
		t.Fatalf("default runtime: %d %s", r.status, r.body)
	}
	env := r.json(t)
	dec, _ := env["decision"].(map[string]any)
	res, _ := env["result"].(map[string]any)
	if dec["runtime"] != "python3.11" || !reflect.DeepEqual(res["version"], []any{float64(3), float64(11)}) {
		t.Fatalf("a run naming no runtime: decision.runtime %v, version %v; want the tenant's default python3.11", dec["runtime"], res["version"])
	}

	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"an unknown runtime", map[string]any{"source": versionTool, "runtime": "python2.7"}, `runtime: "python2.7" is not one of python3.11, python3.13, host`},
		{"a runtime that is not a string", map[string]any{"source": versionTool, "runtime": 3.13}, "runtime:"},
		{"a runtime on a JavaScript run", map[string]any{"source": "export function run() { return 1 }", "language": "javascript", "runtime": "python3.13"}, "runtime: only python runs name a runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.execute(s.token("both"), tc.body)
			if r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" {
				t.Fatalf("%d %s, want 400 BadRequest", r.status, r.body)
			}
			e, _ := r.json(t)["error"].(map[string]any)
			if msg, _ := e["message"].(string); !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q does not say %q", msg, tc.want)
			}
		})
	}
}

// TestARuntimeNotServedIsThePolicysRefusalFirst: a runtime this gateway
// does not serve (host) with packages to look up is the policy's 403 for a
// tenant it does not grant (a run and a prepare), and a 503 naming it only
// for a tenant the policy grants it to; nothing runs.
func TestARuntimeNotServedIsThePolicysRefusalFirst(t *testing.T) {
	s := runtimesServer(t)
	run := map[string]any{"source": versionTool, "runtime": "host", "environment_id": strings.Repeat("a", 64)}
	r := s.execute(s.token("both"), run)
	if r.status != http.StatusForbidden || r.errType(t) != "PolicyDenied" || !strings.Contains(string(r.body), `runtime \"host\" is not allowed for tenant \"both\"`) {
		t.Fatalf("a run on host for tenant both: %d %s, want 403 PolicyDenied naming the runtime", r.status, r.body)
	}
	r = s.do(http.MethodPost, "/v1/prepare", s.token("both"), map[string]any{"requirements": []string{"six==1.16.0"}, "runtime": "host"})
	if r.status != http.StatusForbidden || !strings.Contains(string(r.body), `runtime \"host\" is not allowed for tenant \"both\"`) {
		t.Fatalf("a prepare on host for tenant both: %d %s, want 403 naming the runtime", r.status, r.body)
	}
	r = s.execute(s.token("hostok"), run)
	if r.status != http.StatusServiceUnavailable || r.errType(t) != "SandboxUnavailable" || !strings.Contains(string(r.body), `runtime \"host\" is not served here`) {
		t.Fatalf("a run on host for tenant hostok: %d %s, want 503 SandboxUnavailable naming the runtime", r.status, r.body)
	}
	if d, _ := r.json(t)["decision"].(map[string]any); d != nil {
		t.Errorf("the 503 carries the decision made without the packages: %v", d)
	}
}

// TestGetRuntimesListsWhatEachRuntimeHas: GET /v1/runtimes names each
// runtime with its Python, distribution, C library, CA count and packages,
// and says which the tenant may use and which it gets by default.
func TestGetRuntimesListsWhatEachRuntimeHas(t *testing.T) {
	s := runtimesServer(t)
	granted := func(tenant string) (map[string]map[string]any, string) {
		t.Helper()
		r := s.do(http.MethodGet, "/v1/runtimes", s.token(tenant), nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/runtimes as %s: %d %s", tenant, r.status, r.body)
		}
		body := r.json(t)
		out := map[string]map[string]any{}
		list, _ := body["runtimes"].([]any)
		for _, x := range list {
			rt, _ := x.(map[string]any)
			out[fmt.Sprint(rt["name"])] = rt
		}
		return out, fmt.Sprint(body["default"])
	}
	both, def := granted("both")
	if def != "python3.11" || len(both) != 2 {
		t.Fatalf("tenant both: default %s, runtimes %v", def, both)
	}
	for name, want := range map[string]struct{ python, distribution, pkg string }{
		"python3.11": {"3.11.", "debian bookworm", "libpython3.11-stdlib"},
		"python3.13": {"3.13.", "debian trixie", "libpython3.13-stdlib"},
	} {
		rt := both[name]
		if !strings.HasPrefix(fmt.Sprint(rt["python_version"]), want.python) || rt["distribution"] != want.distribution ||
			rt["granted"] != true || rt["available"] != true {
			t.Errorf("%s = %v", name, rt)
		}
		if ca, _ := rt["ca_certs"].(float64); ca <= 0 {
			t.Errorf("%s: ca_certs %v", name, rt["ca_certs"])
		}
		if !strings.Contains(fmt.Sprint(rt["packages"]), want.pkg) || !strings.Contains(fmt.Sprint(rt["packages"]), "libc6") {
			t.Errorf("%s: packages %v lack %s and libc6", name, rt["packages"], want.pkg)
		}
	}
	old, def := granted("old")
	if def != "python3.11" || old["python3.11"]["granted"] != true || old["python3.13"]["granted"] != false {
		t.Fatalf("tenant old: default %s, python3.11 granted %v, python3.13 granted %v", def, old["python3.11"]["granted"], old["python3.13"]["granted"])
	}
}

// TestMCPExecutePythonTakesTheRuntime: execute_python's schema offers
// runtime (execute_javascript's does not) and a call naming python3.13 runs
// on it.
func TestMCPExecutePythonTakesTheRuntime(t *testing.T) {
	s := runtimesServer(t)
	sess := mcpSession(t, s, s.token("both"))
	tools, err := sess.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		has := strings.Contains(string(schema), `"runtime"`)
		if (tool.Name == "execute_python") != has {
			t.Errorf("%s: runtime in its input schema = %v", tool.Name, has)
		}
	}
	_, env := callTool(t, sess, "execute_python", map[string]any{"source": versionTool, "runtime": "python3.13", "limits": stretchedLimits()})
	res, _ := env["result"].(map[string]any)
	u, _ := env["usage"].(map[string]any)
	if !reflect.DeepEqual(res["version"], []any{float64(3), float64(13)}) || u["runtime"] != "python3.13" {
		t.Fatalf("execute_python with runtime python3.13: %v", env)
	}
}

// TestRequirementsResolveForTheRunsRuntime: requirements resolve for the
// chosen interpreter and its C library, from a local wheel directory: a
// package that needs Python 3.12 and one built for CPython 3.13 on
// manylinux_2_39 (trixie's glibc 2.41 takes it, bookworm's 2.36 does not)
// install and import on python3.13 and are a DependencyError on
// python3.11; an environment prepared for one runtime is that runtime's
// (its id names no environment of the other).
func TestRequirementsResolveForTheRunsRuntime(t *testing.T) {
	dir := testenv.RuntimesDir(t)
	wheels := testenv.WriteWheels(t, filepath.Join(t.TempDir(), "wheels"),
		testenv.Wheel{Name: "modern", Version: "1.0", RequiresPython: ">=3.12"},
		testenv.Wheel{Name: "native", Version: "1.0", Tag: "cp313-cp313-manylinux_2_39_x86_64"},
	)
	if runtime.GOARCH != "amd64" {
		t.Skip("the native wheel is tagged for x86_64")
	}
	uv := testenv.UV(t)
	s := start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		c.Sandbox.RuntimesDir = dir
		c.Sandbox.Runtimes = []string{"python3.11", "python3.13"}
		c.Sandbox.UVPath = uv
		c.Sandbox.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
		c.Sandbox.PackageIndex = sandbox.PackageIndex{FindLinks: []string{wheels}, NoIndex: true}
		for i := range c.Tenants {
			c.Tenants[i].Policy["packages"] = map[string]any{"allow": []any{"modern", "native"}, "deny": []any{}}
		}
	}})
	tok := s.token("demo") // granted python3.11 and python3.13
	src := "import modern, native, sys\ndef run(args, context):\n    return [modern.VERSION, native.VERSION, list(sys.version_info[:2])]\n"
	r := s.execute(tok, map[string]any{"source": src, "runtime": "python3.13", "requirements": []string{"modern>=1", "native==1.0"}, "limits": stretchedLimits()})
	if env := r.json(t); r.status != http.StatusOK || env["status"] != "ok" || fmt.Sprint(env["result"]) != "[1.0 1.0 [3 13]]" {
		t.Fatalf("python3.13: %d %s", r.status, r.body)
	}
	for _, req := range []string{"modern>=1", "native==1.0"} {
		r := s.execute(tok, map[string]any{"source": src, "runtime": "python3.11", "requirements": []string{req}})
		if r.status != http.StatusOK || r.errType(t) != "DependencyError" {
			t.Fatalf("python3.11 with %s: %d %s; want a DependencyError (no distribution fits 3.11 and glibc 2.36)", req, r.status, r.body)
		}
	}

	r = s.do(http.MethodPost, "/v1/prepare", tok, map[string]any{"requirements": []string{"modern>=1"}, "runtime": "python3.13"})
	if r.status != http.StatusOK || r.json(t)["runtime"] != "python3.13" {
		t.Fatalf("prepare for python3.13: %d %s", r.status, r.body)
	}
	id := r.json(t)["environment_id"]
	if r := s.execute(tok, map[string]any{"source": "import modern\ndef run(args, context):\n    return modern.VERSION\n", "runtime": "python3.13", "environment_id": id, "limits": stretchedLimits()}); r.status != http.StatusOK || r.json(t)["result"] != "1.0" {
		t.Fatalf("a run naming the environment on its runtime: %d %s", r.status, r.body)
	}
	r = s.execute(tok, map[string]any{"source": "def run(args, context):\n    return 1\n", "runtime": "python3.11", "environment_id": id})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "for runtime python3.11") {
		t.Fatalf("the python3.13 environment on python3.11: %d %s; want 400 naming the runtime", r.status, r.body)
	}
}
