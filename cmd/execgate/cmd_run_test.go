package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

func TestParseMiB(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"256M", 256, false}, {"256Mi", 256, false}, {"256MB", 256, false}, {"1G", 1024, false},
		{"512k", 1, false}, {"1048576", 1, false}, {"0", 0, true}, {"-5M", 0, true}, {"lots", 0, true}, {"1T", 0, true},
	}
	for _, tt := range tests {
		got, err := parseMiB(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("parseMiB(%q) = %d, %v; want %d (error %t)", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestRunFlagsNameTheBadFlag(t *testing.T) {
	tool := filepath.Join(t.TempDir(), "tool.py")
	if err := os.WriteFile(tool, []byte("def run(a, c): return 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := runFlags{args: "null", entrypoint: "run", network: "none", timeout: 1e9, memory: "64M"}
	tests := []struct {
		name string
		mod  func(*runFlags)
		file string
		want string
	}{
		{"args must be JSON", func(f *runFlags) { f.args = "{" }, tool, "--args"},
		{"network must be known", func(f *runFlags) { f.network = "wifi" }, tool, "--network"},
		{"timeout must be positive", func(f *runFlags) { f.timeout = 0 }, tool, "--timeout"},
		{"memory must be a size", func(f *runFlags) { f.memory = "big" }, tool, "--memory"},
		{"egress needs network proxy", func(f *runFlags) { f.egress = []string{"api.example.com"} }, tool, "--egress: only meaningful with --network proxy"},
		{"egress entries must parse", func(f *runFlags) { f.network, f.egress = "proxy", []string{"*"} }, tool, `--egress: egress allow entry "*"`},
		{"the file must exist", func(*runFlags) {}, tool + ".missing", "reading the tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base
			tt.mod(&f)
			_, err := f.spec(tt.file, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
	spec, err := base.spec(tool, nil)
	if err != nil || spec.Limits.MemoryMB != 64 || spec.Limits.TimeoutMS != 1000 || spec.Limits.CPUMS != 1000 {
		t.Errorf("spec %+v, %v", spec.Limits, err)
	}
}

// execute runs the execgate command line in-process.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	flags = globalFlags{}
	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestReportRunPrintsTheGatewaysEnvelope(t *testing.T) {
	keys := func(t *testing.T, data []byte) []string {
		t.Helper()
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	spec := sandbox.Spec{ExecutionID: "local-1", TenantID: "local"}
	res := sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ErrorInfo{Type: "ToolError", Message: "boom"},
		ToolCalls: []sandbox.ToolCall{{Tool: "math.add", Outcome: sandbox.ErrToolDenied, Reason: "not granted"}}}
	var out bytes.Buffer
	if err := reportRun(&out, spec, res, nil, true, nil); exitCode(err) != exitRunError {
		t.Fatalf("exit %d (%v)", exitCode(err), err)
	}
	want, _ := json.Marshal(execution.RunEnvelope(spec.ExecutionID, spec.TenantID, res))
	if got, want := keys(t, out.Bytes()), keys(t, want); !slices.Equal(got, want) {
		t.Errorf("--json keys %v, want the gateway envelope's %v", got, want)
	}
	var env execution.Envelope
	if err := json.Unmarshal(out.Bytes(), &env); err != nil || env.Decision != nil || env.Logs == nil || env.Error.Type != "ToolError" {
		t.Errorf("envelope %+v (%v)", env, err)
	}

	out.Reset()
	if err := reportRun(&out, spec, res, nil, false, nil); exitCode(err) != exitRunError || !strings.Contains(out.String(), "math.add ToolDenied (0 ms): not granted") {
		t.Errorf("the terminal view drops the tool call's reason (exit %d):\n%s", exitCode(err), out.String())
	}

	out.Reset()
	unavailable := &sandbox.UnavailableError{Reason: "nsjail is missing", Hint: "run scripts/setup.sh"}
	if err := reportRun(&out, spec, sandbox.Result{}, unavailable, true, nil); exitCode(err) != exitSandboxMissing {
		t.Fatalf("exit %d (%v)", exitCode(err), err)
	}
	if err := json.Unmarshal(out.Bytes(), &env); err != nil || env.Error.Type != gateway.TypeSandboxUnavailable || !strings.Contains(env.Error.Traceback, "scripts/setup.sh") {
		t.Errorf("unavailable envelope %+v (%v)", env, err)
	}
}

func TestRunCommandEndToEnd(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := sandbox.FindNsjail(sandbox.Config{}); err != nil {
		testenv.SkipUnlessCI(t, "needs nsjail where `execgate run` looks for it: %v", err)
	}
	state := t.TempDir()
	if err := os.Chmod(state, 0o700); err != nil { // private, as mktemp -d makes it: the jail reaches it through its view
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.py", "def run(args, context):\n    print('hello')\n    return {'got': args}\n")
	bad := write("bad.py", "def run(args, context):\n    raise ValueError('nope')\n")
	t.Setenv("EXECGATE_SANDBOX_CGROUP_PARENT", "execgate-cmdtest")
	// The runtimes the tests share (built once per machine), not a build
	// in the state dir each time.
	t.Setenv("EXECGATE_SANDBOX_RUNTIMES_DIR", testenv.RuntimesDir(t))

	t.Run("--runtime picks the interpreter", func(t *testing.T) {
		v := write("version.py", "import sys\ndef run(args, context):\n    return list(sys.version_info[:2])\n")
		for rt, want := range map[string]string{"python3.13": "[3,13]", "python3.11": "[3,11]", "": "[3,11]"} {
			args := []string{"--state-dir", state}
			if rt != "" {
				args = append(args, "--runtime", rt)
			}
			env, result, out := runJSON(t, v, args...)
			if env.Status != sandbox.StatusOK || result != want {
				t.Errorf("--runtime %q: %s", rt, out)
			}
		}
		if _, err := execute(t, "run", v, "--runtime", "python2.7", "--state-dir", state); err == nil || !strings.Contains(err.Error(), "--runtime") {
			t.Errorf("an unknown runtime: %v, want an error naming --runtime", err)
		}
	})

	t.Run("an ok tool prints its envelope and exits 0", func(t *testing.T) {
		env, result, out := runJSON(t, ok, "--args", `{"x": 1}`, "--state-dir", state)
		if env.Status != sandbox.StatusOK || result != `{"got":{"x":1}}` || env.Stdout != "hello\n" {
			t.Errorf("%s", out)
		}
	})
	t.Run("--file puts input files in /workspace, --stdin feeds stdin, --out writes the artifacts", func(t *testing.T) {
		in := write("in.csv", "a,b\n1,2\n3,4\n")
		stdin := write("stdin.txt", "from stdin\n")
		out := filepath.Join(dir, "artifacts")
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		secret := write("secret.txt", "keep")
		if err := os.Symlink(secret, filepath.Join(out, "link.txt")); err != nil {
			t.Fatal(err)
		}
		tool := write("files.py", `import sys
def run(args, context):
    rows = open("in.csv").read().splitlines() + open("data/again.csv").read().splitlines()
    with open("out/report.csv", "w") as f:
        f.write("%d,%s\n" % (len(rows), sys.stdin.read().strip()))
    context.artifacts.save("chart.png", b"\x89PNG\r\n\x1a\n", mime="image/png")
    context.artifacts.save("link.txt", "through the link?")
    return len(rows)
`)
		stdout, err := execute(t, "run", tool, "--file", in, "--file", in+"=data/again.csv", "--stdin", stdin, "--out", out, "--state-dir", state)
		if exitCode(err) != exitRunError || !strings.Contains(err.Error(), "link.txt is there already, a symbolic link: left alone") {
			t.Fatalf("want exit 1 naming link.txt, got %v\n%s", err, stdout)
		}
		for _, want := range []string{"result:    6", "chart.png (8 bytes, image/png): written", "report.csv (13 bytes, text/csv): written", "link.txt (17 bytes, text/plain): not written"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, stdout)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(out, "report.csv")); string(b) != "6,from stdin\n" {
			t.Errorf("report.csv = %q", b)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "chart.png")); string(b) != "\x89PNG\r\n\x1a\n" {
			t.Errorf("chart.png = %q", b)
		}
		if b, _ := os.ReadFile(secret); string(b) != "keep" {
			t.Errorf("the symbolic link in --out was written through: %q", b)
		}
		env, _, _ := runJSON(t, tool, "--file", in, "--file", in+"=data/again.csv", "--state-dir", state)
		if len(env.Artifacts) != 3 || env.Artifacts[0].Name != "chart.png" || env.Artifacts[0].Base64 != nil {
			t.Errorf("--json lists the artifacts without their bytes: %+v", env.Artifacts)
		}
		if _, err := execute(t, "run", tool, "--file", filepath.Join(dir, "missing.csv"), "--out", out, "--state-dir", state); err == nil || !strings.Contains(err.Error(), "--file "+filepath.Join(dir, "missing.csv")+": open") {
			t.Errorf("a missing file: %v", err)
		}
	})
	t.Run("a failing tool prints the traceback and exits 1", func(t *testing.T) {
		out, err := execute(t, "run", bad, "--state-dir", state)
		var ec exitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitRunError {
			t.Fatalf("want exit %d, got %v", exitRunError, err)
		}
		if !strings.Contains(out, "ToolError: ValueError: nope") || !strings.Contains(out, `File "tool.py", line 2`) {
			t.Errorf("output:\n%s", out)
		}
	})
	t.Run("smoke runs the probe", func(t *testing.T) {
		out, err := execute(t, "smoke", "--state-dir", state)
		if err != nil || !strings.Contains(out, "status:    ok") {
			t.Errorf("%v\n%s", err, out)
		}
	})
	t.Run("requirements are resolved, checked with the tenant's package policy, installed and importable", func(t *testing.T) {
		wheels := testenv.WriteWheels(t, filepath.Join(dir, "wheels"),
			testenv.Wheel{Name: "alpha", Version: "1.0", Requires: []string{"beta==1.0"}},
			testenv.Wheel{Name: "beta", Version: "1.0"})
		tenant := func(id, allow string) string {
			return "  - id: " + id + "\n    plan: standard\n    quota: { rate_per_minute: 600, burst: 20, concurrency: 4, daily_cpu_seconds: 3600 }\n" +
				"    policy: { network: [none], packages: { allow: [" + allow + "], deny: [] } }\n"
		}
		cfgFile := write("config.yaml", "state_dir: "+state+"\nauth: { hs256_secret_file: "+filepath.Join(state, "dev.key")+" }\n"+
			"sandbox:\n  uv_path: "+testenv.UV(t)+"\n  package_index: { find_links: ["+wheels+"], no_index: true }\n"+
			"tenants:\n"+tenant("demo", "alpha, beta")+tenant("strict", "alpha"))
		tool := write("alpha.py", "import alpha, beta\ndef run(args, context):\n    return [alpha.VERSION, beta.VERSION]\n")
		env, result, out := runJSON(t, tool, "--requirements", "alpha>=1", "--config", cfgFile)
		if env.Status != sandbox.StatusOK || result != `["1.0","1.0"]` {
			t.Fatalf("%s", out)
		}
		if _, err := os.Stat(filepath.Join(state, "deps")); err != nil {
			t.Errorf("the deps cache is not under the state dir: %v", err)
		}
		// The same run for a tenant that may not have beta: refused, exit 2,
		// nothing installed or run.
		out, err := execute(t, "run", tool, "--requirements", "alpha>=1", "--tenant", "strict", "--config", cfgFile)
		var ec exitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != 2 || strings.Contains(out, "status:") {
			t.Fatalf("want exit 2 and no envelope, got %v\n%s", err, out)
		}
	})
	t.Run("network proxy reaches only the --egress hosts", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "through the proxy") }))
		t.Cleanup(srv.Close)
		port := srv.Listener.Addr().(*net.TCPAddr).Port
		t.Setenv("EXECGATE_EGRESS_ALLOW_CIDRS", "127.0.0.1/32")
		tool := write("fetch.py", "import urllib.request, urllib.error\n"+
			"def run(args, context):\n"+
			"    out = []\n"+
			"    for url in args:\n"+
			"        try:\n"+
			"            out.append(urllib.request.urlopen(url, timeout=10).read().decode())\n"+
			"        except urllib.error.HTTPError as e:\n"+
			"            out.append(e.code)\n"+
			"    return out\n")
		urls, _ := json.Marshal([]string{fmt.Sprintf("http://127.0.0.1:%d/", port), fmt.Sprintf("http://localhost:%d/", port)})
		env, result, out := runJSON(t, tool, "--network", "proxy", "--egress", fmt.Sprintf("127.0.0.1:%d", port),
			"--args", string(urls), "--state-dir", state)
		if env.Status != sandbox.StatusOK || result != `["through the proxy",403]` {
			t.Errorf("want the allowed host's body and a 403 for the other: %s", out)
		}
		if len(env.Egress) != 2 || !env.Egress[0].Allowed || env.Egress[1].Allowed {
			t.Errorf("egress attempts: %+v", env.Egress)
		}
	})
	t.Run("without nsjail nothing runs and the exit is 3 with the hint", func(t *testing.T) {
		t.Setenv("EXECGATE_SANDBOX_NSJAIL_PATH", "/nonexistent/nsjail")
		out, err := execute(t, "run", ok, "--state-dir", state)
		var ec exitCoder
		if !errors.As(err, &ec) || ec.ExitCode() != exitSandboxMissing {
			t.Fatalf("want exit %d, got %v", exitSandboxMissing, err)
		}
		if !strings.Contains(out, "SandboxUnavailable") || !strings.Contains(out, "scripts/setup.sh") {
			t.Errorf("output:\n%s", out)
		}
	})
	for _, c := range []string{"memory", "pids", "cpu", "unified"} {
		os.Remove(filepath.Join("/sys/fs/cgroup", c, "execgate-cmdtest"))
	}
}

// runJSON runs `execgate run FILE ARGS… --json`, fails the test unless it
// exits 0 with an envelope, and returns the envelope, its result compacted
// and the raw output.
func runJSON(t *testing.T, file string, args ...string) (env execution.Envelope, result, out string) {
	t.Helper()
	out, err := execute(t, append([]string{"run", file, "--json"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, env.Result)
	return env, compact.String(), out
}
