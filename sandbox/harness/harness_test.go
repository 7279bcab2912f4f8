package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/execgate/execgate/jaillayout"
)

func TestHashCoversNamesAndContents(t *testing.T) {
	a := fstest.MapFS{"a.py": {Data: []byte("x")}, "b.py": {Data: []byte("y")}}
	b := fstest.MapFS{"a.py": {Data: []byte("x")}, "b.py": {Data: []byte("z")}}
	c := fstest.MapFS{"a.py": {Data: []byte("x")}, "c.py": {Data: []byte("y")}}
	ha, _ := hashFS(a)
	hb, _ := hashFS(b)
	hc, _ := hashFS(c)
	if ha == hb || ha == hc || len(ha) != 64 {
		t.Errorf("hashes %s %s %s", ha, hb, hc)
	}
	if h, err := hashFS(FS); err != nil || h != Hash() || len(h) != 64 {
		t.Errorf("Hash() = %q", Hash())
	}
	if got := strings.Join(Files(), ","); got != "execgate_deno.py,execgate_harness.js,execgate_harness.py,execgate_runtime.py,execgate_zygote.py,harness.py,import_map.json" {
		t.Errorf("Files() = %s", got)
	}
}

// runHarness runs the harness with the host interpreter (the same binary the
// rootfs copies) on a request and returns the envelope from fd 3. Only the
// fixed snippets below run this way; user code only ever runs in the jail.
func runHarness(t *testing.T, req string) map[string]any {
	t.Helper()
	cmd, r := harnessCommand(t)
	defer r.Close()
	cmd.Stdin = strings.NewReader(req)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	startHarness(t, cmd)
	return envelopeOf(t, cmd, r, &stderr)
}

// envelopeOf reads the envelope of a started harness from its result
// channel r, waits for the harness to exit and decodes the envelope; what
// it wrote on stderr, when captured (stderr not nil), is quoted in a
// failure.
func envelopeOf(t *testing.T, cmd *exec.Cmd, r *os.File, stderr *bytes.Buffer) map[string]any {
	t.Helper()
	var out bytes.Buffer
	if _, err := out.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	quoted := func() string {
		if stderr == nil {
			return ""
		}
		return "\n" + stderr.String()
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("harness: %v%s", err, quoted())
	}
	var env map[string]any
	if err := json.Unmarshal(out.Bytes(), &env); err != nil {
		t.Fatalf("envelope %q: %v%s", out.String(), err, quoted())
	}
	return env
}

// harnessCommand is the harness on the host interpreter (the same binary
// the rootfs copies) with extra interpreter flags, its result channel (fd
// 3) the write end of a pipe whose read end is returned; startHarness
// starts it.
func harnessCommand(t *testing.T, pyFlags ...string) (*exec.Cmd, *os.File) {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("%s missing: %v", py, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"-I", "-S", "-B", "-u"}, pyFlags...), "harness.py")
	cmd := exec.Command(py, args...)
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd, r
}

// startHarness starts cmd (harnessCommand) and closes the parent's copy of
// the result channel's write end.
func startHarness(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd.ExtraFiles[0].Close()
}

func request(source string, extra map[string]any) string {
	req := map[string]any{"protocol_version": 1, "source": source, "entrypoint": "run", "args": nil, "mode": "run", "output_bytes": 1000}
	for k, v := range extra {
		req[k] = v
	}
	b, _ := json.Marshal(req)
	return string(b)
}

func errType(env map[string]any) string {
	if e, ok := env["error"].(map[string]any); ok {
		return e["type"].(string)
	}
	return ""
}

func TestHarnessProtocol(t *testing.T) {
	tests := []struct {
		name    string
		req     string
		status  string
		errType string
		check   func(t *testing.T, env map[string]any)
	}{
		{name: "another protocol version is refused", req: `{"protocol_version": 2, "source": "def run(a, c): return 1"}`,
			status: "error", errType: "ProtocolMismatch"},
		{name: "a request that is not JSON is refused", req: `{"protocol_version": 1,`,
			status: "error", errType: "ProtocolMismatch"},
		{name: "trailing garbage after the request is refused", req: `{"protocol_version": 1} x`,
			status: "error", errType: "ProtocolMismatch"},
		{name: "the envelope carries the protocol version", req: request("def run(a, c): return [1, 'é', None]", nil),
			status: "ok", check: func(t *testing.T, env map[string]any) {
				if env["protocol_version"] != float64(1) || len(env["result"].([]any)) != 3 {
					t.Errorf("%v", env)
				}
			}},
		{name: "a ToolFailure with a type the tool may not claim becomes ToolError",
			req:    request("from execgate_runtime import ToolFailure\ndef run(a, c):\n    raise ToolFailure('Timeout', 'fake')\n", nil),
			status: "error", errType: "ToolError", check: func(t *testing.T, env map[string]any) {
				if msg := env["error"].(map[string]any)["message"]; msg != "Timeout: fake" {
					t.Errorf("message %v", msg)
				}
			}},
		{name: "sys.exit in the tool is a ToolError, not a silent exit",
			req:    request("import sys\ndef run(a, c):\n    sys.exit(3)\n", nil),
			status: "error", errType: "ToolError"},
		{name: "the logger formats and lands in the envelope, capped",
			req: request("from execgate_runtime import logger\ndef run(a, c):\n    logger.info('n=%d', 4)\n    for i in range(5):\n        c.log('x', level='error')\n    return 1\n",
				map[string]any{"max_log_lines": 3}),
			status: "ok", check: func(t *testing.T, env map[string]any) {
				logs := env["logs"].([]any)
				if len(logs) != 4 || logs[0].(map[string]any)["message"] != "n=4" || !strings.Contains(logs[3].(map[string]any)["message"].(string), "3 log lines dropped") {
					t.Errorf("logs %v", logs)
				}
			}},
		{name: "tools are not callable outside test mode",
			req:    request("def run(a, c):\n    return c.tools.weather()\n", map[string]any{"tools": map[string]any{"weather": 1}}),
			status: "error", errType: "ToolError"},
		{name: "a fixture call returns a copy", req: request("def run(a, c):\n    w = c.tools.w()\n    w['x'] = 2\n    return c.tools.w()\n", map[string]any{"mode": "test", "tools": map[string]any{"w": map[string]any{"x": 1}}}),
			status: "ok", check: func(t *testing.T, env map[string]any) {
				if env["result"].(map[string]any)["x"] != float64(1) {
					t.Errorf("result %v", env["result"])
				}
			}},
		{name: "a non-callable entrypoint is EntrypointNotFound", req: request("run = 3\n", nil),
			status: "error", errType: "EntrypointNotFound"},
		{name: "NaN is not JSON", req: request("def run(a, c): return float('nan')", nil),
			status: "error", errType: "InvalidResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := runHarness(t, tt.req)
			if env["status"] != tt.status || errType(env) != tt.errType {
				t.Fatalf("got %v/%q, want %s/%q: %v", env["status"], errType(env), tt.status, tt.errType, env)
			}
			if tt.check != nil {
				tt.check(t, env)
			}
		})
	}
}

// The harness files declare the protocol version again (they cannot import
// Go); this fails when one of them drifts from jaillayout.ProtocolVersion.
func TestHarnessFilesSpeakTheLayoutsProtocolVersion(t *testing.T) {
	decl := regexp.MustCompile(`(?m)^(?:const )?PROTOCOL_VERSION = (\d+);?$`)
	for _, name := range []string{"execgate_harness.py", "execgate_deno.py", "execgate_harness.js"} {
		data, err := FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		m := decl.FindAllSubmatch(data, -1)
		if len(m) != 1 {
			t.Errorf("%s: %d PROTOCOL_VERSION declarations, want 1", name, len(m))
			continue
		}
		if got, _ := strconv.Atoi(string(m[0][1])); got != jaillayout.ProtocolVersion {
			t.Errorf("%s: PROTOCOL_VERSION = %d, jaillayout.ProtocolVersion = %d", name, got, jaillayout.ProtocolVersion)
		}
	}
}

// The jail's entry warms up before it reads its request (a warm jail does
// it while it waits, off its run's path): by the time the harness blocks
// on stdin it has imported what every run loads after the hand-off
// (resource, and opcode to step a coroutine without an event loop).
// Without the warm-up these imports come only after the request.
func TestHarnessWarmsUpBeforeItsRequest(t *testing.T) {
	cmd, r := harnessCommand(t, "-X", "importtime")
	defer r.Close()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	startHarness(t, cmd)
	defer cmd.Process.Kill() //nolint:errcheck // a failed test's harness
	// Read -X importtime's lines until both imports show, the request not
	// yet sent; a harness that imports them only after it would block here
	// until the deadline.
	seen := map[string]bool{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	deadline := time.After(20 * time.Second)
	for !seen["resource"] || !seen["opcode"] {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the harness exited before its request; imports seen %v", seen)
			}
			if _, name, ok := strings.Cut(l, "| "); ok {
				if i := strings.LastIndex(name, "| "); i >= 0 {
					name = name[i+2:]
				}
				seen[strings.TrimSpace(name)] = true
			}
		case <-deadline:
			t.Fatalf("no warm-up before the request: imports seen %v", seen)
		}
	}
	go func() {
		for range lines {
		}
	}()
	if _, err := io.WriteString(stdin, request("async def run(args, context):\n    return {'n': 1}\n", nil)); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	env := envelopeOf(t, cmd, r, nil)
	if env["status"] != "ok" {
		t.Fatalf("envelope %v", env)
	}
	if res, _ := env["result"].(map[string]any); res["n"] != float64(1) {
		t.Fatalf("result %v: the warm-up's own result leaked into the run's", env["result"])
	}
}

// stdout and stderr end (flushed, their pipes closed, /dev/null in their
// place) before the envelope is written: a run at level process ends once
// its result channel closes and the harness is killed, and its output
// readers would otherwise wait for the harness's exit, after the kernel
// tore its memory down. Here the envelope (over 64 KiB) fills the result
// pipe, which nothing reads yet: the harness is still alive, blocked in
// its write, when both streams have ended with everything written.
func TestHarnessEndsItsOutputBeforeItsEnvelope(t *testing.T) {
	cmd, r := harnessCommand(t)
	defer r.Close()
	cmd.Stdin = strings.NewReader(request("import sys\ndef run(args, context):\n    print('out')\n    print('err', file=sys.stderr)\n    return 'x' * (256 << 10)\n", map[string]any{"output_bytes": 1 << 20}))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	startHarness(t, cmd)
	defer cmd.Process.Kill() //nolint:errcheck // a failed test's harness
	type ended struct {
		data []byte
		err  error
	}
	read := func(f io.Reader) chan ended {
		ch := make(chan ended, 1)
		go func() {
			b, err := io.ReadAll(f)
			ch <- ended{b, err}
		}()
		return ch
	}
	outc, errc := read(stdout), read(stderr)
	for name, c := range map[string]chan ended{"stdout": outc, "stderr": errc} {
		select {
		case e := <-c:
			if e.err != nil || !strings.Contains(string(e.data), name[3:]) {
				t.Fatalf("%s: %q %v", name, e.data, e.err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not end while the envelope waited to be read: it ends only with the harness's exit", name)
		}
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the harness is gone before its envelope was read: %v", err)
	}
	env := envelopeOf(t, cmd, r, nil)
	if result, _ := env["result"].(string); env["status"] != "ok" || len(result) != 256<<10 {
		t.Fatalf("envelope: status %v, a result of %d bytes, want ok and %d", env["status"], len(result), 256<<10)
	}
}
