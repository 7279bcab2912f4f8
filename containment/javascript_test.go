package containment

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// The CONTAINMENT.md items for JavaScript tools (Deno in the same jail, every
// Deno permission denied): timeout, memory, output, filesystem, environment,
// network and the gateway's secret. Item 28's import and API attempts one by
// one are in sandbox/javascript_integration_test.go. The limits and the
// walls run at both isolation levels (jsLevels): at level process each run
// is a fresh Deno execve'd by a process forked from the zygote (item 38;
// its per-run guarantees, fresh state, no survivor, crash, are in
// sandbox/javascript_process_integration_test.go). Network proxy and
// packages are level jail's only.

// jsLevels are the isolation levels the JavaScript containment runs at.
var jsLevels = []string{sandbox.IsolationJail, sandbox.IsolationProcess}

// runJS runs src at isolation level (jail or process), and fails the test
// when it ran at another one (a full zygote budget runs a process run at
// level jail).
func runJS(t *testing.T, r *sandbox.Runner, level, src string, args any, lim sandbox.Limits) sandbox.Result {
	t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), sandbox.Spec{ExecutionID: "containment-js", TenantID: "containment",
		Language: sandbox.LanguageJavaScript, Source: src, Args: a, Limits: lim.Or(defaultLimits()), Isolation: level})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	if res.Usage.Isolation != level {
		t.Fatalf("the run ran at level %q, not %s: %s", res.Usage.Isolation, level, describe(res))
	}
	return res
}

// attempts runs each named attempt inside one tool and returns what each saw:
// "ok:<value>" or "<error name>: <message>".
const jsAttempts = `
export async function run(args, context) {
  const out = {};
  const tries = {
%s
  };
  for (const [name, f] of Object.entries(tries)) {
    try { out[name] = "ok:" + String(await f()).slice(0, 200) }
    catch (e) { out[name] = (e?.name ?? typeof e) + ": " + String(e?.message ?? e).split("\n")[0] }
  }
  return out;
}
`

func jsTries(t *testing.T, r *sandbox.Runner, level string, tries map[string]string, args any) map[string]string {
	t.Helper()
	var b strings.Builder
	for name, body := range tries {
		fmt.Fprintf(&b, "    %q: async () => { %s },\n", name, body)
	}
	res := runJS(t, r, level, fmt.Sprintf(jsAttempts, b.String()), args, sandbox.Limits{TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("the attempts tool failed: %s", describe(res))
	}
	var got map[string]string
	if err := json.Unmarshal(res.Result, &got); err != nil {
		t.Fatalf("result %s: %v", res.Result, err)
	}
	return got
}

func TestJavaScriptTimeoutMemoryAndOutput(t *testing.T) {
	testenv.Deno(t)
	t.Parallel()
	for _, level := range jsLevels {
		t.Run("level "+level, func(t *testing.T) {
			t.Parallel()
			r, cfg := newRunner(t, "js-limits-"+level)
			jsTimeoutMemoryAndOutput(t, r, cfg, level)
		})
	}
}

func jsTimeoutMemoryAndOutput(t *testing.T, r *sandbox.Runner, cfg sandbox.Config, level string) {
	// Level process keeps its zygote and its spare Denos in run cgroups:
	// no process may be left once the runner is closed.
	noneLeft := func(t *testing.T) {
		t.Helper()
		if level == sandbox.IsolationProcess {
			if err := r.Close(); err != nil {
				t.Errorf("closing the runner: %v", err)
			}
		}
		assertNoProcessesLeft(t, r, cfg)
	}
	t.Run("1. a busy loop past the wall limit is Timeout and leaves no process", func(t *testing.T) {
		res := runJS(t, r, level, "export function run() { for (;;) {} }", nil, sandbox.Limits{TimeoutMS: 1500, CPUMS: 30000})
		wantError(t, res, sandbox.ErrTimeout)
		if level == sandbox.IsolationJail {
			assertNoProcessesLeft(t, r, cfg)
		}
	})
	t.Run("2. CPU burn past the CPU limit is CPULimit", func(t *testing.T) {
		res := runJS(t, r, level, "export function run() { for (;;) {} }", nil, sandbox.Limits{TimeoutMS: 20000, CPUMS: 700})
		wantError(t, res, sandbox.ErrCPULimit)
	})
	t.Run("3. a heap bomb is MemoryLimit, not a V8 crash", func(t *testing.T) {
		res := runJS(t, r, level, "export function run() { const a = []; for (;;) a.push(new Array(1e5).fill(1.5)) }", nil, sandbox.Limits{MemoryMB: 96, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
		wantError(t, res, sandbox.ErrMemoryLimit)
	})
	t.Run("3. an off-heap bomb is MemoryLimit", func(t *testing.T) {
		res := runJS(t, r, level, "export function run() { const a = []; for (;;) { const b = new Uint8Array(8 << 20); b.fill(7); a.push(b) } }", nil, sandbox.Limits{MemoryMB: 96, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
		wantError(t, res, sandbox.ErrMemoryLimit)
	})
	t.Run("7. an output flood is truncated at the cap", func(t *testing.T) {
		res := runJS(t, r, level, "export function run() { const s = 'y'.repeat(65536); for (let i = 0; i < 200; i++) { console.log(s); console.error(s) } return 1 }", nil, sandbox.Limits{OutputBytes: 100000})
		// The cap counts the streams as the envelope encodes them (a
		// newline is two bytes, quotes excluded), as for Python.
		capped := func(s string) bool { n := jsonsize.StringLen(s) - 2; return n <= 100000 && n > 99000 }
		if res.Status != sandbox.StatusOK || !res.Truncated.Stdout || !res.Truncated.Stderr || !capped(res.Stdout) || !capped(res.Stderr) {
			t.Fatalf("truncated %+v, %d/%d bytes: %s", res.Truncated, len(res.Stdout), len(res.Stderr), describe(res))
		}
	})
	noneLeft(t)
}

func TestJavaScriptFilesystemEnvironmentAndNetworkAreDenied(t *testing.T) {
	testenv.Deno(t)
	t.Parallel()
	for _, level := range jsLevels {
		t.Run("level "+level, func(t *testing.T) {
			t.Parallel()
			r, _ := newRunner(t, "js-walls-"+level)
			jsWalls(t, r, level)
		})
	}
}

func jsWalls(t *testing.T, r *sandbox.Runner, level string) {
	// 24. A listener on the host's loopback: the tool must not reach it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := jsTries(t, r, level, map[string]string{
		"12 write /":              `Deno.writeTextFileSync("/x", "x")`,
		"12 write /tmp":           `Deno.writeTextFileSync("/tmp/x", "x")`,
		"16 read /etc/passwd":     `return Deno.readTextFileSync("/etc/passwd")`,
		"16 list /":               `return [...Deno.readDirSync("/")].length`,
		"18 read environ":         `return Deno.readTextFileSync("/proc/self/environ")`,
		"18 read cmdline of pid1": `return Deno.readTextFileSync("/proc/1/cmdline")`,
		"20 env":                  `return JSON.stringify(Deno.env.toObject())`,
		"23 secret in env":        fmt.Sprintf(`return Deno.env.get(%q)`, secretEnv),
		"24 tcp to host loopback": fmt.Sprintf(`return await Deno.connect({hostname: "127.0.0.1", port: %d})`, port),
		"24 fetch host loopback":  fmt.Sprintf(`return (await fetch("http://127.0.0.1:%d/")).status`, port),
		"24 dns":                  `return await Deno.resolveDns("example.com", "A")`,
		"24 udp":                  `return Deno.listenDatagram({port: 0, transport: "udp"})`,
		"24 listen":               `return Deno.listen({port: 8080})`,
		"4 subprocess":            `return (await new Deno.Command("/usr/bin/python3", {args: ["-c", "1"]}).output()).code`,
		"4 worker":                `return new Worker("data:text/javascript,1", {type: "module"})`,
	}, nil)
	for name, saw := range got {
		t.Logf("%s → %s", name, saw)
		if strings.HasPrefix(saw, "ok:") {
			t.Errorf("%s: the tool succeeded (%s)", name, saw)
		}
		if strings.Contains(saw, secret) {
			t.Errorf("%s: the gateway's secret reached the tool", name)
		}
	}
	if len(got) != 15 {
		t.Errorf("%d attempts reported, want 15: %v", len(got), got)
	}
}

// 24–26 for JavaScript. Network proxy: Deno may use the network (--allow-net:
// it checks fetch against the URL's host, not the proxy), and the jail's
// network namespace holds nothing but loopback, where the harness relays
// to the run's egress proxy. So the proxy is the only way out: an
// allow-listed host works through fetch (HTTP_PROXY), a host, port or IP
// literal off the list and a name resolving to the metadata address are
// refused with 403 and recorded as denied (never dialled); direct TCP to
// the host's loopback, a public or the metadata address, DNS and UDP reach
// nothing.
func TestJavaScriptNetworkProxyIsTheOnlyWayOut(t *testing.T) {
	testenv.Deno(t)
	t.Parallel()
	w := newProxyWorld(t, "js-proxy", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend says hello at %s", r.URL.Path)
	})
	r, dialer, port, otherPort, udp, other, otherAccepted := w.r, w.dialer, w.port, w.otherPort, w.udp, w.other, w.otherAccepted

	src := fmt.Sprintf(`
export async function run() {
  const out = {};
  const get = async (name, url) => {
    try { const r = await fetch(url); out[name] = "status:" + r.status + " " + (await r.text()).slice(0, 120) }
    catch (e) { out[name] = e.name + ": " + String(e.message).split("\n")[0] }
  };
  const tcp = async (name, addr) => {
    try { (await Deno.connect(addr)).close(); out[name] = "ok:connected" }
    catch (e) { out[name] = e.name + ": " + e.message }
  };
  await get("allowed", "http://api.test:%[1]d/allowed");
  await get("host off the list", "http://other.test:%[1]d/x");
  await get("port off the list", "http://api.test:%[2]d/x");
  await get("IP literal", "http://127.0.0.1:%[1]d/x");
  await get("metadata name", "http://metadata.test/latest/meta-data/");
  await tcp("direct to the host's loopback", {hostname: "127.0.0.1", port: %[2]d});
  await tcp("direct to a public address", {hostname: "192.0.2.1", port: 443});
  await tcp("direct to the metadata address", {hostname: "169.254.169.254", port: 80});
  try { out["dns"] = "ok:" + JSON.stringify(await Deno.resolveDns("api.test", "A")) } catch (e) { out["dns"] = e.name + ": " + e.message }
  try { Deno.listenDatagram({port: 0, transport: "udp"}).send(new Uint8Array([1]), {hostname: "127.0.0.1", port: %[3]d, transport: "udp"}); out["udp"] = "ok:sent" } catch (e) { out["udp"] = e.name + ": " + e.message }
  try { out["interfaces"] = "ok:" + JSON.stringify(Deno.networkInterfaces()) } catch (e) { out["interfaces"] = e.name + ": " + e.message }
  return out;
}
`, port, otherPort, udp.LocalAddr().(*net.UDPAddr).Port)
	res, err := r.Run(context.Background(), sandbox.Spec{ExecutionID: "containment-js-proxy-" + randomHex(4), TenantID: "containment",
		Language: sandbox.LanguageJavaScript, Source: src, Network: sandbox.NetworkProxy,
		EgressAllow: []string{fmt.Sprintf("api.test:%d", port), "metadata.test:80"},
		Limits:      sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000}.Or(defaultLimits())})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
	}
	var out map[string]string
	decode(t, res, &out)
	for k, v := range out {
		t.Logf("%s → %s", k, v)
	}
	if out["allowed"] != "status:200 backend says hello at /allowed" {
		t.Errorf("the allow-listed host: %q", out["allowed"])
	}
	for _, k := range []string{"host off the list", "port off the list", "IP literal", "metadata name"} {
		if !strings.HasPrefix(out[k], "status:403 execgate egress") {
			t.Errorf("%s: %q, want the proxy's 403", k, out[k])
		}
	}
	for k, want := range map[string]string{
		"direct to the host's loopback":  "ConnectionRefused",
		"direct to a public address":     "NetworkUnreachable",
		"direct to the metadata address": "NetworkUnreachable",
	} {
		if !strings.HasPrefix(out[k], want) {
			t.Errorf("%s: %q, want %s", k, out[k], want)
		}
	}
	for _, k := range []string{"dns", "udp", "interfaces"} {
		if strings.HasPrefix(out[k], "ok:") {
			t.Errorf("%s succeeded: %q", k, out[k])
		}
	}
	denied := 0
	for _, a := range res.Egress {
		if !a.Allowed {
			denied++
			if a.Reason == "" {
				t.Errorf("a denied attempt without a reason: %+v", a)
			}
		}
	}
	if len(res.Egress) != 5 || denied != 4 {
		t.Errorf("egress %+v: want the 5 attempts, 4 of them denied", res.Egress)
	}
	for _, addr := range dialer.seen() {
		if addr != dialer.allow {
			t.Errorf("the proxy dialled %s, which policy refused", addr)
		}
	}
	requireHostUnreached(t, udp, other, otherAccepted, "the host's listener on the port off the list")
}

// A JavaScript run's npm packages: their install scripts never run (not
// when installed, not in the jail), the environment is read-only, and the
// tool reads nothing outside its import map: not the packages' files, not
// the jail's files, not a file: import.
func TestJavaScriptPackagesRunNoScriptsAndOpenNothing(t *testing.T) {
	testenv.Deno(t)
	t.Parallel()
	for _, f := range []string{"/tmp/execgate-postinstall-ran", "/tmp/execgate-preinstall-ran"} {
		os.Remove(f)
	}
	reg := testenv.StartNPMRegistry(t, testenv.NPMFixtures()...)
	cfg := testenv.SandboxConfig(t)
	cfg.CgroupParent = cgroupPrefix + "-js-packages"
	cfg.DepsDir = filepath.Join(testenv.JailDir(t), "deps")
	cfg.NPMRegistry = sandbox.NPMRegistry{URL: reg.URL}
	envs, err := environments.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, failure, err := envs.ResolveNPM(context.Background(), []string{"scripted@1.0.0", "shout@1.2.0"})
	if err != nil || failure != nil {
		t.Fatalf("ResolveNPM: %v %+v", err, failure)
	}
	dir, _, failure, err := envs.Prepare(context.Background(), env)
	if err != nil || failure != nil {
		t.Fatalf("Prepare: %v %+v", err, failure)
	}
	r, err := sandbox.NewRunner(cfg, sandbox.WithoutImportCheck()) // the jail's own walls
	if err != nil {
		t.Fatalf("NewRunner: %v\n%s", err, unavailableDetail(err))
	}
	t.Cleanup(func() { r.Close() })
	tries := map[string]string{
		"the package loads":              `return (await import("scripted")).default`,
		"write into the environment":     `Deno.writeTextFileSync("/opt/execgate/deps/x", "x"); return "written"`,
		"read the import map":            `return Deno.readTextFileSync("/opt/execgate/deps/import_map.json")`,
		"read a package's file":          `return Deno.readTextFileSync("/opt/execgate/deps/deno/npm/registry.npmjs.org/scripted/1.0.0/package.json")`,
		"list the environment":           `return [...Deno.readDirSync("/opt/execgate/deps")].length`,
		"read /etc/passwd":               `return Deno.readTextFileSync("/etc/passwd")`,
		"import a file of the rootfs":    `return (await import("file:///etc/passwd", {with: {type: "text"}})).default`,
		"import a package file directly": `return (await import("file:///opt/execgate/deps/deno/npm/registry.npmjs.org/upper/2.1.0/index.js")).default("x")`,
		"see a script's marker":          `return Deno.statSync("/tmp/execgate-postinstall-ran").isFile`,
		"run a package's script":         `return (await new Deno.Command("/bin/sh", {args: ["-c", "touch /tmp/x"]}).output()).code`,
	}
	var b strings.Builder
	for name, body := range tries {
		fmt.Fprintf(&b, "    %q: async () => { %s },\n", name, body)
	}
	res, err := r.Run(context.Background(), sandbox.Spec{ExecutionID: "containment-js-packages", TenantID: "containment",
		Language: sandbox.LanguageJavaScript, Source: fmt.Sprintf(jsAttempts, b.String()), Deps: dir,
		Limits: sandbox.Limits{TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)}.Or(defaultLimits())})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var got map[string]string
	decode(t, res, &got)
	for name, saw := range got {
		t.Logf("%s → %s", name, saw)
		if name == "the package loads" {
			if saw != "ok:no script ran" {
				t.Errorf("the package did not load: %s", saw)
			}
			continue
		}
		if strings.HasPrefix(saw, "ok:") {
			t.Errorf("%s: the tool succeeded (%s)", name, saw)
		}
	}
	if len(got) != len(tries) {
		t.Errorf("%d attempts reported, want %d", len(got), len(tries))
	}
	for _, f := range []string{"/tmp/execgate-postinstall-ran", "/tmp/execgate-preinstall-ran"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s exists on the host: an install script ran", f)
		}
	}
}
