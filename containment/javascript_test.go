package containment

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// The CONTAINMENT.md items for JavaScript tools (Deno in the same jail, every
// Deno permission denied): timeout, memory, output, filesystem, environment,
// network and the gateway's secret. Item 28's import and API attempts one by
// one are in sandbox/javascript_integration_test.go.

func runJS(t *testing.T, r *sandbox.Runner, src string, args any, lim sandbox.Limits) sandbox.Result {
	t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), sandbox.Spec{ExecutionID: "containment-js", TenantID: "containment",
		Language: sandbox.LanguageJavaScript, Source: src, Args: a, Limits: lim.Or(defaultLimits())})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, unavailableDetail(err))
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

func jsTries(t *testing.T, r *sandbox.Runner, tries map[string]string, args any) map[string]string {
	t.Helper()
	var b strings.Builder
	for name, body := range tries {
		fmt.Fprintf(&b, "    %q: async () => { %s },\n", name, body)
	}
	res := runJS(t, r, fmt.Sprintf(jsAttempts, b.String()), args, sandbox.Limits{TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
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
	r, cfg := newRunner(t, "js-limits")
	t.Run("1. a busy loop past the wall limit is Timeout and leaves no process", func(t *testing.T) {
		res := runJS(t, r, "export function run() { for (;;) {} }", nil, sandbox.Limits{TimeoutMS: 1500, CPUMS: 30000})
		wantError(t, res, sandbox.ErrTimeout)
		assertNoProcessesLeft(t, r, cfg)
	})
	t.Run("2. CPU burn past the CPU limit is CPULimit", func(t *testing.T) {
		res := runJS(t, r, "export function run() { for (;;) {} }", nil, sandbox.Limits{TimeoutMS: 20000, CPUMS: 700})
		wantError(t, res, sandbox.ErrCPULimit)
	})
	t.Run("3. a heap bomb is MemoryLimit, not a V8 crash", func(t *testing.T) {
		res := runJS(t, r, "export function run() { const a = []; for (;;) a.push(new Array(1e5).fill(1.5)) }", nil, sandbox.Limits{MemoryMB: 96, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
		wantError(t, res, sandbox.ErrMemoryLimit)
	})
	t.Run("3. an off-heap bomb is MemoryLimit", func(t *testing.T) {
		res := runJS(t, r, "export function run() { const a = []; for (;;) { const b = new Uint8Array(8 << 20); b.fill(7); a.push(b) } }", nil, sandbox.Limits{MemoryMB: 96, TimeoutMS: allowance(20000, limits.Max.TimeoutMS), CPUMS: allowance(20000, limits.Max.CPUMS)})
		wantError(t, res, sandbox.ErrMemoryLimit)
	})
	t.Run("7. an output flood is truncated at the cap", func(t *testing.T) {
		res := runJS(t, r, "export function run() { const s = 'y'.repeat(65536); for (let i = 0; i < 200; i++) { console.log(s); console.error(s) } return 1 }", nil, sandbox.Limits{OutputBytes: 100000})
		// The cap counts the streams as the envelope encodes them (a
		// newline is two bytes, quotes excluded), as for Python.
		capped := func(s string) bool { n := jsonsize.StringLen(s) - 2; return n <= 100000 && n > 99000 }
		if res.Status != sandbox.StatusOK || !res.Truncated.Stdout || !res.Truncated.Stderr || !capped(res.Stdout) || !capped(res.Stderr) {
			t.Fatalf("truncated %+v, %d/%d bytes: %s", res.Truncated, len(res.Stdout), len(res.Stderr), describe(res))
		}
	})
	assertNoProcessesLeft(t, r, cfg)
}

func TestJavaScriptFilesystemEnvironmentAndNetworkAreDenied(t *testing.T) {
	testenv.Deno(t)
	t.Parallel()
	r, _ := newRunner(t, "js-walls")
	// 24. A listener on the host's loopback: the tool must not reach it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	got := jsTries(t, r, map[string]string{
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
