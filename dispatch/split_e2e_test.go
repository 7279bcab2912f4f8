package dispatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
)

// The split as it is deployed: one `execgate serve --role gateway` with no
// nsjail, two `--role executor` processes and a real redis-server, each a
// separate OS process (issue #15 tests).

const (
	splitTenant = "acme"
	okSource    = "def run(args, context):\n    print('ran', args['i'])\n    return {'i': args['i']}\n"
	failSource  = "def run(args, context):\n    raise ValueError('no %d' % args['i'])\n"
	sleepSource = "import time\ndef run(args, context):\n    time.sleep(args['s'])\n    return {'i': args['i']}\n"
)

type splitEnv struct {
	t        testing.TB
	bin, dir string
	redis    *testenv.RedisServer
	rdb      *redis.Client
	key      []byte
	gwURL    string
	gw       *proc
	audit    string
	token    string
	rootfs   string
	nsjail   string
	execs    map[string]*proc
	mcp      *toolbridgetest.Server
	// runtimes names the runtimes of the executors whose id it lists
	// (default: the default runtime).
	runtimes map[string]string
	// policyExtra is appended to the tenant's policy map, execSandbox to
	// the executors' sandbox map (", key: value" each).
	policyExtra, execSandbox string
	// quotaExtra is appended to the tenant's quota map.
	quotaExtra string
	// toolsLimits, when set, is the tenant's tools.limits map.
	toolsLimits string
	// toolAllow is the math server's allow list (default "add").
	toolAllow string
	// dispatchRedis, when set, carries the runs instead of redis (which
	// keeps the quota and the idempotency claims); rdb is then its client.
	dispatchRedis *testenv.RedisServer
	// queueTimeoutMS is dispatch.queue_timeout_ms (default 20000).
	queueTimeoutMS int
	// gatewayExtra is appended to the gateway's config (top-level keys,
	// one per line); tenantExtra to its tenant (lines indented by 4).
	gatewayExtra, tenantExtra string
}

// useDispatchRedis moves the runs to a Redis of their own (the quota and
// the idempotency claims stay in e.redis).
func (e *splitEnv) useDispatchRedis() {
	e.dispatchRedis = testenv.Redis(e.t)
	e.rdb = redis.NewClient(&redis.Options{Addr: e.dispatchRedis.Addr()})
	e.t.Cleanup(func() { e.rdb.Close() })
}

// dispatchCfg is the dispatch section of a gateway or an executor.
func (e *splitEnv) dispatchCfg(extra string) string {
	url := e.redis.URL()
	if e.dispatchRedis != nil {
		url = e.dispatchRedis.URL()
	}
	qt := e.queueTimeoutMS
	if qt == 0 {
		qt = 20000
	}
	return fmt.Sprintf("dispatch: {redis_url: %s, spec_key_file: %s, heartbeat_ms: 300, queue_timeout_ms: %d%s}",
		url, filepath.Join(e.dir, "spec.key"), qt, extra)
}

type proc struct {
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	url  string
}

func newSplitEnv(t testing.TB) *splitEnv {
	t.Helper()
	testenv.RequireRoot(t)
	e := &splitEnv{t: t, dir: t.TempDir(), redis: testenv.Redis(t), nsjail: testenv.Nsjail(t), rootfs: testenv.Rootfs(t), execs: map[string]*proc{}}
	e.bin = testenv.BuildExecgate(t)
	// A tool server only the gateway holds the credential for.
	mcpToken := "split-" + strings.Repeat("m", 24)
	e.mcp = toolbridgetest.Start(t, mcpToken)
	writeFile(t, filepath.Join(e.dir, "mcp-token"), "Bearer "+mcpToken+"\n")
	e.key = []byte(strings.Repeat("k", 40))
	writeFile(t, filepath.Join(e.dir, "spec.key"), string(e.key))
	writeFile(t, filepath.Join(e.dir, "jwt.key"), strings.Repeat("j", 40))
	e.rdb = redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	t.Cleanup(func() { e.rdb.Close() })
	e.audit = filepath.Join(e.dir, "audit.jsonl")
	signer, err := auth.NewSigner(auth.Config{Issuer: "execgate", Audience: "execgate", HS256SecretFile: filepath.Join(e.dir, "jwt.key")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.token, err = signer.Mint(auth.Claims{Subject: "split-test", TenantID: splitTenant, Roles: []string{"executor"}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return e
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startGateway starts the gateway role with an nsjail path that points
// nowhere: it must serve all the same.
func (e *splitEnv) startGateway() {
	e.startServer("gateway", "{nsjail_path: /nonexistent/nsjail}")
}

// startServer starts a gateway of role (gateway, or all) with the sandbox
// section given.
func (e *splitEnv) startServer(role, sandboxCfg string) {
	t := e.t
	addr := freeAddr(t)
	allow := e.toolAllow
	if allow == "" {
		allow = "add"
	}
	cfg := fmt.Sprintf(`listen: %s
state_dir: %s
server: {role: `+role+`, max_concurrent_runs: 16, max_queue: 64, ready_cache_seconds: 1}
auth: {hs256_secret_file: %s}
sandbox: `+sandboxCfg+`
quota:
  backend: redis
  redis_url: %s
audit: {file: %s}
`+e.dispatchCfg("")+`
`+e.gatewayExtra+`tenants:
  - id: %s
    quota: {rate_per_minute: 100000, burst: 10000, concurrency: 32, daily_cpu_seconds: 100000`+e.quotaExtra+`}
    policy: {network: [none], egress_allow: [], tools: ["math.*"]`+e.policyExtra+`}
    tools:
      servers:
        - name: math
          url: %s
          headers: { Authorization: { file: %s } }
          allow: [`+allow+`]
`+e.toolsLimitsLine()+e.tenantExtra, addr, filepath.Join(e.dir, "gw"), filepath.Join(e.dir, "jwt.key"), e.redis.URL(), e.audit, splitTenant,
		e.mcp.URL, filepath.Join(e.dir, "mcp-token"))
	path := filepath.Join(e.dir, role+".yaml")
	writeFile(t, path, cfg)
	e.gwURL = "http://" + addr
	e.gw = e.start(role, path, e.gwURL)
}

func (e *splitEnv) toolsLimitsLine() string {
	if e.toolsLimits == "" {
		return ""
	}
	return "      limits: " + e.toolsLimits + "\n"
}

// startExecutor starts an executor with 2 slots.
func (e *splitEnv) startExecutor(id string) *proc { return e.startExecutorWith(id, 2, 0) }

// runtimesOf is the runtimes (a YAML flow list's items) of executor id.
func (e *splitEnv) runtimesOf(id string) string {
	if rts, ok := e.runtimes[id]; ok {
		return rts
	}
	return limits.DefaultRuntime
}

// startExecutorWith starts an executor with slots and warm jails.
func (e *splitEnv) startExecutorWith(id string, slots, warm int) *proc {
	t := e.t
	addr := freeAddr(t)
	cfg := fmt.Sprintf(`listen: %s
state_dir: %s
server: {role: executor, max_concurrent_runs: `+strconv.Itoa(slots)+`}
sandbox: {nsjail_path: %s, runtimes_dir: %s, runtimes: [%s], work_dir: %s, warm_pool: `+strconv.Itoa(warm)+e.execSandbox+`}
`+e.dispatchCfg(", executor_id: "+id)+`
`, addr, filepath.Join(e.dir, id), e.nsjail, filepath.Dir(e.rootfs), e.runtimesOf(id), testenv.JailDir(t))
	path := filepath.Join(e.dir, id+".yaml")
	writeFile(t, path, cfg)
	p := e.start(id, path, "http://"+addr)
	e.execs[id] = p
	return p
}

func (e *splitEnv) start(name, cfg, url string) *proc {
	t := e.t
	cmd := exec.Command(e.bin, "serve", "--config", cfg)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, clip(logs.String(), 20000))
		}
	})
	waitFor(t, 60*time.Second, name+" /healthz", func() bool {
		resp, err := http.Get(url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &proc{cmd: cmd, logs: logs, url: url}
}

func waitFor(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type envelope struct {
	ExecutionID string          `json:"execution_id"`
	Status      string          `json:"status"`
	Result      json.RawMessage `json:"result"`
	Stdout      string          `json:"stdout"`
	ToolCalls   []struct {
		Tool    string `json:"tool"`
		Outcome string `json:"outcome"`
	} `json:"tool_calls"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Usage struct {
		Isolation   string `json:"isolation"`
		BridgeCPUMS int64  `json:"bridge_cpu_ms"`
	} `json:"usage"`
}

func (v envelope) errType() string {
	if v.Error == nil {
		return ""
	}
	return v.Error.Type
}

func (e *splitEnv) execute(body map[string]any) (int, envelope, error) {
	body["tenant_id"] = splitTenant
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.gwURL+"/v1/execute", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, envelope{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return resp.StatusCode, env, fmt.Errorf("decoding %s: %w", raw, err)
	}
	return resp.StatusCode, env, nil
}

// executeAsync submits body as an async run (POST /v1/executions: 202 and
// a Location) and reads GET Location until the run is done; it returns
// the run's HTTP status and envelope as /v1/execute would have.
func (e *splitEnv) executeAsync(body map[string]any) (int, envelope, error) {
	body["tenant_id"] = splitTenant
	b, _ := json.Marshal(body)
	do := func(method, path string, body io.Reader) (int, http.Header, []byte, error) {
		req, _ := http.NewRequest(method, e.gwURL+path, body)
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, raw, nil
	}
	st, hdr, raw, err := do(http.MethodPost, "/v1/executions", bytes.NewReader(b))
	if err != nil {
		return 0, envelope{}, err
	}
	loc := hdr.Get("Location")
	if st != http.StatusAccepted || loc == "" {
		return st, envelope{}, fmt.Errorf("submit: %d (Location %q): %s", st, loc, raw)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, _, raw, err := do(http.MethodGet, loc, nil)
		if err != nil {
			return 0, envelope{}, err
		}
		var got struct {
			Status     string   `json:"status"`
			HTTPStatus int      `json:"http_status"`
			Envelope   envelope `json:"envelope"`
		}
		if st != http.StatusOK || json.Unmarshal(raw, &got) != nil {
			return st, envelope{}, fmt.Errorf("GET %s: %d %s", loc, st, raw)
		}
		if got.Status == "done" {
			return got.HTTPStatus, got.Envelope, nil
		}
		if time.Now().After(deadline) {
			return 0, envelope{}, fmt.Errorf("GET %s: still %s after 60s", loc, got.Status)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, as a client would
	}
}

type readyz struct {
	Ready  bool `json:"ready"`
	Checks []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
		Error  string `json:"error"`
	} `json:"checks"`
}

func (e *splitEnv) readyz() (int, readyz) {
	resp, err := http.Get(e.gwURL + "/readyz")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r readyz
	_ = json.NewDecoder(resp.Body).Decode(&r)
	return resp.StatusCode, r
}

func (r readyz) check(name string) (ok bool, detail, errMsg string) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c.OK, c.Detail, c.Error
		}
	}
	return false, "", "no such check"
}

// logLines returns the JSON log lines of p with message msg.
func logLines(p *proc, msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// startedBy maps execution ids to the executors that started them, and
// counts every start.
func (e *splitEnv) startedBy() (map[string][]string, int) {
	by := map[string][]string{}
	n := 0
	for id, p := range e.execs {
		for _, m := range logLines(p, "dispatch: run started") {
			x, _ := m["execution_id"].(string)
			by[x] = append(by[x], id)
			n++
		}
	}
	return by, n
}

// auditOutcomes maps execution ids to their audit records' outcomes.
func (e *splitEnv) auditOutcomes() map[string][]string {
	b, err := os.ReadFile(e.audit)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var r struct {
			ExecutionID string `json:"execution_id"`
			Outcome     struct {
				Status    string `json:"status"`
				ErrorType string `json:"error_type"`
			} `json:"outcome"`
		}
		if json.Unmarshal(line, &r) == nil && r.ExecutionID != "" {
			out[r.ExecutionID] = append(out[r.ExecutionID], r.Outcome.Status+"/"+r.Outcome.ErrorType)
		}
	}
	return out
}

func TestSplitGatewayAndExecutors(t *testing.T) {
	e := newSplitEnv(t)
	e.startGateway()

	t.Run("the gateway serves without nsjail and refuses every run while no executor lives", func(t *testing.T) {
		status, env, err := e.execute(map[string]any{"source": okSource, "args": map[string]any{"i": 0}})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusServiceUnavailable || env.errType() != "SandboxUnavailable" || !strings.Contains(env.Error.Message, "no executor") {
			t.Fatalf("execute with no executor = %d %+v, want 503 SandboxUnavailable naming no executor", status, env.Error)
		}
		code, r := e.readyz()
		ok, _, msg := r.check("executors")
		if code != http.StatusServiceUnavailable || r.Ready || ok || !strings.Contains(msg, "no executor") {
			t.Fatalf("/readyz with no executor = %d %+v", code, r)
		}
		if n, _ := e.rdb.XLen(context.Background(), newKeys("execgate").runsFor(limits.DefaultRuntime)).Result(); n != 0 {
			t.Fatalf("%d runs were queued with no executor alive", n)
		}
	})

	e.startExecutor("ex-a")
	e.startExecutor("ex-b")
	waitFor(t, 30*time.Second, "/readyz naming both executors", func() bool {
		code, r := e.readyz()
		ok, detail, _ := r.check("executors")
		return code == http.StatusOK && ok && strings.Contains(detail, "ex-a") && strings.Contains(detail, "ex-b")
	})

	t.Run("mixed runs complete exactly once each", func(t *testing.T) {
		n := 300
		if s := os.Getenv("EXECGATE_SPLIT_RUNS"); s != "" {
			n, _ = strconv.Atoi(s)
		}
		// Sync and async (POST /v1/executions, then GET until done) runs.
		kinds := []string{"ok", "async ok", "tool error", "denied"}
		type sent struct {
			kind   string
			status int
			env    envelope
			err    error
		}
		results := make([]sent, n)
		var wg sync.WaitGroup
		next := make(chan int)
		start := time.Now()
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					kind := kinds[i%len(kinds)]
					body := map[string]any{"source": okSource, "args": map[string]any{"i": i}}
					switch kind {
					case "tool error":
						body["source"] = failSource
					case "denied":
						body["network_access"] = "host"
					}
					exec := e.execute
					if kind == "async ok" {
						exec = e.executeAsync
					}
					st, env, err := exec(body)
					results[i] = sent{kind, st, env, err}
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		elapsed := time.Since(start)
		t.Logf("%d mixed runs through the split in %v (%.1f req/s at c=8)", n, elapsed, float64(n)/elapsed.Seconds())

		started, total := e.startedBy()
		audits := e.auditOutcomes()
		dispatched := 0
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("run %d: %v", i, r.err)
			}
			id := r.env.ExecutionID
			want := map[string]string{"ok": "ok/", "async ok": "ok/", "tool error": "error/ToolError", "denied": "error/PolicyDenied"}[r.kind]
			if got := r.env.Status + "/" + r.env.errType(); got != want {
				t.Fatalf("run %d (%s) = %d %s, want %s", i, r.kind, r.status, got, want)
			}
			if strings.HasSuffix(r.kind, "ok") && string(r.env.Result) != fmt.Sprintf(`{"i":%d}`, i) && string(r.env.Result) != fmt.Sprintf(`{"i": %d}`, i) {
				t.Fatalf("run %d result %s: another run's answer", i, r.env.Result)
			}
			if got := audits[id]; len(got) != 1 || got[0] != want {
				t.Fatalf("run %d (%s): audit records %v, want exactly one %s", i, id, got, want)
			}
			wantStarts := 1
			if r.kind == "denied" {
				wantStarts = 0
			}
			if len(started[id]) != wantStarts {
				t.Fatalf("run %d (%s, %s) was started %d times by %v, want %d", i, id, r.kind, len(started[id]), started[id], wantStarts)
			}
			dispatched += wantStarts
		}
		probes := total - dispatched // the readiness probe's own runs
		for id := range started {
			if strings.HasPrefix(id, "readyz-") && len(started[id]) != 1 {
				t.Fatalf("probe %s started %d times", id, len(started[id]))
			}
		}
		perExec := map[string]int{}
		for _, ids := range started {
			for _, x := range ids {
				perExec[x]++
			}
		}
		t.Logf("starts per executor %v (%d probes)", perExec, probes)
		if perExec["ex-a"] == 0 || perExec["ex-b"] == 0 {
			t.Fatalf("one executor ran nothing: %v", perExec)
		}
	})

	t.Run("a tool call from a run on an executor is served by the gateway that owns the run", func(t *testing.T) {
		const src = "def run(args, context):\n    return context.tools.run('math.add', {'a': 2, 'b': args['b']})\n"
		before := e.mcp.Calls("add")
		status, env, err := e.execute(map[string]any{"source": src, "args": map[string]any{"b": 40}})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusOK || env.Status != "ok" || string(env.Result) != `{"sum":42}` {
			t.Fatalf("code-mode run = %d %s %s %+v", status, env.Status, env.Result, env.Error)
		}
		// The executor's usage reaches the caller whole, the level it ran at too.
		if env.Usage.Isolation != "jail" {
			t.Fatalf("usage.isolation through the split = %q, want jail", env.Usage.Isolation)
		}
		if got := e.mcp.Calls("add") - before; got != 1 {
			t.Fatalf("the tool server saw %d calls, want 1", got)
		}
		if len(env.ToolCalls) != 1 || env.ToolCalls[0].Tool != "math.add" || env.ToolCalls[0].Outcome != "ok" {
			t.Fatalf("envelope tool_calls %+v", env.ToolCalls)
		}
		for id, p := range e.execs {
			if strings.Contains(p.logs.String(), "split-mmmm") {
				t.Fatalf("executor %s saw the tool credential", id)
			}
		}
	})

	t.Run("a run on an executor streams its output to the caller as it comes", func(t *testing.T) {
		// POST /v1/execute with Accept: text/event-stream: the first line
		// reaches the caller while the tool sleeps, before the envelope.
		// The tool sleeps 2.5 s and the line must lead by 1 s: a loaded
		// host may be slow to relay it, not 1.5 s slow.
		src := "import sys, time\ndef run(args, context):\n    print('one', flush=True)\n    time.sleep(2.5)\n    print('two', flush=True)\n    return 7\n"
		s := e.executeSSE(map[string]any{"source": src, "limits": map[string]any{"timeout_ms": 10000}})
		first := s.until(t, "one")
		firstAt := time.Now()
		rest, env := s.end(t)
		envAt := time.Now()
		stdout := first + rest
		if env.Status != "ok" || string(env.Result) != "7" || stdout != "one\ntwo\n" {
			t.Fatalf("envelope %+v, stdout %q", env, stdout)
		}
		if firstAt.IsZero() || envAt.Sub(firstAt) < time.Second {
			t.Fatalf("the first line came %v before the envelope; want it while the tool slept (2.5 s)", envAt.Sub(firstAt))
		}
	})

	t.Run("a forged or altered spec pushed into the stream is refused", func(t *testing.T) {
		ctx := context.Background()
		k := newKeys("execgate")
		s := signer{e.key}
		job := func(src string) Job {
			now := time.Now()
			return Job{V: WireVersion, RunID: newRunID(), Gateway: "test", IssuedMS: now.UnixMilli(), ExpiresMS: now.Add(time.Minute).UnixMilli(),
				Spec: WireSpec{ExecutionID: "direct-" + newRunID()[:8], TenantID: splitTenant, Language: "python", Source: src,
					Entrypoint: "run", Args: json.RawMessage(`{"i":7}`), Mode: "run", Network: sandbox.NetworkNone, Limits: sandbox.Limits{
						TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 128, Pids: 16, OutputBytes: 65536, TmpMB: 8}.Or(limits.Default)}}
		}
		push := func(v string) string {
			id, err := e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.runsFor(limits.DefaultRuntime), Values: []string{"job", v}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		// Forged: signed with another key.
		forged := job(okSource)
		fb, _ := json.Marshal(forged)
		forgedID := push(signer{[]byte(strings.Repeat("x", 40))}.seal(domainJob, fb))
		// Altered: signed with the real key, then the source changed.
		altered := job(okSource)
		ab, _ := json.Marshal(altered)
		sealed := s.seal(domainJob, ab)
		alteredID := push(strings.Replace(sealed, "print('ran'", "print('pwn'", 1))
		// Expired, properly signed.
		expired := job(okSource)
		expired.ExpiresMS = time.Now().Add(-time.Second).UnixMilli()
		xb, _ := json.Marshal(expired)
		expiredID := push(s.seal(domainJob, xb))
		// Control: the same push of a genuine job runs, so the refusals
		// above are the signature's doing.
		good := job(okSource)
		gb, _ := json.Marshal(good)
		push(s.seal(domainJob, gb))
		confirmAsGateway(t, e.rdb, e.key, good.RunID)

		kv, err := e.rdb.BLPop(ctx, 20*time.Second, k.reply(good.RunID)).Result()
		if err != nil {
			t.Fatalf("the genuine job got no reply: %v", err)
		}
		payload, err := s.open(domainReply, kv[1])
		if err != nil {
			t.Fatalf("the reply does not verify: %v", err)
		}
		var r Reply
		if err := json.Unmarshal(payload, &r); err != nil || r.Result == nil || r.Result.Status != sandbox.StatusOK {
			t.Fatalf("genuine job reply %s", payload)
		}
		// Refusals by stream entry: a payload that does not verify is
		// never decoded, so its refusal names no run.
		refused := map[string]string{}
		waitFor(t, 10*time.Second, "three refusals", func() bool {
			for _, p := range e.execs {
				for _, m := range logLines(p, "dispatch: refused a job") {
					id, _ := m["stream_id"].(string)
					refused[id], _ = m["reason"].(string)
				}
			}
			return len(refused) >= 3
		})
		for id, want := range map[string]string{forgedID: "signature", alteredID: "signature", expiredID: "expired"} {
			if why, ok := refused[id]; !ok || !strings.Contains(why, want) {
				t.Fatalf("entry %s: refusal %q (ok %v), want one naming %q; all: %v", id, why, ok, want, refused)
			}
		}
		for _, j := range []Job{forged, altered, expired} {
			if n, _ := e.rdb.Exists(ctx, k.started(j.RunID), k.reply(j.RunID)).Result(); n != 0 {
				t.Fatalf("run %s was taken or answered", j.RunID)
			}
			if ids := mustStarted(e)[j.Spec.ExecutionID]; len(ids) != 0 {
				t.Fatalf("refused run %s was started by %v", j.Spec.ExecutionID, ids)
			}
		}
		if n, _ := e.rdb.XLen(ctx, k.refused()).Result(); n < 3 {
			t.Fatalf("refused stream holds %d entries, want >= 3", n)
		}
	})

	t.Run("an executor killed mid-run: its runs end ExecutorLost, queued runs move, nothing runs twice", func(t *testing.T) {
		type res struct {
			status int
			env    envelope
			err    error
		}
		const long, short = 4, 4
		out := make([]res, long+short)
		var wg sync.WaitGroup
		submit := func(i int, body map[string]any) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, env, err := e.execute(body)
				out[i] = res{st, env, err}
			}()
		}
		base := nonProbeStarts(e)
		// Fill the four slots with runs of 4 s...
		for i := 0; i < long; i++ {
			submit(i, map[string]any{"source": sleepSource, "args": map[string]any{"i": i, "s": 4}, "limits": map[string]any{"timeout_ms": 15000}})
		}
		waitFor(t, 20*time.Second, "all four slots busy", func() bool { return nonProbeStarts(e) >= base+long })
		// ...then queue short runs behind them, and kill one executor.
		for i := long; i < long+short; i++ {
			submit(i, map[string]any{"source": okSource, "args": map[string]any{"i": i}})
		}
		waitFor(t, 10*time.Second, "the short runs queued", func() bool {
			n, _ := e.rdb.XLen(context.Background(), newKeys("execgate").runsFor(limits.DefaultRuntime)).Result()
			return n >= short
		})
		victim := e.execs["ex-a"]
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		started, _ := e.startedBy()
		lost := 0
		for i, r := range out {
			if r.err != nil {
				t.Fatalf("run %d: %v", i, r.err)
			}
			by := started[r.env.ExecutionID]
			if len(by) != 1 {
				t.Fatalf("run %d (%s) started by %v, want exactly one executor", i, r.env.ExecutionID, by)
			}
			switch {
			case i < long && by[0] == "ex-a":
				lost++
				if r.env.errType() != "ExecutorLost" {
					t.Fatalf("run %d ran on the killed executor but answered %s %+v", i, r.env.Status, r.env.Error)
				}
			case i >= long && by[0] != "ex-b":
				t.Fatalf("queued run %d was started by %s, want the surviving ex-b", i, by[0])
			default:
				if r.status != http.StatusOK || r.env.Status != "ok" {
					t.Fatalf("run %d on %s = %d %s %+v", i, by[0], r.status, r.env.Status, r.env.Error)
				}
			}
			if a := e.auditOutcomes()[r.env.ExecutionID]; len(a) != 1 {
				t.Fatalf("run %d has audit records %v", i, a)
			}
		}
		if lost == 0 {
			t.Fatal("no run was on the killed executor")
		}
		// Nothing is left for anyone to claim and run again.
		pend, err := e.rdb.XPending(context.Background(), newKeys("execgate").runsFor(limits.DefaultRuntime), group).Result()
		if err != nil || pend.Count != 0 {
			t.Fatalf("pending entries after the kill: %+v %v", pend, err)
		}
		t.Logf("%d runs ExecutorLost; %d queued runs moved to ex-b", lost, short)
	})

	t.Run("the last executor stopping withdraws its heartbeat: not ready, runs refused, nothing queued", func(t *testing.T) {
		last := e.execs["ex-b"]
		if err := last.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := last.cmd.Wait(); err != nil {
			t.Fatalf("ex-b did not stop cleanly: %v", err)
		}
		// No waiting for the heartbeat to expire: the executor withdrew it.
		code, r := e.readyz()
		if ok, _, _ := r.check("executors"); code != http.StatusServiceUnavailable || ok {
			t.Fatalf("/readyz after the last executor stopped = %d %+v", code, r)
		}
		status, env, err := e.execute(map[string]any{"source": okSource, "args": map[string]any{"i": 1}})
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusServiceUnavailable || env.errType() != "SandboxUnavailable" || !strings.Contains(env.Error.Message, "no executor") {
			t.Fatalf("execute with no executor = %d %+v", status, env.Error)
		}
		if n, _ := e.rdb.XLen(context.Background(), newKeys("execgate").runsFor(limits.DefaultRuntime)).Result(); n != 0 {
			t.Fatalf("%d runs queued with no executor alive", n)
		}
	})
}

func mustStarted(e *splitEnv) map[string][]string {
	by, _ := e.startedBy()
	return by
}

// nonProbeStarts counts the runs started that are not readiness probes.
func nonProbeStarts(e *splitEnv) int {
	by, _ := e.startedBy()
	n := 0
	for id := range by {
		if !strings.HasPrefix(id, "readyz-") {
			n++
		}
	}
	return n
}
